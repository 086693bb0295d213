package crash_test

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/strataproc"
)

// The after-archive SIGKILL loop: agents archived into packed segments (old ones, their segments three
// hours old, and young ones), a third of them erased so that every segment holds dead chunks beside
// live ones; `strata compact` is killed at random moments, then `strata run` with blob.retention = 1h
// is, while its collector expires the old agents. After every kill every agent reads back whole or,
// where it may (an erased agent; an old one once retention runs), not at all: never in part, and a
// young agent always whole.
const (
	afterOld        = 480 // old agents: 120 segments of four, for kills to land in a compaction
	afterYoung      = 60
	afterEntries    = 40
	afterBatch      = 4 // agents a segment
	afterKills      = 15
	afterMaxWait    = 300 * time.Millisecond
	afterConvergeBy = 2 * time.Minute
	afterLanded     = 30 // kills that must land with work left, on each backend
	afterMaxRounds  = 20
)

type afterRig struct {
	st         is.Storage
	blobs      *fsblob.Store
	stack      *oplog.Stack
	old, young []oplog.AgentID
	erased     map[oplog.AgentID]bool
}

func afterPayload(a oplog.AgentID, i oplog.Index) []byte {
	return fmt.Appendf(nil, "%s#%d", a.Key(), i)
}

// archiveAt strands agents and drains them in batches of afterBatch into segments named at t.
func archiveAt(t *testing.T, st is.Storage, blobs archive.BlobStore, agents []oplog.AgentID, at time.Time) {
	t.Helper()
	ctx := t.Context()
	packed, err := archive.NewPacked(st, blobs, 0, &archive.PackedOptions{Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	compressed, err := archive.NewCompressed(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := oplog.NewStack(oplog.NewPrimary(st), compressed, packed)
	if err != nil {
		t.Fatal(err)
	}
	for from := 0; from < len(agents); from += afterBatch {
		var seen []oplog.Seen
		for _, a := range agents[from:min(from+afterBatch, len(agents))] {
			batch := make([]oplog.Entry, afterEntries)
			for j := range batch {
				batch[j] = oplog.Entry{Index: oplog.Index(j + 1), Payload: afterPayload(a, oplog.Index(j+1))}
			}
			if err := stack.Append(ctx, a, oplog.Ephemeral, batch); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, oplog.Seen{Agent: a, Index: afterEntries})
		}
		res, err := stack.DrainSeenMany(ctx, oplog.Ephemeral, 1, seen)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

func newAfterRig(t *testing.T, st is.Storage, blobs *fsblob.Store, round string) *afterRig {
	t.Helper()
	r := &afterRig{st: st, blobs: blobs, erased: map[oplog.AgentID]bool{}}
	for i := range afterOld {
		r.old = append(r.old, oplog.AgentID{Component: "after", Name: fmt.Sprintf("old/%s/%03d", round, i)})
	}
	for i := range afterYoung {
		r.young = append(r.young, oplog.AgentID{Component: "after", Name: fmt.Sprintf("young/%s/%03d", round, i)})
	}
	archiveAt(t, st, blobs, r.old, time.Now().Add(-3*time.Hour))
	archiveAt(t, st, blobs, r.young, time.Now())
	var err error
	if r.stack, err = archive.DefaultStack(st, blobs, nil); err != nil {
		t.Fatal(err)
	}
	for i, a := range append(append([]oplog.AgentID{}, r.old...), r.young...) {
		if i%3 == 1 {
			if _, err := r.stack.Erase(t.Context(), a, oplog.Ephemeral); err != nil {
				t.Fatal(err)
			}
			r.erased[a] = true
		}
	}
	return r
}

// check reads every agent back: an erased one must read nothing, a young one everything, an old one
// everything or, when oldMayGo, nothing. It returns how many old agents are gone.
func (r *afterRig) check(t *testing.T, oldMayGo bool, when string) (oldGone int) {
	t.Helper()
	for _, group := range [][]oplog.AgentID{r.old, r.young} {
		for _, a := range group {
			got, err := r.stack.Read(t.Context(), a, oplog.Ephemeral, 1, 2*afterEntries)
			if err != nil {
				t.Fatalf("%s: read %s: %v", when, a, err)
			}
			isOld := strings.HasPrefix(a.Name, "old/")
			switch {
			case r.erased[a] && len(got) == 0:
			case r.erased[a]:
				t.Fatalf("%s: erased %s reads %d entries", when, a, len(got))
			case len(got) == 0 && isOld && oldMayGo:
				oldGone++
			case len(got) != afterEntries:
				t.Fatalf("%s: %s reads %d entries, want all %d", when, a, len(got), afterEntries)
			default:
				for j, e := range got {
					if e.Index != oplog.Index(j+1) || string(e.Payload) != string(afterPayload(a, e.Index)) {
						t.Fatalf("%s: %s entry %d is %d %q", when, a, j+1, e.Index, e.Payload)
					}
				}
			}
		}
	}
	return oldGone
}

// compactWork is how many segments a compaction would still rewrite or finish.
func (r *afterRig) compactWork(t *testing.T) int {
	t.Helper()
	rep, err := archive.CompactSegments(t.Context(), r.st, r.blobs, oplog.Ephemeral, 0,
		archive.CompactOptions{Grace: time.Hour, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Compacted
}

func TestCrash_SIGKILLDuringCompactionAndRetentionLosesNothingYounger(t *testing.T) {
	testenv.SkipUnlessLong(t, "the after-archive SIGKILL loop")
	bin := crashBinary(t)
	for _, b := range []backendtest.Backend{backendtest.SQLite(), backendtest.Postgres()} {
		t.Run(b.Name, func(t *testing.T) {
			st := b.Open(t)
			blobs, blobURL := crashBlobs(t)
			cfg := strataproc.WriteConfig(t, t.TempDir(), backendtest.URL(t, st), scheduleFile(t), blobURL, "")
			rng := crashSeed(t)
			// Rounds of a fresh rig each, until afterLanded kills have landed while there was work left.
			landed := 0
			var rigs []*afterRig
			for round := 0; landed < afterLanded; round++ {
				if round == afterMaxRounds {
					t.Fatalf("only %d of %d kills landed with work left in %d rounds", landed, afterLanded, round)
				}
				r := newAfterRig(t, st, blobs, fmt.Sprintf("r%d", round))
				rigs = append(rigs, r)
				landed += r.killCompactions(t, bin, cfg, rng)
				landed += r.killRetention(t, bin, cfg, rng)
				t.Logf("round %d: %d kills landed with work left so far", round, landed)
			}
			for _, r := range rigs {
				r.check(t, true, "the end")
			}
		})
	}
}

// killCompactions kills `strata compact` at random moments until one ends with nothing left to
// compact, checking every agent after every kill, then compacts to the end; it returns how many kills
// landed with work left.
func (r *afterRig) killCompactions(t *testing.T, bin, cfg string, rng *rand.Rand) (landed int) {
	t.Helper()
	r.check(t, false, "before compaction")
	start := r.compactWork(t)
	if start == 0 {
		t.Fatal("no segment to compact: the rig erased nothing")
	}
	for kill := 1; kill <= afterKills; kill++ {
		cmd := exec.Command(bin, "compact", "--config", cfg)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wait := 20*time.Millisecond + time.Duration(rng.Int64N(int64(afterMaxWait)+1))
		time.Sleep(wait)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		r.check(t, false, fmt.Sprintf("compact kill %d", kill))
		left := r.compactWork(t)
		t.Logf("compact kill %2d after %3dms: %d of %d segments still to compact", kill, wait.Milliseconds(), left, start)
		if left == 0 {
			break
		}
		landed++
	}
	if out, err := exec.Command(bin, "compact", "--json", "--config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("compact to the end: %v\n%s", err, out)
	}
	if left := r.compactWork(t); left != 0 {
		t.Fatalf("%d segments still to compact after a full run", left)
	}
	r.check(t, false, "compacted")
	return landed
}

// killRetention kills `strata run` with blob.retention = 1h around its collector's first run until the
// old agents are all expired, checking every agent after every kill; it returns how many kills landed
// before that.
func (r *afterRig) killRetention(t *testing.T, bin, cfg string, rng *rand.Rand) (landed int) {
	t.Helper()
	env := []string{"STRATA_BLOB_RETENTION=1h", "STRATA_BLOB_GC_INTERVAL=1s"}
	liveOld := 0
	for _, a := range r.old {
		if !r.erased[a] {
			liveOld++
		}
	}
	for kill := 1; kill <= afterKills; kill++ {
		p := strataproc.Start(t, bin, cfg, env...)
		// The collector's first run starts a second after the process: kill around it.
		wait := 900*time.Millisecond + time.Duration(rng.Int64N(int64(afterMaxWait)+1))
		time.Sleep(wait)
		p.Kill(t)
		gone := r.check(t, true, fmt.Sprintf("retention kill %d", kill))
		t.Logf("retention kill %2d after %4dms: %d of %d old agents expired", kill, wait.Milliseconds(), gone, liveOld)
		if gone == liveOld {
			return landed
		}
		landed++
	}
	p := strataproc.Start(t, bin, cfg, env...)
	for deadline := time.Now().Add(afterConvergeBy); r.check(t, true, "converging") < liveOld; {
		if time.Now().After(deadline) {
			p.Kill(t)
			t.Fatalf("old agents not all expired after %s\n%s", afterConvergeBy, p.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM\n%s", code, p.Log())
	}
	return landed
}
