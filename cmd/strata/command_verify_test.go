package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/oplog"
)

func TestBinary_VerifyReportsALostSegmentByAgentAndExitsOne(t *testing.T) {
	d, blobs, stack, drained, oldOrphan, youngOrphan := gcDeployment(t)
	// The old orphan is a finding; remove it and the young one (which never is) to start clean.
	for _, p := range []string{oldOrphan, youngOrphan} {
		if err := blobs.Delete(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := runBinary(t, nil, "verify", "--config", d.config); code != 0 || !strings.Contains(out, "missing") {
		t.Fatalf("verify of a sound store: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := stack.Read(t.Context(), drained, oplog.Ephemeral, 1, 10); err != nil {
		t.Fatal(err)
	}
	for _, p := range segmentsOf(t, blobs) {
		if err := blobs.Delete(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runBinary(t, nil, "verify", "--config", d.config)
	if code != 1 || !strings.Contains(out, "missing\t"+drained.Key()) || !strings.Contains(errOut, "findings") {
		t.Fatalf("verify after the segment was lost: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runBinary(t, nil, "verify", "--json", "--sample", "1", "--config", d.config)
	var missing int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r archive.VerifyReport
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("verify --json line %q: %v", line, err)
		}
		missing += r.Count(archive.FindingMissing)
	}
	if code != 1 || missing == 0 {
		t.Fatalf("verify --json: exit %d, %d missing\n%s", code, missing, out)
	}
	for _, bad := range []string{"0", "1.5", "x"} {
		if code, _, errOut := runBinary(t, nil, "verify", "--sample", bad, "--config", d.config); code != 2 || !strings.Contains(errOut, "--sample") {
			t.Fatalf("verify --sample %s: exit %d %s", bad, code, errOut)
		}
	}
}
