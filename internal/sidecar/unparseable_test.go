package sidecar

import (
	"testing"

	"github.com/stratalog/strata/oplog"
)

// A key outside every bucket's range that a foreign writer put in the namespace the sweep walks is
// named in the tick's report (POST /v1/sweep) and in /v1/status, not only counted.
func TestAPI_AKeyOutsideTheBucketsIsNamedInTheReportAndTheStatus(t *testing.T) {
	s, srv, _ := testSidecar(t, nil)
	if err := s.storage.Append(t.Context(), oplog.CompressedNamespace(oplog.Ephemeral, 1), "nobucket", 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, srv, "PUT", "/v1/assignment", "", jsonBody(map[string]any{"shard_count": 1, "shards": []int{0}, "lease_seconds": 60})); code != 200 {
		t.Fatalf("assignment: %d %v", code, body)
	}
	if code, body := call(t, srv, "PUT", "/v1/residency", "", jsonBody(map[string]any{"agents": []string{}})); code != 200 {
		t.Fatalf("residency: %d %v", code, body)
	}
	named := func(list any) bool {
		items, _ := list.([]any)
		for _, it := range items {
			if m, _ := it.(map[string]any); m["key"] == "nobucket" && m["why"] != "" {
				return true
			}
		}
		return false
	}
	code, rep := call(t, srv, "POST", "/v1/sweep", "", nil)
	routes, _ := rep["routes"].([]any)
	if code != 200 || len(routes) == 0 || !named(routes[0].(map[string]any)["unparseable"]) {
		t.Fatalf("sweep report: %d %v", code, rep)
	}
	_, status := call(t, srv, "GET", "/v1/status", "", nil)
	if sweep, _ := status["sweep"].(map[string]any); !named(sweep["unparseable"]) {
		t.Fatalf("status: %v", status)
	}
}
