package storagetest

import (
	"slices"
	"strings"
	"testing"
)

// specialKeys are keys every backend must store and scan literally: the characters SQL LIKE, glob
// patterns, URL and path escaping treat specially, spaces, and non-ASCII text.
var specialKeys = []string{
	"a/b", "a:b", "100%", "a_b", "ab", "a*", "a?", "[x]", "x", `back\slash`, `\`, "with space", " lead",
	"ünïcödé", "日本語", "emoji 🎉", "a%_*?[]\\:/ mix", "..", "../escape", "a\U0010FFFFb", "\U0010FFFF",
	strings.Repeat("long/", 200),
}

func testKeys(t *testing.T, h Harness) {
	t.Run("SpecialCharactersRoundTrip", func(t *testing.T) {
		f := newFixture(t, h)
		for i, k := range specialKeys {
			f.append(ns, k, uint64(i+1), uint64(i+2))
		}
		for i, k := range specialKeys {
			requireIDs(t, f.ids(ns, k), []uint64{uint64(i + 1), uint64(i + 2)}, "key "+k)
			if !f.exists(ns, k) {
				t.Fatalf("%q does not exist", k)
			}
		}
		want := keySet(specialKeys)
		for _, count := range []int{1, 3, 100} {
			if got := keySet(f.walk(ns, "", count, nil)); !slices.Equal(got, want) {
				t.Fatalf("walk with pages of %d:\n got %q\nwant %q", count, got, want)
			}
		}
		if got := keySet(f.scanAll(ns, "", 5)); !slices.Equal(got, want) {
			t.Fatalf("Scan:\n got %q\nwant %q", got, want)
		}
		for i, k := range specialKeys {
			if i%2 == 0 {
				f.delete(ns, k)
			} else {
				f.dropPrefix(ns, k, uint64(i+2))
			}
			f.requireGone(ns, k)
		}
	})

	t.Run("PrefixMatchesLiterally", func(t *testing.T) {
		f := newFixture(t, h)
		for _, k := range specialKeys {
			f.append(ns, k, 1)
		}
		prefixes := []string{"a_", "a%", "10", "a*", "a?", "[", "[x", `back\`, `\`, "a", "日", "a\U0010FFFF", "\U0010FFFF",
			"with ", "ü", "a%_*?[]", "long/long/", "zzz", "."}
		for _, prefix := range prefixes {
			var want []string
			for _, k := range specialKeys {
				if strings.HasPrefix(k, prefix) {
					want = append(want, k)
				}
			}
			want = keySet(want)
			for _, count := range []int{1, 4} {
				if got := keySet(f.walk(ns, prefix, count, nil)); !slices.Equal(got, want) {
					t.Fatalf("ScanStable prefix %q pages of %d:\n got %q\nwant %q", prefix, count, got, want)
				}
			}
			if got := keySet(f.scanAll(ns, prefix, 3)); !slices.Equal(got, want) {
				t.Fatalf("Scan prefix %q:\n got %q\nwant %q", prefix, got, want)
			}
		}
	})
}

// scanAll walks Scan to its end without changing anything and returns what it saw.
func (f *fixture) scanAll(ns, prefix string, count int) []string {
	f.t.Helper()
	var all []string
	for cursor, calls := uint64(0), 0; ; calls++ {
		if calls > 100_000 {
			f.t.Fatalf("Scan(%q, %q) did not finish", ns, prefix)
		}
		next, keys, err := f.st.Scan(f.ctx, ns, prefix, cursor, count)
		if err != nil {
			f.t.Fatalf("Scan(%q, %q, %d): %v", ns, prefix, cursor, err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				f.t.Fatalf("Scan with prefix %q returned %q", prefix, k)
			}
		}
		all = append(all, keys...)
		if next == 0 {
			return all
		}
		cursor = next
	}
}
