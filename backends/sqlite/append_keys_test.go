package sqlite_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/test/backendtest"
)

func idsOf(t *testing.T, st is.Storage, key string) []uint64 {
	t.Helper()
	entries, err := st.Read(t.Context(), batchNS, key, 0, is.MaxID)
	if err != nil {
		t.Fatalf("Read(%q): %v", key, err)
	}
	ids := make([]uint64, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

func entriesOf(ids ...uint64) []is.Entry {
	out := make([]is.Entry, len(ids))
	for i, id := range ids {
		out[i] = is.Entry{ID: id, Value: []byte{byte(id)}}
	}
	return out
}

// The point of the batch: one commit for every key's append, not one a key.
func TestAppendKeys_IsOneCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{})
	keys := batchKeys(50)
	fillBatch(t, st, keys)
	reqs := make([]is.KeyEntries, len(keys))
	for i, k := range keys {
		reqs[i] = is.KeyEntries{Key: k, Entries: entriesOf(uint64(i+1), uint64(i+2))}
	}
	before := walCommits(t, path)
	errs, err := st.AppendKeys(t.Context(), batchNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("%q: %v", keys[i], e)
		}
	}
	if commits := walCommits(t, path) - before; commits != 1 {
		t.Fatalf("AppendKeys of %d keys made %d commits, want 1", len(keys), commits)
	}
	if got := idsOf(t, st, keys[3]); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("%q after the batch: %v, want 1..5", keys[3], got)
	}
}

// A key whose first id is not above its last fails alone in the middle of a batch, naming its last
// id; the keys before and after it are appended.
func TestAppendKeys_ConflictInTheMiddleFailsThatKeyOnly(t *testing.T) {
	st := openFile(t, filepath.Join(t.TempDir(), "strata.db"), sqlite.Options{})
	keys := batchKeys(4) // ids: none, 1, 1..2, 1..3
	fillBatch(t, st, keys)
	errs, err := st.AppendKeys(t.Context(), batchNS, []is.KeyEntries{
		{Key: keys[0], Entries: entriesOf(1)},
		{Key: keys[2], Entries: entriesOf(2, 3)},
		{Key: keys[3], Entries: entriesOf(4, 5)},
	})
	if err != nil || len(errs) != 3 {
		t.Fatalf("AppendKeys: %v, %v", errs, err)
	}
	var oe *is.OpError
	if !errors.Is(errs[1], is.ErrConflict) || !errors.As(errs[1], &oe) || oe.Op != is.OpAppendKeys || oe.Key != keys[2] ||
		!strings.Contains(errs[1].Error(), "last id 2") {
		t.Fatalf("%q's part: %v; want ErrConflict naming it and its last id 2", keys[2], errs[1])
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the other parts: %v, %v", errs[0], errs[2])
	}
	for key, want := range map[string][]uint64{keys[0]: {1}, keys[2]: {1, 2}, keys[3]: {1, 2, 3, 4, 5}} {
		if got := idsOf(t, st, key); !slices.Equal(got, want) {
			t.Errorf("%q after the batch: %v, want %v", key, got, want)
		}
	}
}

// An insert the engine refuses midway through one key's entries (a foreign trigger on its second
// entry) leaves none of that key's entries, its first included, and the other keys commit.
func TestAppendKeys_RefusedInsertUndoesThatKeyOnly(t *testing.T) {
	st := openFile(t, filepath.Join(t.TempDir(), "strata.db"), sqlite.Options{})
	ctx := t.Context()
	keys := batchKeys(3)
	fillBatch(t, st, keys)
	if err := testenv.ExecUnchecked(ctx, st.DB(), `CREATE TRIGGER refuse BEFORE INSERT ON index_storage
		WHEN new.key = '`+keys[1]+`' AND new.id = 3 BEGIN SELECT RAISE(ABORT, 'refused'); END`); err != nil {
		t.Fatal(err)
	}
	errs, err := st.AppendKeys(ctx, batchNS, []is.KeyEntries{
		{Key: keys[0], Entries: entriesOf(1, 2)},
		{Key: keys[1], Entries: entriesOf(2, 3, 4)},
		{Key: keys[2], Entries: entriesOf(3)},
	})
	if err != nil || len(errs) != 3 {
		t.Fatalf("AppendKeys: %v, %v", errs, err)
	}
	var oe *is.OpError
	if errs[1] == nil || !errors.As(errs[1], &oe) || oe.Key != keys[1] || !strings.Contains(errs[1].Error(), "refused") {
		t.Fatalf("refused %q: %v, want its own error naming it", keys[1], errs[1])
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the other parts: %v, %v", errs[0], errs[2])
	}
	for key, want := range map[string][]uint64{keys[0]: {1, 2}, keys[1]: {1}, keys[2]: {1, 2, 3}} {
		if got := idsOf(t, st, key); !slices.Equal(got, want) {
			t.Errorf("%q after the batch: %v, want %v", key, got, want)
		}
	}
}

// A poisoned key (a row whose id is text) fails its own part; the others are appended and committed.
func TestAppendKeys_PoisonedKeyFailsAlone(t *testing.T) {
	st := openFile(t, filepath.Join(t.TempDir(), "strata.db"), sqlite.Options{})
	keys := batchKeys(4)
	fillBatch(t, st, keys)
	backendtest.SQLitePoison(t, st, batchNS, keys[2])
	reqs := make([]is.KeyEntries, len(keys))
	for i, k := range keys {
		reqs[i] = is.KeyEntries{Key: k, Entries: entriesOf(10)}
	}
	errs, err := st.AppendKeys(t.Context(), batchNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var oe *is.OpError
	if errs[2] == nil || !errors.As(errs[2], &oe) || oe.Key != keys[2] || oe.Op != is.OpAppendKeys {
		t.Fatalf("poisoned %q: %v, want its own error naming it", keys[2], errs[2])
	}
	for _, i := range []int{0, 1, 3} {
		if ids := idsOf(t, st, keys[i]); errs[i] != nil || len(ids) == 0 || ids[len(ids)-1] != 10 {
			t.Fatalf("%q beside a poisoned key: %v, ids %v", keys[i], errs[i], ids)
		}
	}
}

// A batch the size of the sweep's, across the multi-row inserts' chunks: keys of every length up to the
// longest, non-ASCII and with the characters JSON escapes, conflicts, a poisoned key and a refused
// insert all in one call. Each key ends as it would had it been appended alone: with no insert refused
// (the batch's few statements), and with one row refused by a foreign trigger in each of SQLite's ways:
// the statement undone (ABORT), the statement stopped with its earlier rows kept (FAIL), the row skipped
// without an error (IGNORE). The refused key fails alone with none of its rows written.
func TestAppendKeys_ManyKeysEachAsAlone(t *testing.T) {
	t.Run("no insert refused", func(t *testing.T) { appendManyKeysEachAsAlone(t, "") })
	for _, raise := range []string{"ABORT, 'refused'", "FAIL, 'refused'", "IGNORE"} {
		t.Run("RAISE("+raise+")", func(t *testing.T) { appendManyKeysEachAsAlone(t, raise) })
	}
}

func appendManyKeysEachAsAlone(t *testing.T, raise string) {
	st := openFile(t, filepath.Join(t.TempDir(), "strata.db"), sqlite.Options{})
	ctx := t.Context()
	keys := batchKeys(200)
	keys[5] = `quote" back\slash <tag> & amp`
	keys[6] = "ünïcødé/键/🙂"
	keys[7] = strings.Repeat("é", is.MaxKeyLen/2)
	fillBatch(t, st, keys) // keys[i] holds ids 1..i
	poisoned, refused := 40, -1
	backendtest.SQLitePoison(t, st, batchNS, keys[poisoned])
	if raise != "" {
		refused = 41
		if err := testenv.ExecUnchecked(ctx, st.DB(), `CREATE TRIGGER refuse BEFORE INSERT ON index_storage
			WHEN new.key = '`+keys[refused]+`' AND new.id = 43 BEGIN SELECT RAISE(`+raise+`); END`); err != nil {
			t.Fatal(err)
		}
	}
	// A conflicting key's last id is far above the ids asked for, which no row holds: the conflict is
	// the check's to find, not the primary key's.
	const high = 1000
	conflicts := func(i int) bool { return i%7 == 3 }
	reqs := make([]is.KeyEntries, len(keys))
	want := make(map[int][]uint64, len(keys))
	for i, k := range keys {
		var ids []uint64
		for id := 1; id <= i; id++ {
			ids = append(ids, uint64(id))
		}
		if conflicts(i) {
			if err := st.Append(ctx, batchNS, k, high, []byte("high")); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, high)
		}
		var add []uint64
		for n := range 1 + i%3 {
			add = append(add, uint64(i+1+n))
		}
		reqs[i] = is.KeyEntries{Key: k, Entries: entriesOf(add...)}
		if !conflicts(i) && i != poisoned && i != refused {
			ids = append(ids, add...)
		}
		want[i] = ids
	}
	errs, err := st.AppendKeys(ctx, batchNS, reqs)
	if err != nil || len(errs) != len(keys) {
		t.Fatalf("AppendKeys: %d results, %v", len(errs), err)
	}
	for i, k := range keys {
		switch {
		case conflicts(i):
			if !errors.Is(errs[i], is.ErrConflict) || !strings.Contains(errs[i].Error(), fmt.Sprintf("last id %d", high)) {
				t.Errorf("%q: %v, want ErrConflict naming last id %d", k, errs[i], high)
			}
		case i == poisoned || i == refused:
			var oe *is.OpError
			if errs[i] == nil || !errors.As(errs[i], &oe) || oe.Key != k {
				t.Errorf("%q: %v, want its own error", k, errs[i])
			}
		case errs[i] != nil:
			t.Errorf("%q: %v", k, errs[i])
		}
		if i == poisoned {
			continue // its rows are not the contract's to read
		}
		if got := idsOf(t, st, k); !slices.Equal(got, want[i]) {
			t.Errorf("%q after the batch: %v, want %v", k, got, want[i])
		}
	}
}
