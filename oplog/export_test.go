package oplog

import "time"

// SetTombstoneClock sets the clock a stack's erasures and archive steps read (WithTombstones first).
func SetTombstoneClock(s *Stack, now func() time.Time) { s.tombs.now = now }
