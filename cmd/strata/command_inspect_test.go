package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stratalog/strata/oplog"
)

func TestBinary_InspectShowsWhereEntriesLive(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 2, 5000)
	if _, err := stack.Drain(t.Context(), agents[1], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, nil, "inspect", "--config", d.config, agents[0].Key())
	if code != 0 || !regexp.MustCompile(`compressed-1\s+1\s+5000\s+5000`).MatchString(out) || !regexp.MustCompile(`blob-0\s+-\s+-\s+0`).MatchString(out) {
		t.Fatalf("inspect %s: exit %d\n%s%s", agents[0], code, out, errOut)
	}
	_, out, _ = runBinary(t, nil, "inspect", agents[1].Key(), "--config", d.config)
	if !regexp.MustCompile(`blob-0\s+1\s+5000\s+5000`).MatchString(out) {
		t.Fatalf("inspect of a drained agent:\n%s", out)
	}
	if code, _, errOut := runBinary(t, nil, "inspect", "--config", d.config, "no-colon"); code != 2 || !strings.Contains(errOut, "no-colon") {
		t.Fatalf("inspect of a bad key: %d %s", code, errOut)
	}
}

func TestBinary_InspectJSON(t *testing.T) {
	d := newDeployment(t, "", "")
	stack := d.stack(t)
	agents := strandAgents(t, stack, 2, 30)
	if _, err := stack.Drain(t.Context(), agents[1], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, nil, "inspect", "--json", "--config", d.config, agents[1].Key())
	var got struct {
		Agent  string `json:"agent"`
		Mode   string `json:"mode"`
		Layers []struct {
			Layer   string `json:"layer"`
			First   *int   `json:"first"`
			Last    *int   `json:"last"`
			Entries int    `json:"entries"`
		} `json:"layers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Agent != agents[1].Key() || got.Mode != "ephemeral" {
		t.Fatalf("inspect --json: exit %d\n%s%s", code, out, errOut)
	}
	last := got.Layers[len(got.Layers)-1]
	if last.Layer != "blob-0" || last.First == nil || *last.First != 1 || *last.Last != 30 || last.Entries != 30 || got.Layers[0].First != nil {
		t.Fatalf("inspect --json: %s", out)
	}
}
