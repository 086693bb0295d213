package crash_test

import (
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/stratalog/strata/test/strataproc"
)

// crashBin is the strata binary, built once per test that needs it into that test's temporary
// directory.
var crashBin struct {
	mu   sync.Mutex
	path string
}

// crashBinary builds ./cmd/strata once: later calls return the same binary while it exists (a later
// test of the same run, after the first one's directory is gone, builds it again).
func crashBinary(t *testing.T) string {
	t.Helper()
	crashBin.mu.Lock()
	defer crashBin.mu.Unlock()
	if crashBin.path != "" {
		if _, err := os.Stat(crashBin.path); err == nil {
			return crashBin.path
		}
	}
	bin, err := strataproc.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	crashBin.path = bin
	return bin
}

// feed gives the process the single shard, without a lease, and an empty resident set: from its next
// tick on, the sweep archives every stranded agent that passes the quiet gate.
func feed(t *testing.T, p *strataproc.Process) {
	t.Helper()
	if code, resp := p.Call(t, http.MethodPut, "/v1/assignment", "", `{"shard_count":1,"shards":[0]}`); code != http.StatusOK {
		t.Fatalf("assignment: %d %s", code, resp)
	}
	if code, resp := p.Call(t, http.MethodPut, "/v1/residency", "", `{"agents":[]}`); code != http.StatusOK {
		t.Fatalf("residency: %d %s", code, resp)
	}
}
