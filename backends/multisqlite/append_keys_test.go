package multisqlite

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// appendReqs gives each key of ks (filled by fillBatch: ks[i] holds 1..i) a part of a different kind:
// entries above its last id (a new file for ks[0]), nothing, or a first id at its last id (a conflict).
func appendReqs(ks []string) []is.KeyEntries {
	reqs := make([]is.KeyEntries, 0, len(ks)+1)
	for i, k := range ks {
		r := is.KeyEntries{Key: k}
		switch {
		case i%3 == 1:
			// nothing to append
		case i%3 == 2:
			r.Entries = []is.Entry{{ID: uint64(i), Value: []byte("again")}, {ID: uint64(i + 1), Value: []byte("x")}}
		default:
			r.Entries = []is.Entry{{ID: uint64(i + 1), Value: []byte(k)}, {ID: uint64(i + 5), Value: nil}}
		}
		reqs = append(reqs, r)
	}
	// A key never written, with nothing to append: no file may be made for it.
	return append(reqs, is.KeyEntries{Key: "agent:missing"})
}

// Each key's part of a batch append is AppendMany of that key: the same errors, entries and files, a
// conflict in the middle of the batch failing its key alone and leaving it as it was.
func TestAppendKeys_EqualsAppendManyOfEachKey(t *testing.T) {
	ks := batchKeys()
	byBatch, byKey := open(t, t.TempDir(), Options{}), open(t, t.TempDir(), Options{})
	fillBatch(t, byBatch, ks)
	fillBatch(t, byKey, ks)
	reqs := appendReqs(ks)
	errs, err := byBatch.AppendKeys(t.Context(), testNS, reqs)
	if err != nil || len(errs) != len(reqs) {
		t.Fatalf("AppendKeys: %d results for %d keys, %v", len(errs), len(reqs), err)
	}
	conflicts := 0
	for i, r := range reqs {
		perKey := byKey.AppendMany(t.Context(), testNS, r.Key, r.Entries)
		if (errs[i] == nil) != (perKey == nil) || errors.Is(errs[i], is.ErrConflict) != errors.Is(perKey, is.ErrConflict) {
			t.Fatalf("%q: the batch says %v, AppendMany %v", r.Key, errs[i], perKey)
		}
		var oe *is.OpError
		if errs[i] != nil && (!errors.As(errs[i], &oe) || oe.Op != is.OpAppendKeys || oe.Key != r.Key) {
			t.Fatalf("%q: %v, want an OpError of append_keys naming the key", r.Key, errs[i])
		}
		if errors.Is(errs[i], is.ErrConflict) {
			conflicts++
		}
	}
	if conflicts == 0 {
		t.Fatal("no part conflicted: the test checks nothing of a key's own failure")
	}
	if got, want := state(t, byBatch, ks), state(t, byKey, ks); !maps.Equal(got, want) {
		t.Fatalf("after the batch:\n%v\nafter AppendMany of each key:\n%v", got, want)
	}
}

// An unreadable file fails its own key; the other keys are appended.
func TestAppendKeys_UnreadableFileFailsItsKeyAlone(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	ks := keys(6)
	fillBatch(t, st, ks)
	poisoned := ks[3]
	poison(t, st, testNS, poisoned)
	reqs := make([]is.KeyEntries, len(ks))
	for i, k := range ks {
		reqs[i] = is.KeyEntries{Key: k, Entries: []is.Entry{{ID: 10, Value: []byte("ten")}}}
	}
	errs, err := st.AppendKeys(t.Context(), testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range ks {
		var oe *is.OpError
		if k == poisoned {
			if errs[i] == nil || !errors.As(errs[i], &oe) || oe.Key != k || oe.Op != is.OpAppendKeys {
				t.Fatalf("unreadable %q: %v, want its own error naming it", k, errs[i])
			}
			continue
		}
		if last, ok, err := st.LastID(t.Context(), testNS, k); errs[i] != nil || err != nil || !ok || last != 10 {
			t.Fatalf("%q beside an unreadable file: %v; last id %d (%v, %v), want 10", k, errs[i], last, ok, err)
		}
	}
}

// A batch append whose caller has given up fails each key at once, opening and making no file.
func TestAppendKeys_CancelledOpensNothing(t *testing.T) {
	dir := t.TempDir()
	ks := keys(5)
	fillBatch(t, open(t, dir, Options{}), ks)
	st := open(t, dir, Options{})
	reqs := make([]is.KeyEntries, len(ks))
	for i, k := range ks {
		reqs[i] = is.KeyEntries{Key: k, Entries: []is.Entry{{ID: 9}}}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	errs, err := st.AppendKeys(ctx, testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if !errors.Is(errs[i], context.Canceled) || !strings.Contains(errs[i].Error(), ks[i]) {
			t.Fatalf("%q in a cancelled batch: %v", ks[i], errs[i])
		}
	}
	if n := st.Stats().FilesOpened; n != 0 {
		t.Fatalf("a cancelled batch opened %d files", n)
	}
}
