package oplog_test

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

func TestStoredKey_CarriesTheBucketAndParsesBack(t *testing.T) {
	longest := oplog.AgentID{Component: "c", Name: strings.Repeat("名", (oplog.MaxKeyLen-2)/3) + strings.Repeat("n", (oplog.MaxKeyLen-2)%3)}
	for _, a := range []oplog.AgentID{
		{Component: "c", Name: "a"},
		{Component: "shop", Name: "cart/42:x%_*?[]\\"},
		{Component: "日本", Name: "ünïcödé 🎉"},
		longest,
	} {
		key := a.StoredKey()
		if !strings.HasPrefix(key, is.BucketPrefix(a.Bucket())) || key[is.BucketPrefixLen:] != a.Key() {
			t.Fatalf("StoredKey(%v) = %q", a, key)
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("Validate(%v): %v", a, err)
		}
		got, err := oplog.ParseStoredKey(key)
		if err != nil || got != a {
			t.Fatalf("ParseStoredKey(%q) = %+v, %v", key, got, err)
		}
	}
	if len(longest.StoredKey()) != is.MaxKeyLen {
		t.Fatalf("the longest agent's stored key has %d bytes, want %d", len(longest.StoredKey()), is.MaxKeyLen)
	}
	tooLong := oplog.AgentID{Component: "c", Name: longest.Name + "n"}
	if err := tooLong.Validate(); !errors.Is(err, oplog.ErrInvalidAgent) {
		t.Fatalf("an agent key of %d bytes: %v, want ErrInvalidAgent", len(tooLong.Key()), err)
	}
	if got := (oplog.AgentID{Component: "c", Name: "a"}).StoredKey(); got != "0a5b/c:a" {
		t.Fatalf("StoredKey(c:a) = %q, want the documented 0a5b/c:a", got)
	}
}

func TestParseStoredKey_RefusesKeysThatAreNoAgentsStoredKey(t *testing.T) {
	a := oplog.AgentID{Component: "c", Name: "a"}
	for _, key := range []string{
		"c:a",                        // no prefix
		"0a5c/c:a",                   // the next bucket's prefix
		"0A5B/c:a",                   // upper-case digits
		"0a5b/c", "0a5b/:a", "0a5b/", // no agent after the prefix
		"0a5bc:a",
	} {
		if got, err := oplog.ParseStoredKey(key); !errors.Is(err, oplog.ErrInvalidAgent) {
			t.Errorf("ParseStoredKey(%q) = %+v, %v; want ErrInvalidAgent", key, got, err)
		}
	}
	if _, err := oplog.ParseStoredKey(a.StoredKey()); err != nil {
		t.Fatal(err)
	}
}

func TestCoalesceBuckets(t *testing.T) {
	got := oplog.CoalesceBuckets([]oplog.BucketRange{{Lo: 10, Hi: 20}, {Lo: 0, Hi: 5}, {Lo: 5, Hi: 7}, {Lo: 15, Hi: 30}, {Lo: 40, Hi: 40}, {Lo: 31, Hi: 32}})
	want := []oplog.BucketRange{{Lo: 0, Hi: 7}, {Lo: 10, Hi: 30}, {Lo: 31, Hi: 32}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// The stored-key table of docs/storage-format.md, which executors in other languages check themselves
// against, is what StoredKey makes.
func TestStoredKey_MatchesTheDocumentedTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/storage-format.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^  \\| `([^`]+)` \\| `([0-9a-f]{4}/[^`]+)` \\|$")
	rows := row.FindAllStringSubmatch(string(doc), -1)
	if len(rows) < 5 {
		t.Fatalf("found %d rows of the stored-key table", len(rows))
	}
	for _, r := range rows {
		a, err := oplog.ParseAgentKey(r[1])
		if err != nil {
			t.Fatal(err)
		}
		if got := a.StoredKey(); got != r[2] {
			t.Errorf("%q: stored key %q, the document says %q", r[1], got, r[2])
		}
	}
}

// docs/storage-format.md: neither part of an agent key may be empty. ":a", "c:" and ":" are no agent's
// key, the stack refuses to write such an agent, and a stored key made from one, with the right bucket
// prefix, is no agent's stored key either (the sweep counts it unparseable).
func TestAgentKey_AnEmptyComponentOrNameIsInvalid(t *testing.T) {
	st := memory.New()
	stack, err := archive.DefaultStack(st, memory.NewBlobStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{":a", "c:", ":"} {
		if a, err := oplog.ParseAgentKey(key); !errors.Is(err, oplog.ErrInvalidAgent) {
			t.Errorf("ParseAgentKey(%q) = %+v, %v; want ErrInvalidAgent", key, a, err)
		}
		component, name, _ := strings.Cut(key, ":")
		a := oplog.AgentID{Component: component, Name: name}
		if err := stack.Append(t.Context(), a, oplog.Ephemeral, entries(1, 1)); !errors.Is(err, oplog.ErrInvalidAgent) {
			t.Errorf("Append for %q: %v, want ErrInvalidAgent", key, err)
		}
		if stored := a.StoredKey(); !strings.HasPrefix(stored, is.BucketPrefix(a.Bucket())) {
			t.Fatalf("StoredKey(%q) = %q", key, stored)
		} else if got, err := oplog.ParseStoredKey(stored); !errors.Is(err, oplog.ErrInvalidAgent) {
			t.Errorf("ParseStoredKey(%q) = %+v, %v; want ErrInvalidAgent", stored, got, err)
		}
	}
	if got := (oplog.AgentID{Name: "a"}).StoredKey(); got != "11a4/:a" {
		t.Fatalf("the stored key docs/storage-format.md shows for :a is %q", got)
	}
	for _, ns := range []string{oplog.PrimaryNamespace(oplog.Ephemeral), oplog.CompressedNamespace(oplog.Ephemeral, 1)} {
		if _, keys, err := st.Scan(t.Context(), ns, "", 0, 100); err != nil || len(keys) != 0 {
			t.Fatalf("%s holds %q after the refused appends (%v)", ns, keys, err)
		}
	}
}
