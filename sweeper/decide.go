package sweeper

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/backoff"
	"github.com/stratalog/strata/oplog"
)

// The decisions of a tick, as free functions with no I/O: everything here is tested without storage.

// Outcome is what a tick decided about one scanned key.
type Outcome string

const (
	OutcomeUnparseable   Outcome = "unparseable"    // the key is no agent's stored key: named, never archived or deleted
	OutcomeNotOwned      Outcome = "not_owned"      // the agent's shard belongs to another executor
	OutcomeResident      Outcome = "resident"       // the executor runs it: skipped with no storage read
	OutcomeActive        Outcome = "active"         // durable, active within durable_min_idle: skipped with no storage read
	OutcomeEmpty         Outcome = "empty"          // the layer holds nothing for it any more: forgotten
	OutcomeUnreadable    Outcome = "unreadable"     // its read failed: skipped this pass, retried the next
	OutcomeWaiting       Outcome = "waiting"        // sighted; not yet quiet across two passes
	OutcomeUntracked     Outcome = "untracked"      // the tracking table was full: not remembered
	OutcomeDeclined      Outcome = "declined"       // at the archive step: gone, moved on or locked
	OutcomeArchiveFailed Outcome = "archive_failed" // the archive step failed or hit the step cap: a later pass tries again
	// OutcomeIntegrityFailed: the archive step met data that fails an integrity check (a chunk's
	// checksum, a reused index). The agent stays tracked and is tried again, but no retry fixes it by
	// itself: its entries stay where they are and wait for an operator.
	OutcomeIntegrityFailed Outcome = "integrity_failed"
	OutcomeArchived        Outcome = "archived" // drained to the bottom layer
)

// Outcomes lists every Outcome, in the order of a key's journey.
var Outcomes = []Outcome{OutcomeUnparseable, OutcomeNotOwned, OutcomeResident, OutcomeActive, OutcomeUnreadable, OutcomeEmpty,
	OutcomeWaiting, OutcomeUntracked, OutcomeDeclined, OutcomeArchiveFailed, OutcomeIntegrityFailed, OutcomeArchived}

// failure is the outcome of an archive step that failed with err: integrity_failed for data no retry
// can fix (oplog.ErrIntegrity: a chunk that fails its checksum or parse, a reused index), else
// archive_failed (a timeout, a refused call, the step cap), which a later pass tries again.
func failure(err error) Outcome {
	if errors.Is(err, oplog.ErrIntegrity) {
		return OutcomeIntegrityFailed
	}
	return OutcomeArchiveFailed
}

// Reason is why a tick stopped before its work was done.
type Reason string

const (
	ReasonScanBudget    Reason = "scan_budget"
	ReasonArchiveBudget Reason = "archive_budget"
	ReasonDeadline      Reason = "deadline"
	ReasonShutdown      Reason = "shutdown"
)

// Reasons lists every Reason: the reason label's values of oplog_sweep_truncated_total.
var Reasons = []Reason{ReasonScanBudget, ReasonArchiveBudget, ReasonDeadline, ReasonShutdown}

// Assignment is the executor's current shard assignment.
type Assignment struct {
	ShardCount int       // how many shards the cluster has
	Shards     []int     // the ones this executor owns
	LeaseUntil time.Time // the assignment may have moved after this; zero: no lease
}

// MaxShardCount is the most shards a cluster may have; MaxLease the longest assignment lease. Both keep
// values that validate from misbehaving later (a lease of 10^12 s wraps a time.Duration).
const (
	MaxShardCount = 16384
	MaxLease      = 366 * 24 * time.Hour
)

// ErrInvalidAssignment is returned by NewAssignment for a shard assignment that cannot be used.
var ErrInvalidAssignment = errors.New("invalid shard assignment")

// NewAssignment validates an assignment and returns it with its shards sorted: shardCount from 0 to
// MaxShardCount, shards distinct and within 0..shardCount-1, lease from 0 (none: the assignment never
// lapses) to MaxLease, counted from now. The HTTP API and the CLI both build assignments here.
func NewAssignment(shardCount int, shards []int, lease time.Duration, now time.Time) (Assignment, error) {
	if shardCount < 0 || shardCount > MaxShardCount {
		return Assignment{}, fmt.Errorf("%w: shard count %d, want 0 to %d", ErrInvalidAssignment, shardCount, MaxShardCount)
	}
	seen := make(map[int]bool, len(shards))
	for _, sh := range shards {
		if sh < 0 || sh >= shardCount {
			return Assignment{}, fmt.Errorf("%w: shard %d is outside 0..%d (shard count %d)", ErrInvalidAssignment, sh, shardCount-1, shardCount)
		}
		if seen[sh] {
			return Assignment{}, fmt.Errorf("%w: shard %d is listed twice", ErrInvalidAssignment, sh)
		}
		seen[sh] = true
	}
	if lease < 0 || lease > MaxLease {
		return Assignment{}, fmt.Errorf("%w: lease %s, want 0 (none) to %s", ErrInvalidAssignment, lease, MaxLease)
	}
	a := Assignment{ShardCount: shardCount, Shards: slices.Sorted(slices.Values(shards))}
	if lease > 0 {
		a.LeaseUntil = now.Add(lease)
	}
	return a, nil
}

// Reasons the sweep stands down, the values of oplog_sweep_standing_down's reason label. An embedder's
// Options.StandDown adds its own (the sidecar: residency_stale).
const (
	StandDownNoAssignment = "no_assignment"
	StandDownNoShards     = "no_shards"
	StandDownLeaseLapsed  = "lease_lapsed"
)

// usable reports whether an assignment lets the sweep archive anything now: it exists, has shards,
// and its lease has not lapsed (after a lapse the shards may have moved, and residency cannot see the
// new owner's agents). When it does not, reason is the stand-down label and why says it in words.
func usable(a Assignment, known bool, now time.Time) (ok bool, reason, why string) {
	switch {
	case !known:
		return false, StandDownNoAssignment, "no shard assignment"
	case len(walkRanges(a)) == 0:
		// No shard, or none that exists among ShardCount (a shard ≥ ShardCount, a count outside
		// 1..MaxShardCount): nothing to walk.
		return false, StandDownNoShards, "assignment has no shards"
	case !a.LeaseUntil.IsZero() && !now.Before(a.LeaseUntil):
		return false, StandDownLeaseLapsed, "assignment lease lapsed"
	}
	return true, "", ""
}

// walkRanges is what a pass walks for an assignment: the buckets of its shards, as few key ranges as
// they make (neighbouring shards are one range). A usable assignment always has at least one.
func walkRanges(a Assignment) []oplog.BucketRange {
	return oplog.CoalesceBuckets(oplog.ShardsBuckets(a.ShardCount, a.Shards))
}

// part is one key range a pass walks: a range of buckets (Layer.ScanAgents), or a part of the namespace
// outside every bucket (oplog.OutsideBuckets, walked with oplog.RangeScanner.ScanRange), where no agent
// is stored and every key is counted unparseable.
type part struct {
	buckets   oplog.BucketRange
	outside   is.KeyRange
	isOutside bool
}

// walkParts is what a pass of a route walks for an assignment: when scansOutside (the route's source
// can walk any key range) and the assignment owns bucket 0, first the parts of the namespace outside
// every bucket (below the first, above the last), then the bucket ranges of walkRanges. One owner per
// bucket means one sidecar of a fleet walks the outside parts, so the fleet counts each key there once a
// pass. They come first so that a pass still ends where its walk of buckets ends, as it did before they
// were walked: a tick that finishes the buckets finishes the pass.
func walkParts(a Assignment, scansOutside bool) []part {
	ranges := walkRanges(a)
	if len(ranges) == 0 {
		return nil
	}
	var parts []part
	if scansOutside && ownsBucket(a, 0) {
		for _, r := range oplog.OutsideBuckets() {
			parts = append(parts, part{outside: r, isOutside: true})
		}
	}
	for _, r := range ranges {
		parts = append(parts, part{buckets: r})
	}
	return parts
}

// parseAgent turns a scanned key, a stored key, into an agent; a key that is no agent's stored key
// (no bucket prefix, or the prefix of another bucket) is not one.
func parseAgent(key string) (oplog.AgentID, bool) {
	a, err := oplog.ParseStoredKey(key)
	return a, err == nil
}

// owns reports whether the assignment owns the agent's shard.
func owns(a Assignment, agent oplog.AgentID) bool { return ownsBucket(a, agent.Bucket()) }

// ownsBucket reports whether the assignment owns the shard of bucket.
func ownsBucket(a Assignment, bucket int) bool {
	return slices.Contains(a.Shards, oplog.BucketShard(bucket, a.ShardCount))
}

// triage decides a key cheapest first, in memory only: parse, shard, residency. candidate means the key
// survived and is worth one storage read.
func triage(key string, a Assignment, resident func(oplog.AgentID) bool) (agent oplog.AgentID, outcome Outcome, candidate bool) {
	agent, ok := parseAgent(key)
	// A parsed stored key's prefix is its agent's bucket: no need to hash the key again.
	bucket, _ := is.KeyBucket(key)
	switch {
	case !ok:
		return agent, OutcomeUnparseable, false
	case !ownsBucket(a, bucket):
		return agent, OutcomeNotOwned, false
	case resident != nil && resident(agent):
		return agent, OutcomeResident, false
	}
	return agent, "", true
}

// idle reports whether a durable agent last active at lastActive (known: the executor knows when; else
// it has not seen the agent since it started, and the sweep counts the agent active when it was built,
// at born) has been inactive for minIdle at now.
func idle(lastActive time.Time, known bool, born, now time.Time, minIdle time.Duration) bool {
	if !known {
		lastActive = born
	}
	return now.Sub(lastActive) >= minIdle
}

// sighting is what the tracking table remembers of an agent: its last index (or, sighted by its stamp
// alone, the page's stamp of its index: see is.Page.Stamps) and the pass that saw it.
type sighting struct {
	index oplog.Index
	// stamp is the page's stamp of the agent's index at this sighting ("" when the page carried none);
	// unread says the index itself was not read then, so index is unknown (0).
	stamp  string
	unread bool
	pass   uint64
	first  time.Time // when the agent was first sighted (kept by every later sighting): the lag's start
}

// assess is the quiet gate: an agent moves only when its last index is unchanged since a sighting from
// an earlier pass. A sighting from this same pass never qualifies, which is what keeps a key a walk
// returns twice (Redis) from passing the gate within one pass. An earlier sighting that read no index
// (sighted by its stamp) qualifies when this sighting's stamp is the same non-empty one: the index did
// not change in between; where both sightings read the index, the indexes decide.
func assess(seen sighting, known bool, current oplog.Index, stamp string, pass uint64) (move bool) {
	if !known || seen.pass >= pass {
		return false
	}
	if seen.unread {
		return seen.stamp != "" && seen.stamp == stamp
	}
	return seen.index == current
}

// sightUnread reports whether a key whose page stamped it is sighted without a read of its index: the
// stamp vouches that the index has not changed for a while (is.Page.Stamps), and the gate decides
// without the index (passUnread): on a first sighting, and on a later pass's, whatever the earlier one
// read. Only a key seen again within one pass is read.
func sightUnread(seen sighting, known bool, stamp string, pass uint64) bool {
	if stamp == "" {
		return false
	}
	return !known || seen.pass < pass
}

// passUnread is the quiet gate for a key sighted by its stamp alone (sightUnread) after a sighting from
// an earlier pass. One that read the index passes with that index, which the archive's first read
// re-checks in the same step as it reads (an index that moved since declines the agent there, as the
// gate would have): the read a second sighting would make is that re-check's. One sighted by its stamp
// alone too passes when the stamps are the same, with no index (0): the archive's read takes the last
// index it finds (oplog.Seen).
func passUnread(seen sighting, known bool, stamp string, pass uint64) (index oplog.Index, move bool) {
	switch {
	case !known || seen.pass >= pass:
		return 0, false
	case !seen.unread:
		return seen.index, true
	}
	return 0, stamp != "" && seen.stamp == stamp
}

// keep reports whether a tracking entry survives the completion of pass: it was seen in that pass or
// the one before (one pass of grace, as a teardown drain racing the walk can hide a key for a pass).
func keep(seen sighting, completedPass uint64) bool {
	return seen.pass+1 >= completedPass
}

// share is a route's even share of what remains of a budget, rounded up so that a small budget still
// reaches the first routes.
func share(remaining, routesLeft int) int {
	if remaining <= 0 || routesLeft <= 0 {
		return 0
	}
	return ceilDiv(remaining, routesLeft)
}

// pageBudget is how many scan calls a scan budget affords: ceil(scan / pageSize). It stops a tick whose
// pages come back short or empty.
func pageBudget(scan, pageSize int) int {
	if scan <= 0 || pageSize <= 0 {
		return 0
	}
	return ceilDiv(scan, pageSize)
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0, without the overflow of (a+b-1)/b near the top of int.
func ceilDiv(a, b int) int {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// firstWait is how long Run waits before its first tick: the fraction r of interval, r clamped to
// [0, 1], so that sweeps started at once spread their first ticks, and every one after, over an
// interval.
func firstWait(interval time.Duration, r float64) time.Duration {
	return time.Duration(float64(interval) * min(max(r, 0), 1))
}

// order puts the routes a tick could not afford first, the rest after, each group in stack order.
func order(starved []bool) []int {
	var first, rest []int
	for i, s := range starved {
		if s {
			first = append(first, i)
		} else {
			rest = append(rest, i)
		}
	}
	return append(first, rest...)
}

// nextWait is the wait before the next tick: interval, doubled for each consecutive tick that hit its
// deadline, capped at maxBackoffIntervals intervals (0 reads as 1, so the wait never shrinks to
// nothing and spins the loop).
func nextWait(interval time.Duration, deadlineHits, maxBackoffIntervals int) time.Duration {
	limit := time.Duration(max(maxBackoffIntervals, 1))
	waits := backoff.Policy{Initial: interval, Max: interval * limit, Multiplier: 2}
	return waits.Delay(min(deadlineHits, math.MaxInt-1) + 1) // no hit yet is the first wait
}

// tally counts outcomes.
type tally map[Outcome]int

// merge adds other's counts into t.
func (t tally) merge(other tally) {
	for o, n := range other {
		t[o] += n
	}
}

// budget is what is left of a tick's budgets for one mode's routes, and how many of them have yet to
// take their share.
type budget struct {
	scan, pages, archives, routes int
}

// shares is one route's part of its mode's budgets for a tick: the keys it may examine, the scan
// calls it may make, and the archives it may start.
type shares struct {
	scan, pages, archives int
}

// planBudgets is a tick's budget plan: each mode's routes share budgets of their own (a durable
// backlog never takes the ephemeral routes' share, nor they its), split between the mode's routes as
// they take their turns (budget.take).
func planBudgets(cfg Config, routes []Route) map[oplog.Mode]*budget {
	plan := map[oplog.Mode]*budget{
		oplog.Ephemeral: {scan: cfg.MaxScannedPerTick, pages: pageBudget(cfg.MaxScannedPerTick, cfg.PageSize), archives: cfg.MaxArchivesPerTick},
		oplog.Durable: {scan: cfg.DurableMaxScannedPerTick, pages: pageBudget(cfg.DurableMaxScannedPerTick, cfg.PageSize),
			archives: cfg.DurableMaxArchivesPerTick},
	}
	for _, r := range routes {
		plan[r.Mode].routes++
	}
	return plan
}

// take gives the next route its even share of what is left (rounded up, so that a small budget still
// reaches the first routes), and says which budget stops the route when a share is nothing: a scan
// or page share of 0 is scan_budget, an archive share of 0 archive_budget.
func (b *budget) take() (shares, Reason) {
	sh := shares{scan: share(b.scan, b.routes), pages: share(b.pages, b.routes), archives: share(b.archives, b.routes)}
	b.routes--
	switch {
	case sh.scan == 0 || sh.pages == 0:
		return sh, ReasonScanBudget
	case sh.archives == 0:
		return sh, ReasonArchiveBudget
	}
	return sh, ""
}

// spend takes what a route used from the budget, so that the routes after it share the rest.
func (b *budget) spend(scanned, pages, archives int) {
	b.scan -= scanned
	b.pages -= pages
	b.archives -= archives
}

// scanStop is the budget that stops a route's walk before its next page, "" when none does: its
// candidates fill its archive share, or it has used its scan or page share.
func scanStop(cands, scanned, pages int, sh shares) Reason {
	switch {
	case cands >= sh.archives:
		return ReasonArchiveBudget
	case scanned >= sh.scan || pages >= sh.pages:
		return ReasonScanBudget
	}
	return ""
}
