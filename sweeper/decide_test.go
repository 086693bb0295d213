package sweeper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

func TestParseAgent(t *testing.T) {
	want := oplog.AgentID{Component: "comp", Name: "name:with:colons"}
	if a, ok := parseAgent(want.StoredKey()); !ok || a != want {
		t.Fatalf("parseAgent(%q): %+v %v", want.StoredKey(), a, ok)
	}
	prefix := is.BucketPrefix(want.Bucket())
	other := is.BucketPrefix((want.Bucket() + 1) % is.Buckets)
	for _, bad := range []string{
		"no-colon", ":name", "comp:", "",
		want.Key(),                           // no bucket prefix (a key of the layout before buckets)
		other + want.Key(),                   // another bucket's prefix
		strings.ToUpper(prefix) + want.Key(), // hex digits in upper case
		"4000/" + want.Key(),                 // a bucket past the last
		prefix + "no-colon", prefix + ":name", prefix,
	} {
		if _, ok := parseAgent(bad); ok {
			t.Fatalf("parseAgent(%q) accepted", bad)
		}
	}
}

func TestWalkRanges_CoverTheAssignmentsBucketsInFewestRanges(t *testing.T) {
	for _, c := range []struct {
		a    Assignment
		want []oplog.BucketRange
	}{
		{Assignment{ShardCount: 1, Shards: []int{0}}, []oplog.BucketRange{{Lo: 0, Hi: oplog.Buckets}}},
		{Assignment{ShardCount: 4, Shards: []int{3, 1, 2}}, []oplog.BucketRange{{Lo: 4096, Hi: oplog.Buckets}}},
		{Assignment{ShardCount: 4, Shards: []int{0, 2, 2}}, []oplog.BucketRange{{Lo: 0, Hi: 4096}, {Lo: 8192, Hi: 12288}}},
		{Assignment{ShardCount: 7, Shards: []int{1}}, []oplog.BucketRange{{Lo: 2341, Hi: 4682}}},
		{Assignment{ShardCount: 4, Shards: []int{4, -1}}, nil},
		{Assignment{ShardCount: oplog.Buckets + 1, Shards: []int{0}}, nil},
	} {
		if got := walkRanges(c.a); !slices.Equal(got, c.want) {
			t.Errorf("walkRanges(%+v) = %v, want %v", c.a, got, c.want)
		}
	}
}

func TestUsable_StandsDownWithoutAUsableAssignment(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		a      Assignment
		known  bool
		reason string // "" when usable
	}{
		{Assignment{}, false, StandDownNoAssignment},
		{Assignment{ShardCount: 0, Shards: []int{0}}, true, StandDownNoShards},
		{Assignment{ShardCount: 4}, true, StandDownNoShards},
		{Assignment{ShardCount: 4, Shards: []int{1}, LeaseUntil: now}, true, StandDownLeaseLapsed},
		{Assignment{ShardCount: 4, Shards: []int{1}, LeaseUntil: now.Add(time.Second)}, true, ""},
		{Assignment{ShardCount: 4, Shards: []int{1}}, true, ""},
	} {
		ok, reason, why := usable(c.a, c.known, now)
		if ok != (c.reason == "") || reason != c.reason || (!ok && why == "") {
			t.Fatalf("usable(%+v, %v) = %v %q %q, want reason %q", c.a, c.known, ok, reason, why, c.reason)
		}
	}
}

func TestTriage_DecidesCheapestFirst(t *testing.T) {
	mine := oplog.AgentID{Component: "c", Name: "mine"}
	a := Assignment{ShardCount: 8, Shards: []int{mine.Shard(8)}}
	var other oplog.AgentID
	for i := 0; ; i++ {
		other = oplog.AgentID{Component: "c", Name: string(rune('a' + i))}
		if !owns(a, other) {
			break
		}
	}
	asked := 0
	resident := func(oplog.AgentID) bool { asked++; return true }
	if _, o, c := triage("garbage", a, resident); o != OutcomeUnparseable || c || asked != 0 {
		t.Fatalf("unparseable: %s %v, residency asked %d times", o, c, asked)
	}
	if _, o, c := triage(other.StoredKey(), a, resident); o != OutcomeNotOwned || c || asked != 0 {
		t.Fatalf("other shard: %s %v, residency asked %d times", o, c, asked)
	}
	if _, o, c := triage(mine.StoredKey(), a, resident); o != OutcomeResident || c || asked != 1 {
		t.Fatalf("resident: %s %v", o, c)
	}
	if ag, o, c := triage(mine.StoredKey(), a, func(oplog.AgentID) bool { return false }); o != "" || !c || ag != mine {
		t.Fatalf("candidate: %+v %s %v", ag, o, c)
	}
}

func TestAssess_QuietGateNeedsAnEarlierPass(t *testing.T) {
	for _, c := range []struct {
		seen    sighting
		known   bool
		current oplog.Index
		stamp   string
		pass    uint64
		move    bool
	}{
		{sighting{}, false, 5, "", 2, false},                 // never seen
		{sighting{index: 5, pass: 1}, true, 5, "", 2, true},  // unchanged since the last pass
		{sighting{index: 5, pass: 2}, true, 5, "", 2, false}, // seen in this pass already (a duplicate key)
		{sighting{index: 4, pass: 1}, true, 5, "", 2, false}, // moved on
		{sighting{index: 5, pass: 1}, true, 5, "", 7, true},  // any earlier pass will do
		{sighting{index: 6, pass: 1}, true, 5, "", 2, false}, // went back (a second lifetime)
		// Sighted by a stamp alone: the stamps decide.
		{sighting{stamp: "s1", unread: true, pass: 1}, true, 5, "s1", 2, true},  // unchanged since the last pass
		{sighting{stamp: "s1", unread: true, pass: 1}, true, 5, "s2", 2, false}, // changed
		{sighting{stamp: "s1", unread: true, pass: 1}, true, 5, "", 2, false},   // no stamp now: nothing vouches
		{sighting{stamp: "s1", unread: true, pass: 2}, true, 5, "s1", 2, false}, // this pass already
		{sighting{stamp: "", unread: true, pass: 1}, true, 0, "", 2, false},     // an empty stamp vouches for nothing
		// Both read: the indexes decide, whatever the stamps say.
		{sighting{index: 5, stamp: "s1", pass: 1}, true, 5, "s2", 2, true},
		{sighting{index: 4, stamp: "s1", pass: 1}, true, 5, "s1", 2, false},
	} {
		if got := assess(c.seen, c.known, c.current, c.stamp, c.pass); got != c.move {
			t.Fatalf("assess(%+v, %v, %d, %q, %d) = %v", c.seen, c.known, c.current, c.stamp, c.pass, got)
		}
	}
}

func TestSightUnread_WhereTheStampsAloneDecide(t *testing.T) {
	for _, c := range []struct {
		seen   sighting
		known  bool
		stamp  string
		pass   uint64
		unread bool
	}{
		{sighting{}, false, "", 1, false},                                    // no stamp: read
		{sighting{}, false, "s1", 1, true},                                   // first sighting
		{sighting{stamp: "s1", unread: true, pass: 1}, true, "s1", 2, true},  // unchanged: passes by the stamps, unread
		{sighting{stamp: "s1", unread: true, pass: 1}, true, "s2", 2, true},  // changed: a new first sighting
		{sighting{stamp: "s1", unread: true, pass: 2}, true, "s2", 2, false}, // a duplicate in this pass: read, as before
		{sighting{index: 5, stamp: "s1", pass: 1}, true, "s2", 2, true},      // read a pass before: the archive re-checks that index
		{sighting{index: 5, stamp: "s1", pass: 2}, true, "s1", 2, false},     // this pass already: read
	} {
		if got := sightUnread(c.seen, c.known, c.stamp, c.pass); got != c.unread {
			t.Fatalf("sightUnread(%+v, %v, %q, %d) = %v", c.seen, c.known, c.stamp, c.pass, got)
		}
	}
}

func TestPassUnread_OnTheIndexReadBeforeOrOnTheStamps(t *testing.T) {
	for _, c := range []struct {
		seen  sighting
		known bool
		stamp string
		pass  uint64
		index oplog.Index
		move  bool
	}{
		{sighting{}, false, "s1", 1, 0, false},                                  // a first sighting
		{sighting{index: 5, pass: 1}, true, "s1", 2, 5, true},                   // read a pass before: that index, for the archive to re-check
		{sighting{index: 5, pass: 2}, true, "s1", 2, 0, false},                  // this pass already
		{sighting{stamp: "s1", unread: true, pass: 1}, true, "s1", 2, 0, true},  // stamps the same: no index
		{sighting{stamp: "s1", unread: true, pass: 1}, true, "s2", 2, 0, false}, // changed
		{sighting{stamp: "", unread: true, pass: 1}, true, "", 2, 0, false},     // an empty stamp vouches for nothing
	} {
		if index, move := passUnread(c.seen, c.known, c.stamp, c.pass); index != c.index || move != c.move {
			t.Fatalf("passUnread(%+v, %v, %q, %d) = %d, %v; want %d, %v", c.seen, c.known, c.stamp, c.pass, index, move, c.index, c.move)
		}
	}
}

func TestKeep_OnePassOfGrace(t *testing.T) {
	if !keep(sighting{pass: 5}, 5) || !keep(sighting{pass: 4}, 5) || keep(sighting{pass: 3}, 5) {
		t.Fatal("an entry must survive the completion of the pass that saw it and the next one only")
	}
}

func TestShareAndPageBudget(t *testing.T) {
	if share(10, 2) != 5 || share(5, 2) != 3 || share(1, 3) != 1 || share(0, 2) != 0 || share(3, 0) != 0 {
		t.Fatal("share")
	}
	// Shares of what remains sum to the budget whatever each route uses of its share.
	remaining, total := 100, 0
	for left := 3; left > 0; left-- {
		s := share(remaining, left)
		total += s
		remaining -= s
	}
	if total != 100 {
		t.Fatalf("shares add up to %d", total)
	}
	if pageBudget(4096, 128) != 32 || pageBudget(10, 3) != 4 || pageBudget(0, 128) != 0 {
		t.Fatal("pageBudget")
	}
}

func TestOrder_StarvedRoutesGoFirst(t *testing.T) {
	if got := order([]bool{false, true, false, true}); !slices.Equal(got, []int{1, 3, 0, 2}) {
		t.Fatalf("order = %v", got)
	}
	if got := order([]bool{false, false}); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("order = %v", got)
	}
}

func TestNextWait_DoublesToTheCapAndResets(t *testing.T) {
	i := time.Minute
	for hits, want := range []time.Duration{i, 2 * i, 4 * i, 8 * i, 8 * i, 8 * i} {
		if got := nextWait(i, hits, 8); got != want {
			t.Fatalf("nextWait(hits %d) = %v, want %v", hits, got, want)
		}
	}
	if nextWait(i, 3, 0) != i || nextWait(i, 3, 1) != i {
		t.Fatal("a cap of 0 or 1 must keep the wait at one interval")
	}
	if nextWait(i, 2, 3) != 3*i {
		t.Fatalf("a cap between powers of two: %v", nextWait(i, 2, 3))
	}
}

func TestConfig_ClampsAndValidation(t *testing.T) {
	c := DefaultConfig()
	c.Interval, c.MaxTickDuration = time.Nanosecond, time.Nanosecond
	c = c.clamped()
	if c.Interval != MinInterval || c.MaxTickDuration != MinTickDuration || c.MaxAgentDuration != MinTickDuration {
		t.Fatalf("clamped %v %v %v", c.Interval, c.MaxTickDuration, c.MaxAgentDuration)
	}
	bad := DefaultConfig()
	bad.PageSize = -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "sweep page_size -1: want 0 (the default) or from 1 to 10000") {
		t.Fatalf("page_size -1: %v", err)
	}
}

// Zero is the default for every field but Enabled: the zero Config is DefaultConfig switched off.
func TestConfig_ZeroFieldsTakeTheDefaults(t *testing.T) {
	var zero Config
	if err := zero.Validate(); err != nil {
		t.Fatalf("Config{} refused: %v", err)
	}
	want := DefaultConfig().clamped()
	want.Enabled = false
	if got := zero.clamped(); got != want {
		t.Fatalf("Config{} reads as %+v; want the defaults %+v", got, want)
	}
	if c := (Config{ShutdownGrace: -1, MaxBackoffIntervals: 1}).clamped(); c.ShutdownGrace != 0 || c.MaxBackoffIntervals != 1 {
		t.Fatalf("a negative grace and a cap of 1: %v, %d; want none and no backoff", c.ShutdownGrace, c.MaxBackoffIntervals)
	}
}

// The owner of bucket 0 walks the parts of the namespace outside every bucket, before its bucket ranges;
// no other sidecar does, and none does over a source that cannot walk them.
func TestWalkParts_TheOwnerOfBucketZeroWalksOutsideTheBuckets(t *testing.T) {
	outside := oplog.OutsideBuckets()
	for _, c := range []struct {
		a            Assignment
		scansOutside bool
		want         []part
	}{
		{Assignment{ShardCount: 1, Shards: []int{0}}, true, []part{
			{outside: outside[0], isOutside: true}, {outside: outside[1], isOutside: true}, {buckets: oplog.BucketRange{Lo: 0, Hi: oplog.Buckets}}}},
		{Assignment{ShardCount: 1, Shards: []int{0}}, false, []part{{buckets: oplog.BucketRange{Lo: 0, Hi: oplog.Buckets}}}},
		{Assignment{ShardCount: 4, Shards: []int{3, 0}}, true, []part{
			{outside: outside[0], isOutside: true}, {outside: outside[1], isOutside: true}, {buckets: oplog.ShardBuckets(0, 4)}, {buckets: oplog.ShardBuckets(3, 4)}}},
		{Assignment{ShardCount: 4, Shards: []int{1, 3}}, true, []part{{buckets: oplog.ShardBuckets(1, 4)}, {buckets: oplog.ShardBuckets(3, 4)}}},
		{Assignment{ShardCount: 4}, true, nil},
	} {
		if got := walkParts(c.a, c.scansOutside); !slices.Equal(got, c.want) {
			t.Errorf("walkParts(%+v, %v) = %+v, want %+v", c.a, c.scansOutside, got, c.want)
		}
	}
	// Together with the buckets' ranges the outside parts leave no key unwalked.
	keys := []string{"", "!", "000/x", "0000", "0000/", "3fff/z", "3fff0", "4000", "4000/", "4001/c:a", "nobucket", "zzzz", "\U0010ffff"}
	for _, key := range keys {
		in := 0
		for _, p := range walkParts(Assignment{ShardCount: 1, Shards: []int{0}}, true) {
			r := p.outside
			if !p.isOutside {
				r = p.buckets.Keys()
			}
			if r.Contains(key) {
				in++
			}
		}
		if in != 1 {
			t.Errorf("key %q lies in %d parts of the walk, want 1", key, in)
		}
	}
}

// The budget plan: each mode's routes share their mode's budgets, each route taking an even share of
// what the routes before it left.
func TestPlanBudgets_SharesWhatTheRoutesBeforeLeft(t *testing.T) {
	cfg := Config{PageSize: 10, MaxScannedPerTick: 100, MaxArchivesPerTick: 5,
		DurableMaxScannedPerTick: 40, DurableMaxArchivesPerTick: 1}
	routes := []Route{{Mode: oplog.Ephemeral}, {Mode: oplog.Ephemeral}, {Mode: oplog.Durable}, {Mode: oplog.Durable}}
	plan := planBudgets(cfg, routes)
	type used struct{ scanned, pages, archives int }
	for _, c := range []struct {
		name  string
		mode  oplog.Mode
		used  used // what the route then spends
		want  shares
		short Reason
	}{
		{"first ephemeral route: half, rounded up", oplog.Ephemeral, used{30, 3, 1}, shares{scan: 50, pages: 5, archives: 3}, ""},
		{"second ephemeral route: what the first left", oplog.Ephemeral, used{70, 7, 4}, shares{scan: 70, pages: 7, archives: 4}, ""},
		{"first durable route: its own budget", oplog.Durable, used{0, 0, 1}, shares{scan: 20, pages: 2, archives: 1}, ""},
		{"second durable route: no archive left", oplog.Durable, used{}, shares{scan: 40, pages: 4, archives: 0}, ReasonArchiveBudget},
	} {
		sh, short := plan[c.mode].take()
		if sh != c.want || short != c.short {
			t.Fatalf("%s: take() = %+v %q, want %+v %q", c.name, sh, short, c.want, c.short)
		}
		plan[c.mode].spend(c.used.scanned, c.used.pages, c.used.archives)
	}
	spent := &budget{scan: 10, pages: 0, archives: 3, routes: 1}
	if _, short := spent.take(); short != ReasonScanBudget {
		t.Fatalf("no page left: %q, want scan_budget", short)
	}
}

func TestScanStop(t *testing.T) {
	sh := shares{scan: 100, pages: 4, archives: 2}
	for _, c := range []struct {
		cands, scanned, pages int
		want                  Reason
	}{
		{0, 0, 0, ""},
		{1, 99, 3, ""},
		{2, 0, 0, ReasonArchiveBudget},
		{2, 100, 4, ReasonArchiveBudget}, // the archive budget is said first
		{0, 100, 0, ReasonScanBudget},
		{0, 0, 4, ReasonScanBudget},
	} {
		if got := scanStop(c.cands, c.scanned, c.pages, sh); got != c.want {
			t.Fatalf("scanStop(%d, %d, %d) = %q, want %q", c.cands, c.scanned, c.pages, got, c.want)
		}
	}
}

// Data no retry fixes fails as integrity_failed, apart from what a later pass may get through.
func TestFailure_IntegrityApartFromTimeouts(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Outcome
	}{
		{fmt.Errorf("drain: %w", archive.ErrCorruptChunk), OutcomeIntegrityFailed},
		{fmt.Errorf("drain: %w", oplog.ErrIndexReused), OutcomeIntegrityFailed},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), OutcomeArchiveFailed},
		{fmt.Errorf("drain: %w", oplog.ErrStepCap), OutcomeArchiveFailed},
		{fmt.Errorf("drain: %w", is.ErrTransient), OutcomeArchiveFailed},
		{errors.New("connection refused"), OutcomeArchiveFailed},
	} {
		if got := failure(c.err); got != c.want {
			t.Fatalf("failure(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

func TestFirstWait_AFractionOfTheInterval(t *testing.T) {
	for _, c := range []struct {
		r    float64
		want time.Duration
	}{
		{0, 0}, {0.25, 15 * time.Second}, {0.999, 59940 * time.Millisecond}, {1, time.Minute}, {-1, 0}, {7, time.Minute},
	} {
		if got := firstWait(time.Minute, c.r); got != c.want {
			t.Fatalf("firstWait(1m, %v) = %v, want %v", c.r, got, c.want)
		}
	}
}

func TestNextWait_CappedAtTheTopOfTheRange(t *testing.T) {
	if got := nextWait(time.Minute, math.MaxInt, 8); got != 8*time.Minute {
		t.Fatalf("nextWait(hits MaxInt) = %v, want 8m", got)
	}
}
