package indexedstorage_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The contract must not depend on any engine: backends import indexedstorage, never the reverse.
func TestIndexedStorageImportsNoBackend(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/stratalog/strata/indexedstorage").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/stratalog/strata/backends") ||
			strings.HasPrefix(dep, "github.com/jackc/") || strings.HasPrefix(dep, "github.com/redis/") ||
			strings.HasPrefix(dep, "github.com/mattn/") {
			t.Fatalf("indexedstorage depends on %s", dep)
		}
	}
}
