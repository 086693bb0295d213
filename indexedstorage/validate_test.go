package indexedstorage_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	is "github.com/stratalog/strata/indexedstorage"
)

func TestPrefixEnd_BoundsExactlyTheKeysWithThePrefix(t *testing.T) {
	for _, c := range []struct {
		prefix, end string
		bounded     bool
	}{
		{"", "", false},
		{"a", "b", true},
		{"a_", "a`", true},
		{"é", "ê", true},
		{"a\U0010FFFF", "b", true},
		{"\U0010FFFF", "", false},
		{"\uD7FF", "\uE000", true},
	} {
		end, bounded := is.PrefixEnd(c.prefix)
		if end != c.end || bounded != c.bounded {
			t.Fatalf("PrefixEnd(%q) = %q %v, want %q %v", c.prefix, end, bounded, c.end, c.bounded)
		}
		if bounded && !utf8.ValidString(end) {
			t.Fatalf("PrefixEnd(%q) = %q is not valid UTF-8", c.prefix, end)
		}
	}
	// Every key with the prefix sorts inside [prefix, end), every other key outside.
	keys := []string{"a", "a\U0010FFFF", "a\U0010FFFFz", "ab", "ê", "é", "éz", "b", "", "\U0010FFFF\U0010FFFF"}
	for _, prefix := range []string{"a", "é", "a\U0010FFFF", "\U0010FFFF"} {
		end, bounded := is.PrefixEnd(prefix)
		for _, k := range keys {
			inside := k >= prefix && (!bounded || k < end)
			if inside != strings.HasPrefix(k, prefix) {
				t.Fatalf("prefix %q end %q: key %q inside=%v", prefix, end, k, inside)
			}
		}
	}
}

func TestValidate_RejectsWithInvalidArgument(t *testing.T) {
	bad := []error{
		is.ValidateNamespace(""), is.ValidateNamespace("a:b"), is.ValidateNamespace(strings.Repeat("n", 129)),
		is.ValidateKey(""), is.ValidateKey("a\x00b"), is.ValidateKey("\xff"), is.ValidateKey(strings.Repeat("k", 1025)),
		is.ValidatePrefix("\x00"), is.ValidateScan("ns", "", 0), is.ValidateID(0), is.ValidateID(is.MaxID + 1),
		is.ValidateBatch([]is.Entry{{ID: 1}, {ID: 0}}),
	}
	for i, err := range bad {
		if !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("case %d: %v is not ErrInvalidArgument", i, err)
		}
	}
	if err := is.ValidateBatch([]is.Entry{{ID: 1}, {ID: 3}, {ID: 3}}); !errors.Is(err, is.ErrConflict) {
		t.Fatalf("repeated id in a batch: %v, want ErrConflict", err)
	}
	good := []error{
		is.ValidateNamespace("ephemeral/compressed/1"), is.ValidateKey(strings.Repeat("k", 1024)),
		is.ValidateKey("comp:name/with %_*?[]\\ 日本"), is.ValidatePrefix(""), is.ValidateID(is.MaxID),
		is.ValidateBatch(nil), is.ValidateBatch([]is.Entry{{ID: 1}, {ID: 9}}),
	}
	for i, err := range good {
		if err != nil {
			t.Fatalf("good case %d rejected: %v", i, err)
		}
	}
}

func TestClampRange(t *testing.T) {
	for _, c := range []struct {
		from, to, lo, hi uint64
		ok               bool
	}{
		{0, 10, 1, 10, true}, {5, ^uint64(0), 5, is.MaxID, true}, {7, 6, 7, 6, false}, {is.MaxID + 1, ^uint64(0), is.MaxID + 1, is.MaxID, false},
	} {
		lo, hi, ok := is.ClampRange(c.from, c.to)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Fatalf("ClampRange(%d, %d) = %d %d %v", c.from, c.to, lo, hi, ok)
		}
	}
}

func TestResume_AccessorsRefuseOtherKinds(t *testing.T) {
	if _, start, err := (is.Resume{}).Marker(); !start || err != nil {
		t.Fatal("the zero Resume must read as a start")
	}
	if k, start, err := is.MarkerResume("k").Marker(); k != "k" || start || err != nil {
		t.Fatalf("marker round trip: %q %v %v", k, start, err)
	}
	if c, _, err := is.CursorResume(42).Cursor(); c != 42 || err != nil {
		t.Fatalf("cursor round trip: %d %v", c, err)
	}
	if f, _, err := is.FileResume("f.db").File(); f != "f.db" || err != nil {
		t.Fatalf("file round trip: %q %v", f, err)
	}
	for _, err := range []error{
		func() error { _, _, err := is.CursorResume(3).Marker(); return err }(),
		func() error { _, _, err := is.MarkerResume("k").File(); return err }(),
		func() error { _, _, err := is.FileResume("f").Cursor(); return err }(),
		func() error { _, _, err := is.MarkerResume("").Marker(); return err }(),
		func() error { _, _, err := is.CursorResume(0).Cursor(); return err }(),
	} {
		if !errors.Is(err, is.ErrInvalidArgument) {
			t.Fatalf("foreign or malformed token: %v, want ErrInvalidArgument", err)
		}
	}
}
