package sweeper

import (
	"math"
	"sync"
	"time"
)

// byteBucket is sweep.max_bytes_per_second: a token bucket of bytes, refilled at rate a second up to
// one second's worth. What a batch moves is known only when it ends, so spending may take the bucket
// below zero; a new batch starts only while it holds some (wait is 0), and the archive phase waits for
// it otherwise. A batch reserves its likely bytes as it starts (Sweeper.reserveBytes) and settles when
// it ends. Over any window of T seconds the bytes spent are at most rate·(T+1) plus what the batches
// under way at its end move beyond their reservations.
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

// wait is how long from now until the bucket holds some bytes again: 0 when it does now.
func (b *byteBucket) wait(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens > 0 {
		return 0
	}
	// Rounded up, and past the instant tokens reach exactly 0, so that the wait ends with some in it.
	return time.Duration(math.Ceil(-b.tokens/b.rate*float64(time.Second))) + time.Millisecond
}

// spend takes bytes from the bucket: what a batch reserved as it started, and when it ends what it
// moved beyond that (negative: gives back what it reserved and did not move).
func (b *byteBucket) spend(now time.Time, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens -= float64(bytes)
}
