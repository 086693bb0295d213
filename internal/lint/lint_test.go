// Package lint holds repository-wide checks that the compiler cannot make, in the manner of Pebble's
// internal/lint: each test walks the module's source and fails naming the file and line that break a
// rule.
package lint

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// backendErrorText matches an error a backend words by hand with its own name first, the shape every
// Storage operation's error must take through its backend's choke point (is.OpError) instead.
var backendErrorText = regexp.MustCompile(`(fmt\.Errorf|errors\.New)\("(memory|sqlite|multisqlite|postgres|redis) `)

// handWordedAllowed lists the files that may still word such errors, each with why: none of them is an
// error of an indexed-storage operation.
var handWordedAllowed = map[string]string{
	"backends/memory/blob.go":       "the memory blob store's choke point failBlob: archive.BlobStore, not a Storage",
	"backends/memory/schedule.go":   "the memory schedule store: schedule.Store, not a Storage",
	"backends/sqlite/schedule.go":   "the SQLite schedule store: schedule.Store, its own choke point fail",
	"backends/sqlite/status.go":     "the schedule table's schema state, read before any store is open",
	"backends/postgres/schedule.go": "the PostgreSQL schedule store: schedule.Store, its own choke point fail",
	"backends/redis/open.go":        "opening from a URL: no operation, no index",
	"backends/redis/status.go":      "the layout state, read before any store is open",
	"backends/migrations.go":        "the migration state of a storage URL: no operation, no index",
}

// opErrorBuilt matches where an is.OpError is made.
var opErrorBuilt = regexp.MustCompile(`\bNewOpError\(|\bOpError\{`)

// chokePoints are the only files of the backends that build an is.OpError: each backend's fail.
var chokePoints = map[string]bool{
	"backends/memory/memory.go":           true,
	"backends/sqlite/sqlite.go":           true,
	"backends/multisqlite/multisqlite.go": true,
	"backends/postgres/postgres.go":       true,
	"backends/redis/redis.go":             true,
}

func TestBackendErrorsTakeTheOneShape(t *testing.T) {
	used := map[string]bool{}
	for _, f := range sourceFiles(t) {
		for _, hit := range grep(t, f, backendErrorText) {
			if _, ok := handWordedAllowed[f]; ok {
				used[f] = true
				continue
			}
			t.Errorf("%s: %s\n\tan operation's error is an is.OpError made by the backend's fail, not worded by hand", f, hit)
		}
	}
	for f := range handWordedAllowed {
		if !used[f] {
			t.Errorf("%s is allowed to word backend errors by hand but no longer does: remove it from handWordedAllowed", f)
		}
	}
}

func TestOpErrorsAreBuiltAtTheChokePointsOnly(t *testing.T) {
	for _, f := range sourceFiles(t) {
		if !strings.HasPrefix(f, "backends/") || chokePoints[f] {
			continue
		}
		for _, hit := range grep(t, f, opErrorBuilt) {
			t.Errorf("%s: %s\n\ta backend builds its OpErrors in one function, its fail (one of %v)", f, hit, keys(chokePoints))
		}
	}
}

// backendNamePrefix matches an error worded with a backend's name first, in any form ("sqlite: …").
var backendNamePrefix = regexp.MustCompile(`(fmt\.Errorf|errors\.New)\("(memory|sqlite|multisqlite|postgres|redis)[ :]`)

// An engine shared by backends (backends/internal/...) words no error with a backend's name: each
// backend that runs it names its own errors at its own choke point.
func TestSharedEnginesNameNoBackend(t *testing.T) {
	for _, f := range sourceFiles(t) {
		if !strings.HasPrefix(f, "backends/internal/") {
			continue
		}
		for _, hit := range grep(t, f, backendNamePrefix) {
			t.Errorf("%s: %s\n\ta shared engine's error names no backend: the backend that runs it does", f, hit)
		}
	}
}

// sourceFiles lists the module's non-test Go files, relative to its root, with '/' separators.
func sourceFiles(t *testing.T) []string {
	t.Helper()
	root := moduleRoot(t)
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files under %s", root)
	}
	return files
}

// moduleRoot is the nearest directory above the test's that holds go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// grep returns "line N: text" for each line of the file (relative to the module root) that re matches.
func grep(t *testing.T, rel string, re *regexp.Regexp) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(moduleRoot(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hits []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if re.MatchString(sc.Text()) {
			hits = append(hits, "line "+strconv.Itoa(n)+": "+strings.TrimSpace(sc.Text()))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return hits
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
