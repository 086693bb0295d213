package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet_NamesTheToolchainAndAVersion(t *testing.T) {
	info := Get()
	if info.GoVersion != runtime.Version() {
		t.Fatalf("GoVersion %q, want %q", info.GoVersion, runtime.Version())
	}
	if info.Version == "" {
		t.Fatal("empty Version")
	}
	if s := info.String(); !strings.HasPrefix(s, "strata ") || !strings.HasSuffix(s, runtime.Version()) {
		t.Fatalf("String() = %q", s)
	}
}

func TestString_ShortensTheCommitAndSaysModified(t *testing.T) {
	got := Info{Version: "v1.2.3", Commit: "0123456789abcdef0123", Modified: true, GoVersion: "go1.26.8"}.String()
	if want := "strata v1.2.3 commit 0123456789ab (modified) go1.26.8"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestRevision_IsTheCommitMarkedModified(t *testing.T) {
	for _, c := range []struct {
		info Info
		want string
	}{
		{Info{Commit: "0123abc", Modified: true}, "0123abc-modified"},
		{Info{Commit: "0123abc"}, "0123abc"},
		{Info{Modified: true}, ""},
	} {
		if got := c.info.Revision(); got != c.want {
			t.Errorf("%+v.Revision() = %q, want %q", c.info, got, c.want)
		}
	}
}
