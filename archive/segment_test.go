package archive_test

import (
	"strings"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/oplog"
)

// Segments that fit map exactly as EscapeSegment always mapped them: archives written before the bound
// existed stay readable.
func TestPathSegment_ShortStringsMapAsBefore(t *testing.T) {
	for in, want := range map[string]string{
		"cart/42":                       "cart%2F42",
		"shop":                          "shop",
		"..":                            "%2E%2E",
		"100%":                          "100%25",
		"a b":                           "a%20b",
		"_-":                            "_-",
		"日本":                            "%E6%97%A5%E6%9C%AC",
		"🎉":                             "%F0%9F%8E%89",
		strings.Repeat("a", 255):        strings.Repeat("a", 255),
		strings.Repeat("é", 42) + "abc": strings.Repeat("%C3%A9", 42) + "abc", // 255 bytes escaped
	} {
		if got := archive.PathSegment(in); got != want {
			t.Errorf("PathSegment(%q) = %q, want %q", in, got, want)
		}
		if got := archive.EscapeSegment(in); got != want {
			t.Errorf("EscapeSegment(%q) = %q, want %q", in, got, want)
		}
	}
}

// The vectors of docs/storage-format.md.
func TestPathSegment_LongStringsMatchTheDocumentedForm(t *testing.T) {
	for in, want := range map[string]string{
		strings.Repeat("日", 30):  strings.Repeat("%E6%97%A5", 21) + ".213f42f234de47962d9706163081979dcae2cb644cdc3d7246d4c1518a4263fc",
		strings.Repeat("a", 256): strings.Repeat("a", 190) + ".02d7160d77e18c6447be80c2e355c7ed4388545271702c50253b0914c65ce5fe",
	} {
		if got := archive.PathSegment(in); got != want {
			t.Errorf("PathSegment(%d bytes) = %q, want %q", len(in), got, want)
		}
	}
}

func TestPathSegment_LongStringsAreBoundedValidAndDistinct(t *testing.T) {
	shared := strings.Repeat("x/日", 60) // 300 bytes
	names := []string{
		shared + "one", shared + "two", shared + "one ", shared + strings.Repeat("🎉", 180),
		strings.Repeat("a", 256), strings.Repeat("a", 257), strings.Repeat("%", 86), strings.Repeat("ab%", 80),
	}
	seen := map[string]string{}
	for _, name := range names {
		seg := archive.PathSegment(name)
		if len(seg) > archive.MaxSegmentLen {
			t.Errorf("PathSegment of %d bytes has %d bytes, more than %d", len(name), len(seg), archive.MaxSegmentLen)
		}
		if err := archive.ValidateBlobPath("ephemeral/0/"+seg+"/00000000000000000001", false); err != nil {
			t.Errorf("PathSegment of %d bytes: %v", len(name), err)
		}
		prefix, hash, ok := strings.Cut(seg, ".")
		if !ok || len(hash) != 64 || !strings.HasPrefix(archive.EscapeSegment(name), prefix) {
			t.Errorf("PathSegment of %d bytes is %q: not a prefix of the escaped form, '.', a SHA-256", len(name), seg)
		}
		if i := strings.LastIndexByte(prefix, '%'); i >= 0 && i > len(prefix)-3 {
			t.Errorf("PathSegment of %d bytes cuts an escape: %q", len(name), prefix[max(0, len(prefix)-6):])
		}
		if other, dup := seen[seg]; dup {
			t.Errorf("%q and %q map to the same segment %q", other, name, seg)
		}
		seen[seg] = name
	}
}

func TestBlob_ChunkPathOfAShortAgentIsAsDocumented(t *testing.T) {
	b0, err := archive.NewBlob(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	agent := oplog.AgentID{Component: "shop", Name: "cart/42"}
	if got, want := b0.ChunkPath(agent, oplog.Ephemeral, 4096), "ephemeral/0/111e/shop/cart%2F42/00000000000000004096"; got != want {
		t.Fatalf("ChunkPath = %q, want %q", got, want)
	}
}
