package archive

import "time"

// SetBlobClock replaces the clock an InstrumentedBlobs measures latency with, so a test can give a call
// an exact duration instead of timing it.
func SetBlobClock(in *InstrumentedBlobs, now func() time.Time) { in.now = now }
