package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stratalog/strata/internal/version"
)

func TestVersion_PrintsTheBuild(t *testing.T) {
	code, out, _ := runIn("version")
	if code != 0 || strings.TrimSpace(out) != version.Get().String() {
		t.Fatalf("version: exit %d %q, want %q", code, out, version.Get().String())
	}
	code, out, _ = runIn("version", "--json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("version --json: exit %d %q", code, out)
	}
	for _, key := range []string{"version", "commit", "modified", "go_version"} {
		if _, ok := v[key]; !ok {
			t.Errorf("version --json lacks %q: %s", key, out)
		}
	}
	if v["go_version"] != version.Get().GoVersion || v["version"] != version.Get().Version {
		t.Errorf("version --json: %s", out)
	}
}
