package backends_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/backends"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

func TestOpen_EachSchemeGivesAWorkingStore(t *testing.T) {
	dir := t.TempDir()
	urls := map[string]string{
		"memory":           "memory://",
		"sqlite absolute":  "sqlite://" + filepath.Join(dir, "a.db"),
		"multisqlite":      "multisqlite://" + filepath.Join(dir, "multi"),
		"sqlite localhost": "sqlite://localhost" + filepath.Join(dir, "b.db"),
	}
	for name, u := range urls {
		t.Run(name, func(t *testing.T) { requireWorks(t, u) })
	}
	t.Run("sqlite relative", func(t *testing.T) {
		t.Chdir(dir)
		requireWorks(t, "sqlite:relative.db")
	})
	t.Run("postgres", func(t *testing.T) {
		raw := testenv.PostgresURL(t)
		st := requireWorks(t, testenv.WithQuery(t, testenv.WithQuery(t, raw, "schema", testenv.PostgresSchema(t, raw)), "max_concurrent_ops", "3"))
		if lim, ok := st.(is.Limited); !ok || lim.LimiterStats().Limit != 3 {
			t.Fatalf("max_concurrent_ops=3 did not put a limit of 3 on the store: %T", st)
		}
	})
	t.Run("postgres MinConcurrentOps", func(t *testing.T) {
		raw := testenv.PostgresURL(t)
		raw = testenv.WithQuery(t, raw, "schema", testenv.PostgresSchema(t, raw))
		for _, c := range []struct {
			url  string
			want int
		}{
			{raw, 64},
			{testenv.WithQuery(t, raw, "max_concurrent_ops", "3"), 3}, // what the URL sets stands
		} {
			st, err := backends.Open(t.Context(), c.url, &backends.Options{MinConcurrentOps: 64})
			if err != nil {
				t.Fatal(err)
			}
			lim, ok := st.(is.Limited)
			if !ok || lim.LimiterStats().Limit != c.want {
				t.Errorf("%s with MinConcurrentOps 64: %T, want a limit of %d", c.url, st, c.want)
			}
			st.Close()
		}
	})
	t.Run("redis", func(t *testing.T) {
		raw := testenv.RedisURL(t)
		requireWorks(t, testenv.WithQuery(t, raw, "prefix", testenv.RedisPrefix(t, raw)))
	})
}

func requireWorks(t *testing.T, rawURL string) is.Storage {
	t.Helper()
	st, err := backends.Open(t.Context(), rawURL, nil)
	if err != nil {
		t.Fatalf("Open(%q): %v", rawURL, err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Append(t.Context(), "ns", "k", 1, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Length(t.Context(), "ns", "k"); n != 1 || err != nil {
		t.Fatalf("Length %d, %v", n, err)
	}
	return st
}

func TestOpen_BadURLsAreClearErrors(t *testing.T) {
	for raw, want := range map[string]string{
		"":                            "no scheme",
		"nosuch://x":                  `unknown scheme "nosuch"`,
		"file:///tmp/x":               `unknown scheme "file"`,
		"memory://host":               "memory takes no host",
		"sqlite://":                   "has no path",
		"sqlite://otherhost/x.db":     `names host "otherhost"`,
		"sqlite:///x.db?mode=ro":      "takes no parameters",
		"multisqlite://":              "has no path",
		"postgres://u:secret@%zz/db":  "storage URL",
		"redis://127.0.0.1:1/0?x=%zz": "",
	} {
		st, err := backends.Open(t.Context(), raw, nil)
		if err == nil {
			st.Close()
			t.Fatalf("Open(%q) succeeded", raw)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Open(%q): %q does not say %q", raw, err, want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("Open(%q) echoed the password: %v", raw, err)
		}
	}
}

func TestOpen_UnknownSchemeListsTheKnownOnes(t *testing.T) {
	_, err := backends.Open(t.Context(), "mysql://x", nil)
	for _, s := range backends.Schemes {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%v does not list %s", err, s)
		}
	}
	if errors.Is(err, is.ErrTransient) {
		t.Fatal("a bad URL must not read as transient")
	}
}

func TestOpenBlob(t *testing.T) {
	dir := t.TempDir()
	for _, raw := range []string{"memory://", "fs://" + filepath.Join(dir, "abs"), "fs:rel", "file://" + filepath.Join(dir, "file"), "mem://"} {
		t.Chdir(dir)
		bs, err := backends.OpenBlob(t.Context(), raw)
		if err != nil {
			t.Fatalf("OpenBlob(%q): %v", raw, err)
		}
		if err := bs.Put(t.Context(), "a/b", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if got, err := bs.Get(t.Context(), "a/b"); err != nil || string(got) != "x" {
			t.Fatalf("%s: %q %v", raw, got, err)
		}
		bs.Close()
	}
	for raw, want := range map[string]string{"ftp://bucket": `unknown scheme "ftp"`, "fs:": "has no path", "memory://x": "memory takes no host",
		"s3://": "names no bucket", "s3://b?bogus=1": "bogus", "file://host/dir": `names host "host"`} {
		bs, err := backends.OpenBlob(t.Context(), raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("OpenBlob(%q): %v, want %q", raw, err, want)
		}
		if bs != nil {
			t.Fatalf("OpenBlob(%q) failed but returned a non-nil store %#v, which a deferred Close would dereference", raw, bs)
		}
	}
}

func TestOpenSchedule(t *testing.T) {
	requireSchedule := func(t *testing.T, raw string) {
		s, err := backends.OpenSchedule(t.Context(), raw)
		if err != nil {
			t.Fatalf("OpenSchedule(%q): %v", raw, err)
		}
		defer s.Close()
		if c, err := s.Counts(t.Context(), time.Now()); err != nil || c.Pending != 0 {
			t.Fatalf("%s: %+v %v", raw, c, err)
		}
	}
	requireSchedule(t, "memory://")
	requireSchedule(t, "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	t.Run("postgres", func(t *testing.T) {
		raw := testenv.PostgresURL(t)
		requireSchedule(t, testenv.WithQuery(t, raw, "schema", testenv.PostgresSchema(t, raw)))
	})
	if _, err := backends.OpenSchedule(t.Context(), "redis://x"); err == nil || !strings.Contains(err.Error(), `unknown scheme "redis"`) {
		t.Fatalf("redis schedule: %v", err)
	}
}

// A failed open returns a nil interface, never one holding a nil pointer (which a caller's deferred
// Close would dereference).
func TestFailedOpensReturnNil(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := backends.Open(t.Context(), "multisqlite://"+filepath.Join(file, "sub"), nil); err == nil || st != nil {
		t.Fatalf("Open under a file: %#v, %v", st, err)
	}
	if st, err := backends.Open(t.Context(), "sqlite://"+filepath.Join(file, "sub", "x.db"), nil); err == nil || st != nil {
		t.Fatalf("Open under a file: %#v, %v", st, err)
	}
	if s, err := backends.OpenSchedule(t.Context(), "sqlite://"+filepath.Join(file, "sub", "x.db")); err == nil || s != nil {
		t.Fatalf("OpenSchedule under a file: %#v, %v", s, err)
	}
	if bs, err := backends.OpenBlob(t.Context(), "fs://"+filepath.Join(file, "sub")); err == nil || bs != nil {
		t.Fatalf("OpenBlob under a file: %#v, %v", bs, err)
	}
}
