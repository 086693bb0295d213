package fileurl

import (
	"errors"
	"strings"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

func TestParse_ReadsThePathOfItsOwnSchemesOnly(t *testing.T) {
	for _, c := range []struct {
		url     string
		schemes []string
		want    string
	}{
		{"sqlite:///abs/file.db", []string{"sqlite"}, "/abs/file.db"},
		{"sqlite://localhost/abs/file.db", []string{"sqlite"}, "/abs/file.db"},
		{"sqlite:rel/file.db", []string{"sqlite"}, "rel/file.db"},
		{"file:///abs/dir", []string{"fs", "file"}, "/abs/dir"},
	} {
		if got, err := Parse(c.url, c.schemes...); err != nil || got != c.want {
			t.Errorf("Parse(%q, %v) = %q, %v; want %q", c.url, c.schemes, got, err, c.want)
		}
	}
	for _, c := range []struct {
		url, scheme, says string
	}{
		{"multisqlite:///abs/dir", "sqlite", "want a sqlite: URL"},
		{"sqlite://host/x.db", "sqlite", `names host "host"`},
		{"sqlite:///x.db?mode=ro", "sqlite", "takes no parameters"},
		{"sqlite://", "sqlite", "has no path"},
	} {
		_, err := Parse(c.url, c.scheme)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Parse(%q, %s): %v, want an error saying %q", c.url, c.scheme, err, c.says)
		}
	}
	if _, err := Parse("multisqlite:///abs/dir", "sqlite"); !errors.Is(err, is.ErrInvalidArgument) {
		t.Errorf("another scheme: %v, want ErrInvalidArgument", err)
	}
}
