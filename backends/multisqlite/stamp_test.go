package multisqlite

import (
	"runtime"
	"testing"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
)

// stampsOf walks the namespace in one page and returns each key's change stamp.
func stampsOf(t *testing.T, st *Store) map[string]string {
	t.Helper()
	page, err := st.ScanStable(t.Context(), testNS, is.KeyRange{}, is.Resume{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !page.Done || len(page.Stamps) != len(page.Keys) {
		t.Fatalf("a page of %d keys (done %v) with %d stamps", len(page.Keys), page.Done, len(page.Stamps))
	}
	out := make(map[string]string)
	for i, k := range page.Keys {
		out[k] = page.Stamps[i]
	}
	return out
}

// A walk stamps each key with its file's change stamp, opening no file: the stamp changes with every
// append, drop and re-creation of the key's file and with nothing done to another key's, and a file
// changed within the last second is not stamped.
func TestStamps_ChangeWithTheirFileOnly(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("change stamps need statx (Linux)")
	}
	ctx := t.Context()
	st := open(t, t.TempDir(), Options{})
	a, b := agentKey("a"), agentKey("b")
	for _, k := range []string{a, b} {
		if err := st.Append(ctx, testNS, k, 1, []byte("one")); err != nil {
			t.Fatal(err)
		}
	}
	st.hooks.now = func() time.Time { return time.Unix(0, 0) } // nothing has settled yet
	for k, s := range stampsOf(t, st) {
		if s != "" {
			t.Fatalf("%s changed just now, yet is stamped %q", k, s)
		}
	}
	st.hooks.now = func() time.Time { return time.Now().Add(time.Hour) } // everything has settled
	opened := st.pool.openings.Load()
	first := stampsOf(t, st)
	if first[a] == "" || first[b] == "" || first[a] == first[b] {
		t.Fatalf("stamps of two settled files: %q, %q", first[a], first[b])
	}
	if n := st.pool.openings.Load() - opened; n != 0 {
		t.Fatalf("a walk opened %d files", n)
	}
	if again := stampsOf(t, st); again[a] != first[a] || again[b] != first[b] {
		t.Fatalf("nothing changed, yet the stamps did: %q → %q, %q → %q", first[a], again[a], first[b], again[b])
	}

	seen := map[string]bool{first[a]: true, first[b]: true}
	changed := func(what string) {
		t.Helper()
		now := stampsOf(t, st)
		if seen[now[a]] {
			t.Fatalf("after %s, %s's stamp %q was seen before", what, a, now[a])
		}
		if now[b] != first[b] {
			t.Fatalf("after %s on %s, %s's stamp changed: %q → %q", what, a, b, first[b], now[b])
		}
		seen[now[a]] = true
	}
	if err := st.Append(ctx, testNS, a, 2, []byte("two")); err != nil {
		t.Fatal(err)
	}
	changed("an append")
	if _, err := st.DropPrefix(ctx, testNS, a, 1); err != nil {
		t.Fatal(err)
	}
	changed("a drop")
	if _, err := st.DropPrefix(ctx, testNS, a, 2); err != nil { // empties the file: it is removed
		t.Fatal(err)
	}
	if err := st.Append(ctx, testNS, a, 3, []byte("three")); err != nil {
		t.Fatal(err)
	}
	changed("a removal and re-creation")
}

// How old a change must be for a stamp follows the file system's granule: times with nanoseconds come
// from the kernel's coarse clock, whose ticks are milliseconds (StampSettleFine); whole seconds need a
// second (StampSettle).
func TestStampSettle_FollowsTheGranuleOfTheFileTimes(t *testing.T) {
	if got := stampSettle(0); got != StampSettle {
		t.Errorf("a ctime of whole seconds settles in %v, want %v", got, StampSettle)
	}
	if got := stampSettle(1); got != StampSettleFine {
		t.Errorf("a ctime with nanoseconds settles in %v, want %v", got, StampSettleFine)
	}
}
