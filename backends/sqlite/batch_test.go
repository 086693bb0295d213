package sqlite_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/test/backendtest"
)

const batchNS = "test/batch"

// fillBatch gives keys[i] ids 1..i (keys[0] stays missing), with values naming key and id.
func fillBatch(t *testing.T, st is.Storage, keys []string) {
	t.Helper()
	for i, k := range keys {
		var es []is.Entry
		for id := 1; id <= i; id++ {
			es = append(es, is.Entry{ID: uint64(id), Value: []byte(fmt.Sprintf("%s#%d", k, id))})
		}
		if len(es) > 0 {
			if err := st.AppendMany(t.Context(), batchNS, k, es); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func batchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("agent:%03d", i)
	}
	return keys
}

// reqsOf asks each key at an id that varies around its entries, MaxID and above it included, in an
// order that is not the keys'.
func reqsOf(keys []string) []is.KeyID {
	ids := []uint64{0, 1, 2, 3, 5, is.MaxID, is.MaxID + 1, ^uint64(0)}
	reqs := make([]is.KeyID, len(keys))
	for i, k := range keys {
		reqs[len(keys)-1-i] = is.KeyID{Key: k, ID: ids[i%len(ids)]}
	}
	return append(reqs, is.KeyID{Key: "agent:missing", ID: 1})
}

// walCommits counts the commits in a file's WAL: the frames of the WAL's current salt whose header
// gives the database size after a commit (https://sqlite.org/fileformat2.html#walformat).
func walCommits(t *testing.T, path string) int {
	t.Helper()
	wal, err := os.ReadFile(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if len(wal) < 32 {
		return 0
	}
	pageSize := int(binary.BigEndian.Uint32(wal[8:12]))
	salt := wal[16:24]
	n := 0
	for off := 32; off+24+pageSize <= len(wal); off += 24 + pageSize {
		frame := wal[off : off+24]
		if string(frame[8:16]) != string(salt) {
			break
		}
		if binary.BigEndian.Uint32(frame[4:8]) != 0 {
			n++
		}
	}
	return n
}

// The point of the batch: one commit for every key's drop, not one a key.
func TestDropPrefixMany_IsOneCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{})
	keys := batchKeys(50)
	fillBatch(t, st, keys)
	reqs := make([]is.KeyID, len(keys))
	for i, k := range keys {
		reqs[i] = is.KeyID{Key: k, ID: 3}
	}
	before := walCommits(t, path)
	res, err := st.DropPrefixMany(t.Context(), batchNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if want := uint64(min(i, 3)); r.Err != nil || r.Dropped != want {
			t.Fatalf("%q: %+v, want %d dropped", keys[i], r, want)
		}
	}
	if commits := walCommits(t, path) - before; commits != 1 {
		t.Fatalf("DropPrefixMany of %d keys made %d commits, want 1", len(keys), commits)
	}
}

// A poisoned key fails its own part; the others are read, and dropped and committed.
func TestBatch_PoisonedKeyFailsAlone(t *testing.T) {
	st := openFile(t, filepath.Join(t.TempDir(), "strata.db"), sqlite.Options{})
	ctx := t.Context()
	keys := batchKeys(6)
	fillBatch(t, st, keys)
	poisoned := keys[3]
	backendtest.SQLitePoison(t, st, batchNS, poisoned) // a row whose id is text
	reqs := make([]is.KeyID, len(keys))
	for i, k := range keys {
		reqs[i] = is.KeyID{Key: k, ID: 2}
	}
	reads, err := st.ClosestLastMany(ctx, batchNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reads {
		var oe *is.OpError
		switch {
		case keys[i] == poisoned:
			if r.Err == nil || !errors.As(r.Err, &oe) || oe.Key != poisoned || oe.Op != is.OpClosestLastMany || r.Found || r.Exists {
				t.Fatalf("poisoned %q read: %+v, want its own error naming it", poisoned, r)
			}
		case r.Err != nil || r.Exists != (i > 0):
			t.Fatalf("%q read beside a poisoned key: %+v", keys[i], r)
		}
	}

	// A drop the engine refuses for one key's rows (a foreign trigger): that key fails, the rest commit.
	if err := testenv.ExecUnchecked(ctx, st.DB(), fmt.Sprintf(`CREATE TRIGGER refuse BEFORE DELETE ON index_storage
		WHEN old.key = '%s' BEGIN SELECT RAISE(ABORT, 'refused'); END`, poisoned)); err != nil {
		t.Fatal(err)
	}
	drops, err := st.DropPrefixMany(ctx, batchNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range drops {
		var oe *is.OpError
		switch {
		case keys[i] == poisoned:
			if r.Err == nil || !errors.As(r.Err, &oe) || oe.Key != poisoned || oe.Op != is.OpDropPrefixMany || r.Dropped != 0 {
				t.Fatalf("refused %q drop: %+v, want its own error naming it", poisoned, r)
			}
		case r.Err != nil || r.Dropped != uint64(min(i, 2)):
			t.Fatalf("%q dropped beside a refused key: %+v", keys[i], r)
		}
	}
	for i, k := range keys {
		n, err := st.Length(ctx, batchNS, k)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(max(i-2, 0))
		if k == poisoned {
			want = uint64(i) + 1 // its entries and the poisoned row, none dropped
		}
		if n != want {
			t.Fatalf("%q holds %d entries after the batch, want %d", k, n, want)
		}
	}
}

// BenchmarkBatch reads and drops 128 keys of one entry each, through the batch operations and through
// the per-key fallbacks (the store hidden behind a bare is.Storage): what one transaction and one
// commit for the batch save.
func BenchmarkBatch(b *testing.B) {
	const n = 128
	for _, batched := range []bool{false, true} {
		b.Run(fmt.Sprintf("batched=%v", batched), func(b *testing.B) {
			raw, err := sqlite.New(b.Context(), filepath.Join(b.TempDir(), "strata.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			var st is.Storage = raw
			if !batched {
				st = struct{ is.Storage }{raw}
			}
			reqs := make([]is.KeyID, n)
			for i := range reqs {
				reqs[i] = is.KeyID{Key: fmt.Sprintf("agent:%04d", i), ID: 1}
			}
			var reading, dropping time.Duration
			for b.Loop() {
				b.StopTimer()
				for _, r := range reqs {
					if err := raw.Append(b.Context(), batchNS, r.Key, 1, []byte("chunk")); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				start := time.Now()
				if _, err := is.ClosestLastMany(b.Context(), st, batchNS, reqs); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				res, err := is.DropPrefixMany(b.Context(), st, batchNS, reqs)
				if err != nil || res[n-1].Dropped != 1 {
					b.Fatal(res[n-1], err)
				}
				reading, dropping = reading+mid.Sub(start), dropping+time.Since(mid)
			}
			b.ReportMetric(float64(reading.Microseconds())/float64(b.N), "read-µs/op")
			b.ReportMetric(float64(dropping.Microseconds())/float64(b.N), "drop-µs/op")
		})
	}
}

// A read-only store reads a batch (from a file opened immutable) and refuses a batch drop, changing
// nothing.
func TestBatch_ReadOnlyReadsAndRefusesDrops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{})
	keys := batchKeys(5)
	fillBatch(t, st, keys)
	st.Close()
	ro := openReadOnly(t, path)
	reqs := reqsOf(keys)
	got, err := ro.ClosestLastMany(t.Context(), batchNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		var want is.ClosestLastResult
		want.Entry, want.Found, want.Last, want.Exists, want.Err = ro.ClosestLast(t.Context(), batchNS, r.Key, r.ID)
		if want.Err != nil || !reflect.DeepEqual(got[i], want) {
			t.Fatalf("key %q at %d: batch %+v, ClosestLast %+v", r.Key, r.ID, got[i], want)
		}
	}
	if _, err := ro.DropPrefixMany(t.Context(), batchNS, reqs); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("DropPrefixMany on a read-only store: %v, want ErrInvalidArgument", err)
	}
	if n, err := ro.Length(t.Context(), batchNS, keys[4]); err != nil || n != 4 {
		t.Fatalf("after the refused drop: %d entries, %v", n, err)
	}
}
