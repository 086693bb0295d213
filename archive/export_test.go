package archive

import "time"

// SetBlobClock replaces the clock an InstrumentedBlobs measures latency with, so a test can give a call
// an exact duration instead of timing it.
func SetBlobClock(in *InstrumentedBlobs, now func() time.Time) { in.now = now }

// SetBeforeRows makes p run fn after it wrote a batch's segments and before it writes their rows, so a
// test can force an interleaving there (a collector, a crash).
func SetBeforeRows(p *Packed, fn func(segments []string)) { p.beforeRows = fn }
