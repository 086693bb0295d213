// Package grace lets work started under a context outlive its cancellation by a bounded grace: the
// shape of a shutdown that finishes what is under way but cannot be held by it.
package grace

import (
	"context"
	"sync"
	"time"
)

// After returns a context that is not cancelled with ctx but grace after it (with cause as its
// context.Cause), or when release is called. Work that must finish across a shutdown runs under it;
// release it once that work has returned.
func After(ctx context.Context, grace time.Duration, cause error) (_ context.Context, release func()) {
	base, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(grace, func() { cancel(cause) })
	})
	return base, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(nil)
	}
}
