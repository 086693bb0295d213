package indexedstorage

import "time"

// SetClock replaces the clock an Instrumented measures latency with, so a test can give a call an
// exact duration instead of timing it.
func SetClock(in *Instrumented, now func() time.Time) { in.now = now }
