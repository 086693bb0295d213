package sweeper

import (
	"sync"
	"time"
)

// byteBucket is sweep.max_bytes_per_second: a token bucket of bytes, refilled at rate a second up to
// one second's worth. What a batch moves is known only when it ends, so spending may take the bucket
// below zero; a new batch starts only while it holds some (allow). Over any window of T seconds the
// bytes spent are at most rate·(T+1) plus what the batches under way at its end move.
type byteBucket struct {
	mu     sync.Mutex
	rate   float64 // bytes a second
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

func newByteBucket(perSecond int, now time.Time) *byteBucket {
	return &byteBucket{rate: float64(perSecond), tokens: float64(perSecond), at: now}
}

// refill brings tokens up to now; b.mu is held.
func (b *byteBucket) refill(now time.Time) {
	if elapsed := now.Sub(b.at).Seconds(); elapsed > 0 {
		b.tokens = min(b.tokens+elapsed*b.rate, b.rate)
		b.at = now
	}
}

// allow reports whether a batch may start at now: the bucket is not empty.
func (b *byteBucket) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return b.tokens > 0
}

// spend takes the bytes a batch moved from the bucket.
func (b *byteBucket) spend(now time.Time, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens -= float64(bytes)
}
