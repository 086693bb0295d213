// Package bounds is the one Range type the sweep, the scheduler, the configuration and the CLI share,
// so a range is written once where its value is used and read from there by every place that checks
// it.
package bounds

import "time"

// Range is the values a count or duration may take, bounds included. The bounds are far from any
// sensible setting; they exist so that no value validates and then misbehaves (a budget whose page
// count overflows, a backoff that wraps, a lease that rounds to nothing).
type Range[T int | time.Duration] struct{ Min, Max T }

// Contains reports whether v is within the range, bounds included.
func (r Range[T]) Contains(v T) bool { return v >= r.Min && v <= r.Max }

// ShutdownGrace is the range of the process's one shutdown grace, which the sweep and the scheduler
// both honour.
var ShutdownGrace = Range[time.Duration]{Min: 0, Max: time.Hour}
