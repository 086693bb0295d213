package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stratalog/strata/oplog"
)

func TestBinary_EraseRemovesTheAgentFromEveryLayerAndNoOther(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 3, 40)
	if _, err := stack.Drain(t.Context(), agents[1], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, nil, "erase", "--config", d.config, agents[0].Key())
	if code != 0 || !regexp.MustCompile(`compressed-1\s+1\s+40\s+40`).MatchString(out) || !strings.Contains(out, "40 entries") {
		t.Fatalf("erase %s: exit %d\n%s%s", agents[0], code, out, errOut)
	}
	code, out, errOut = runBinary(t, nil, "erase", "--json", agents[1].Key(), "--config", d.config)
	var got struct {
		Agent   string `json:"agent"`
		Mode    string `json:"mode"`
		Entries int    `json:"entries"`
		Layers  []struct {
			Layer string `json:"layer"`
			Held  bool   `json:"held"`
			First int    `json:"first"`
			Last  int    `json:"last"`
		} `json:"layers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Agent != agents[1].Key() || got.Mode != "ephemeral" || got.Entries != 40 {
		t.Fatalf("erase --json: exit %d\n%s%s", code, out, errOut)
	}
	if bottom := got.Layers[len(got.Layers)-1]; len(got.Layers) != 2 || got.Layers[0].Held || bottom.Layer != "blob-0" || !bottom.Held || bottom.First != 1 || bottom.Last != 40 {
		t.Fatalf("erase --json of a drained agent: %s", out)
	}
	for _, a := range agents[:2] {
		for _, l := range stack.Layers() {
			if _, ok, err := l.LastIndex(t.Context(), a, oplog.Ephemeral); ok || err != nil {
				t.Fatalf("%s still in %s after erase (%v)", a, l.Name(), err)
			}
		}
	}
	if kept, err := stack.Read(t.Context(), agents[2], oplog.Ephemeral, 1, 100); err != nil || len(kept) != 40 {
		t.Fatalf("the agent not erased reads %d entries (%v), want 40", len(kept), err)
	}
	// Again: nothing left, no error.
	if code, out, errOut := runBinary(t, nil, "erase", "--config", d.config, agents[0].Key()); code != 0 || !strings.Contains(out, ": 0 entries") {
		t.Fatalf("a second erase: exit %d\n%s%s", code, out, errOut)
	}
}

func TestBinary_EraseRefusesBadInputAndCreatesNothing(t *testing.T) {
	if code, _, errOut := runBinary(t, nil, "erase", "no-colon"); code != 2 || !strings.Contains(errOut, "no-colon") {
		t.Fatalf("erase of a bad key: exit %d %s", code, errOut)
	}
	if code, _, errOut := runBinary(t, nil, "erase", "--mode", "x", "a:b"); code != 2 || !strings.Contains(errOut, `"x"`) {
		t.Fatalf("erase with a bad mode: exit %d %s", code, errOut)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "nothing.db")
	code, out, errOut := runBinary(t, nil, "erase", "--storage-url", "sqlite://"+db, "--blob-url", "fs://"+filepath.Join(dir, "blobs"), "a:b")
	if code != 1 || !strings.Contains(errOut, "nothing.db") {
		t.Fatalf("erase on a store that does not exist: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("erase created %s (%v)", db, err)
	}
}
