package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/oplog"
)

// gcDeployment is a deployment whose blob level 0 holds one drained agent's segment (young, referenced)
// and two orphan segments, one made two hours ago and one a minute ago.
func gcDeployment(t *testing.T) (d deployment, blobs archive.BlobStore, stack *oplog.Stack, drained oplog.AgentID, oldOrphan, youngOrphan string) {
	t.Helper()
	ctx := t.Context()
	d = newDeployment(t, "", "")
	st, err := sqlite.New(ctx, filepath.Join(d.dir, "strata.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if blobs, err = fsblob.New(ctx, filepath.Join(d.dir, "blobs"), nil); err != nil {
		t.Fatal(err)
	}
	if stack, err = archive.DefaultStack(st, blobs, nil); err != nil {
		t.Fatal(err)
	}
	drained = strandAgents(t, stack, 1, 20)[0]
	if _, err := stack.Drain(ctx, drained, oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	chunk, err := archive.EncodeChunk([]oplog.Entry{{Index: 1, Payload: []byte("lost")}})
	if err != nil {
		t.Fatal(err)
	}
	segment, _, err := archive.EncodeSegment([]archive.SegmentChunk{{Key: "nobody", Chunk: chunk}})
	if err != nil {
		t.Fatal(err)
	}
	oldOrphan = archive.SegmentPath(oplog.Ephemeral, 0, time.Now().Add(-2*time.Hour), 1)
	youngOrphan = archive.SegmentPath(oplog.Ephemeral, 0, time.Now().Add(-time.Minute), 2)
	for _, p := range []string{oldOrphan, youngOrphan} {
		if err := blobs.Put(ctx, p, segment); err != nil {
			t.Fatal(err)
		}
	}
	return d, blobs, stack, drained, oldOrphan, youngOrphan
}

func segmentsOf(t *testing.T, blobs archive.BlobStore) []string {
	t.Helper()
	got, err := blobs.List(t.Context(), "ephemeral/0/segments/")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestGC_RemovesOrphansPastTheGraceAndKeepsTheRest(t *testing.T) {
	d, blobs, stack, drained, oldOrphan, youngOrphan := gcDeployment(t)
	before := segmentsOf(t, blobs)
	if len(before) != 3 {
		t.Fatalf("segments %q, want the drained agent's and two orphans", before)
	}

	code, out, errOut := runIn("gc", "--config", d.config, "--dry-run")
	if code != 0 || !strings.Contains(out, "would remove: "+oldOrphan) || strings.Contains(out, youngOrphan) {
		t.Fatalf("gc --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if after := segmentsOf(t, blobs); !slices.Equal(after, before) {
		t.Fatalf("gc --dry-run removed something: %q, was %q", after, before)
	}

	code, out, errOut = runIn("gc", "--config", d.config, "--json")
	if code != 0 {
		t.Fatalf("gc --json: exit %d\n%s%s", code, out, errOut)
	}
	var ephemeral archive.CollectReport
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, line := range lines {
		var r archive.CollectReport
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("gc --json line %q: %v", line, err)
		}
		if r.Mode == oplog.Ephemeral {
			ephemeral = r
		}
	}
	if len(lines) != len(oplog.Modes) || ephemeral.Examined != 3 || ephemeral.Young != 2 || ephemeral.Removed != 1 ||
		!slices.Equal(ephemeral.RemovedPaths, []string{oldOrphan}) {
		t.Fatalf("gc --json:\n%s", out)
	}
	if after := segmentsOf(t, blobs); len(after) != 2 || slices.Contains(after, oldOrphan) {
		t.Fatalf("segments after gc %q, want all but %s", after, oldOrphan)
	}

	// A shorter grace takes the young orphan too, and never the segment the drained agent's rows
	// point into.
	code, out, errOut = runIn("gc", "--config", d.config, "--grace", "45s")
	if code != 0 || !strings.Contains(out, "removed: "+youngOrphan) {
		t.Fatalf("gc --grace 45s: exit %d\n%s%s", code, out, errOut)
	}
	if after := segmentsOf(t, blobs); len(after) != 1 {
		t.Fatalf("segments after gc --grace 45s: %q, want the drained agent's", after)
	}
	got, err := stack.Read(t.Context(), drained, oplog.Ephemeral, 1, 100)
	if err != nil || len(got) != 20 {
		t.Fatalf("the drained agent reads %d entries, %v; want 20", len(got), err)
	}
}

// --grace is blob.gc_grace: refused at 0, and unless longer than sweep.max_agent_duration; nothing is
// removed then.
func TestGC_RefusesAGraceTheConfigurationWouldRefuse(t *testing.T) {
	d, blobs, _, _, _, _ := gcDeployment(t)
	before := segmentsOf(t, blobs)
	for grace, want := range map[string]string{
		"0":    `--grace: "0s" is not allowed`,
		"abc":  "--grace",
		"10s":  "must be longer than sweep.max_agent_duration",
		"-1h":  `--grace: "-1h" is not allowed`,
		"999h": `--grace: "999h" is not allowed`,
	} {
		code, out, errOut := runIn("gc", "--config", d.config, "--grace", grace)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("gc --grace %s: exit %d, stderr %q; want a failure saying %q\n%s", grace, code, errOut, want, out)
		}
	}
	if after := segmentsOf(t, blobs); !slices.Equal(after, before) {
		t.Fatalf("a refused gc removed segments: %q, was %q", after, before)
	}
}

// gc creates nothing: on a store that does not exist it fails, exit 1.
func TestGC_FailsOnAStoreThatDoesNotExist(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runIn("gc", "--storage-url", "sqlite://"+dir+"/none.db", "--blob-url", "fs://"+dir+"/blobs")
	if code != 1 || !strings.Contains(errOut, "gc creates nothing") {
		t.Fatalf("gc on a missing store: exit %d, %s", code, errOut)
	}
}
