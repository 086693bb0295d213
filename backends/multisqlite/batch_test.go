package multisqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// fillBatch gives ks[i] ids 1..i (ks[0] stays missing).
func fillBatch(t *testing.T, st *Store, ks []string) {
	t.Helper()
	for i, k := range ks {
		var es []is.Entry
		for id := 1; id <= i; id++ {
			es = append(es, is.Entry{ID: uint64(id), Value: fmt.Appendf(nil, "%s#%d", k, id)})
		}
		if len(es) > 0 {
			if err := st.AppendMany(t.Context(), testNS, k, es); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// batchReqs asks each key at an id that varies around its entries, MaxID and above it included, in
// an order that is not the keys', and a key that was never written.
func batchReqs(ks []string) []is.KeyID {
	ids := []uint64{0, 1, 2, 3, 5, is.MaxID, is.MaxID + 1, ^uint64(0)}
	reqs := make([]is.KeyID, len(ks))
	for i, k := range ks {
		reqs[len(ks)-1-i] = is.KeyID{Key: k, ID: ids[i%len(ids)]}
	}
	return append(reqs, is.KeyID{Key: "agent:missing", ID: 1})
}

// state is every key's entries and whether its file is there.
func state(t *testing.T, st *Store, ks []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range append(ks, "agent:missing") {
		es, err := st.Read(t.Context(), testNS, k, 0, ^uint64(0))
		if err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(st.filePath(testNS, k))
		out[k] = fmt.Sprintf("%v file=%v", es, statErr == nil)
	}
	return out
}

// batchKeys mixes the layouts: bucketed keys, keys in "other", and keys too long to name a file.
func batchKeys() []string {
	return append(append(bucketedKeys(8), keys(6)...), longKeys(3)...)
}

func TestClosestLastMany_EqualsClosestLastOfEachKey(t *testing.T) {
	st := open(t, t.TempDir(), Options{MaxOpenFiles: 3})
	ks := batchKeys()
	fillBatch(t, st, ks)
	reqs := batchReqs(ks)
	got, err := st.ClosestLastMany(t.Context(), testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("%d results for %d keys", len(got), len(reqs))
	}
	for i, r := range reqs {
		var want is.ClosestLastResult
		want.Entry, want.Found, want.Last, want.Exists, want.Err = st.ClosestLast(t.Context(), testNS, r.Key, r.ID)
		if want.Err != nil {
			t.Fatal(want.Err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("key %q at %d: batch %+v, ClosestLast %+v", r.Key, r.ID, got[i], want)
		}
	}
	if got, err := st.ClosestLastMany(t.Context(), testNS, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty batch: %v, %v", got, err)
	}
}

func TestDropPrefixMany_EqualsDropPrefixOfEachKey(t *testing.T) {
	batch, single := open(t, t.TempDir(), Options{MaxOpenFiles: 3}), open(t, t.TempDir(), Options{MaxOpenFiles: 3})
	ks := batchKeys()
	fillBatch(t, batch, ks)
	fillBatch(t, single, ks)
	reqs := batchReqs(ks)
	got, err := batch.DropPrefixMany(t.Context(), testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("%d results for %d keys", len(got), len(reqs))
	}
	for i, r := range reqs {
		n, err := single.DropPrefix(t.Context(), testNS, r.Key, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got[i] != (is.DropResult{Dropped: n}) {
			t.Fatalf("key %q up to %d: batch %+v, DropPrefix dropped %d", r.Key, r.ID, got[i], n)
		}
	}
	if a, b := state(t, batch, ks), state(t, single, ks); !reflect.DeepEqual(a, b) {
		t.Fatalf("after the drops the stores differ:\nbatch  %v\nsingle %v", a, b)
	}
	if got, err := batch.DropPrefixMany(t.Context(), testNS, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty batch: %v, %v", got, err)
	}
}

// An unreadable file fails its own key; the other keys are read, and dropped.
func TestBatch_UnreadableFileFailsItsKeyAlone(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ks := keys(6)
	fillBatch(t, st, ks)
	poisoned := ks[3]
	poison(t, st, testNS, poisoned)
	reqs := make([]is.KeyID, len(ks))
	for i, k := range ks {
		reqs[i] = is.KeyID{Key: k, ID: 2}
	}
	reads, err := st.ClosestLastMany(t.Context(), testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	drops, err := st.DropPrefixMany(t.Context(), testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range ks {
		var oe *is.OpError
		if k == poisoned {
			if reads[i].Err == nil || !errors.As(reads[i].Err, &oe) || oe.Key != k || oe.Op != is.OpClosestLastMany {
				t.Fatalf("unreadable %q read: %+v, want its own error naming it", k, reads[i])
			}
			if drops[i].Err == nil || !errors.As(drops[i].Err, &oe) || oe.Key != k || oe.Op != is.OpDropPrefixMany || drops[i].Dropped != 0 {
				t.Fatalf("unreadable %q drop: %+v, want its own error naming it", k, drops[i])
			}
			continue
		}
		if r := reads[i]; r.Err != nil || r.Exists != (i > 0) || r.Found != (i >= 2) {
			t.Fatalf("%q read beside an unreadable file: %+v", k, r)
		}
		if d := drops[i]; d.Err != nil || d.Dropped != uint64(min(i, 2)) {
			t.Fatalf("%q dropped beside an unreadable file: %+v", k, d)
		}
		if n, err := st.Length(t.Context(), testNS, k); err != nil || n != uint64(max(i-2, 0)) {
			t.Fatalf("%q after the batch: %d entries, %v", k, n, err)
		}
	}
}

// A batch drop to each key's last id, which empties and removes the files, racing appends above it
// from another handle on the directory (another process, as far as the removal protocol knows) loses
// no append.
func TestDropPrefixMany_RacingAppendsAreKept(t *testing.T) {
	dir := t.TempDir()
	st, other := open(t, dir, Options{MaxOpenFiles: 4}), open(t, dir, Options{MaxOpenFiles: 4})
	ctx := t.Context()
	ks := bucketedKeys(8)
	appendAll(t, st, ks)
	const rounds = 30
	var wg sync.WaitGroup
	errs := make(chan error, len(ks)+1)
	for _, k := range ks {
		wg.Go(func() {
			for id := uint64(2); id <= rounds+1; id++ {
				if err := is.Retry(ctx, is.RetryPolicy{}, func(ctx context.Context) error {
					return other.Append(ctx, testNS, k, id, []byte("v"))
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	dropped := map[string]uint64{}
	wg.Go(func() {
		for round := uint64(1); round <= rounds; round++ {
			reqs := make([]is.KeyID, len(ks))
			for i, k := range ks {
				reqs[i] = is.KeyID{Key: k, ID: round}
			}
			res, err := st.DropPrefixMany(ctx, testNS, reqs)
			if err != nil {
				errs <- err
				return
			}
			for i, r := range res {
				if r.Err != nil && !errors.Is(r.Err, is.ErrTransient) {
					errs <- r.Err
					return
				}
				dropped[ks[i]] += r.Dropped
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, k := range ks {
		es, err := st.Read(ctx, testNS, k, 0, ^uint64(0))
		if err != nil {
			t.Fatal(err)
		}
		if total := dropped[k] + uint64(len(es)); total != rounds+1 {
			t.Fatalf("%q: %d dropped and %d left, want the %d appended", k, dropped[k], len(es), rounds+1)
		}
		for j, e := range es {
			if want := uint64(rounds + 1 - len(es) + j + 1); e.ID != want {
				t.Fatalf("%q: a gap: entry %d is id %d, want %d", k, j, e.ID, want)
			}
		}
	}
}

// A file is checked (its schema version read) once: opening it again after an eviction does not read
// it again. A file removed and created again under its name is a new file, and is checked again.
func TestSchemaCheck_OncePerFileUntilItIsRecreated(t *testing.T) {
	dir := t.TempDir()
	st, other := open(t, dir, Options{}), open(t, dir, Options{})
	ctx := t.Context()
	key := bucketedKeys(1)[0]
	path := st.filePath(testNS, key)
	if err := st.Append(ctx, testNS, key, 1, []byte("a")); err != nil {
		t.Fatal(err)
	}
	checks := st.pool.schemaChecks.Load()
	if checks != 1 {
		t.Fatalf("creating the file made %d schema checks, want 1", checks)
	}
	for range 3 {
		closeFile(t, st.pool, path)
		if _, ok, err := st.LastID(ctx, testNS, key); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	if n := st.pool.schemaChecks.Load() - checks; n != 0 {
		t.Fatalf("opening the file again 3 times made %d schema checks, want none", n)
	}

	// Another handle drains the index (its file is removed) and writes it again (a new file). The
	// old file is held open here so that the new one cannot be given its inode: what is checked is
	// that a new file is checked, not the odds of inode reuse.
	closeFile(t, st.pool, path)
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := other.DropPrefix(ctx, testNS, key, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the drained file is still there: %v", err)
	}
	if err := other.Append(ctx, testNS, key, 2, []byte("b")); err != nil {
		t.Fatal(err)
	}
	closeFile(t, other.pool, path)
	if id, ok, err := st.LastID(ctx, testNS, key); err != nil || !ok || id != 2 {
		t.Fatalf("LastID of the new file: %d, %v, %v", id, ok, err)
	}
	if n := st.pool.schemaChecks.Load() - checks; n != 1 {
		t.Fatalf("opening the re-created file made %d schema checks, want 1", n)
	}
}

// A file the cache knows that is damaged in place (same inode, same birth: its identity does not
// move) still fails loudly, and the failure makes the cache forget it: the next open checks it.
func TestSchemaCheck_FileDamagedInPlaceFailsAndIsForgotten(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ctx := t.Context()
	key := keys(1)[0]
	if err := st.Append(ctx, testNS, key, 1, []byte("a")); err != nil {
		t.Fatal(err)
	}
	checks := st.pool.schemaChecks.Load()
	poison(t, st, testNS, key)
	if _, _, err := st.LastID(ctx, testNS, key); err == nil {
		t.Fatal("LastID of a file that is no longer a database succeeded")
	}
	if n := st.pool.schemaChecks.Load() - checks; n != 0 {
		t.Fatalf("the first open of the damaged file made %d schema checks, want none (its identity is the one checked)", n)
	}
	if _, _, err := st.LastID(ctx, testNS, key); err == nil {
		t.Fatal("LastID of a file that is no longer a database succeeded")
	}
	if n := st.pool.schemaChecks.Load() - checks; n != 1 {
		t.Fatalf("the open after a failure made %d schema checks, want 1", n)
	}
}

// A batch whose caller has given up fails each key at once, opening no file; a read-only store refuses
// a batch drop as a whole.
func TestBatch_CancelledOpensNothingAndReadOnlyRefusesDrops(t *testing.T) {
	dir := t.TempDir()
	ks := keys(5)
	fillBatch(t, open(t, dir, Options{}), ks)
	st := open(t, dir, Options{})
	reqs := make([]is.KeyID, len(ks))
	for i, k := range ks {
		reqs[i] = is.KeyID{Key: k, ID: 9}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	reads, err := st.ClosestLastMany(ctx, testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	drops, err := st.DropPrefixMany(ctx, testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if !errors.Is(reads[i].Err, context.Canceled) || !errors.Is(drops[i].Err, context.Canceled) {
			t.Fatalf("%q in a cancelled batch: read %v, drop %v", ks[i], reads[i].Err, drops[i].Err)
		}
	}
	if n := st.Stats().FilesOpened; n != 0 {
		t.Fatalf("a cancelled batch opened %d files", n)
	}

	ro := open(t, dir, Options{ReadOnly: true})
	if _, err := ro.DropPrefixMany(t.Context(), testNS, reqs); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("DropPrefixMany on a read-only store: %v, want ErrInvalidArgument", err)
	}
	if got, err := ro.ClosestLastMany(t.Context(), testNS, reqs); err != nil || got[4].Err != nil || got[4].Last != 4 {
		t.Fatalf("ClosestLastMany on a read-only store: %+v, %v", got, err)
	}
}

// The default pool holds what a sweep tick works on: the gate sights up to max_archives_per_tick
// (256) agents, then reads and drops them in batches of 128 (the page size). Each file is opened once,
// by its sighting, and stays open through the batch read, the drop and the removal; with too small a
// pool each would be opened three times.
func TestDefaultPool_KeepsATicksAgentsOpenFromSightToRemoval(t *testing.T) {
	const tick, batch, others = 256, 128, DefaultMaxOpenFiles + 100
	ctx := t.Context()
	st := open(t, t.TempDir(), Options{})
	var agents, rest []string
	for i := range tick {
		agents = append(agents, is.BucketPrefix(i*61)+fmt.Sprintf("c:agent-%03d", i))
	}
	for i := range others {
		rest = append(rest, is.BucketPrefix(i*37)+fmt.Sprintf("c:other-%03d", i))
	}
	// The agents' files are written first, so the others' push them out of the pool.
	for _, k := range append(slices.Clone(agents), rest...) {
		if err := st.AppendMany(ctx, testNS, k, []is.Entry{{ID: 1, Value: []byte("a")}, {ID: 2, Value: []byte("b")}}); err != nil {
			t.Fatal(err)
		}
	}
	before := st.Stats()
	for _, k := range agents {
		if id, ok, err := st.LastID(ctx, testNS, k); err != nil || !ok || id != 2 {
			t.Fatalf("LastID(%q) = %d, %v, %v", k, id, ok, err)
		}
	}
	for from := 0; from < tick; from += batch {
		reqs := make([]is.KeyID, batch)
		for i, k := range agents[from : from+batch] {
			reqs[i] = is.KeyID{Key: k, ID: 1}
		}
		read, err := st.ClosestLastMany(ctx, testNS, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range read {
			if r.Err != nil || !r.Found || r.Last != 2 {
				t.Fatalf("ClosestLastMany %q: %+v", reqs[i].Key, r)
			}
			reqs[i].ID = r.Last
		}
		dropped, err := st.DropPrefixMany(ctx, testNS, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range dropped {
			if d.Err != nil || d.Dropped != 2 {
				t.Fatalf("DropPrefixMany %q: %+v", reqs[i].Key, d)
			}
		}
	}
	after := st.Stats()
	if removed := after.FilesRemoved - before.FilesRemoved; removed != tick {
		t.Fatalf("%d files removed, want %d", removed, tick)
	}
	if opened := after.FilesOpened - before.FilesOpened; opened != tick {
		t.Fatalf("%d files opened to sight, read and drop %d agents: want one each", opened, tick)
	}
}
