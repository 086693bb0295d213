package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/oplog"
)

// Two agents archived in one segment two hours ago, one of them erased: strata compact rewrites the
// segment without the erased chunk, and the other agent reads back whole through the move.
func TestBinary_CompactRewritesASegmentHoldingAnErasedChunk(t *testing.T) {
	ctx := t.Context()
	d := newDeployment(t, "", "")
	st, err := sqlite.New(ctx, filepath.Join(d.dir, "strata.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := fsblob.New(ctx, filepath.Join(d.dir, "blobs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	compressed, err := archive.NewCompressed(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	then := time.Now().Add(-2 * time.Hour)
	packed, err := archive.NewPacked(st, blobs, 0, &archive.PackedOptions{Now: func() time.Time { return then }})
	if err != nil {
		t.Fatal(err)
	}
	stack, err := oplog.NewStack(oplog.NewPrimary(st), compressed, packed)
	if err != nil {
		t.Fatal(err)
	}
	stack = stack.WithTombstones(st)
	agents := strandAgents(t, stack, 2, 30)
	if _, err := stack.DrainMany(ctx, oplog.Ephemeral, agents); err != nil {
		t.Fatal(err)
	}
	before := segmentsOf(t, blobs)
	if len(before) != 1 {
		t.Fatalf("%d segments, want the batch's one", len(before))
	}
	if _, err := stack.Erase(ctx, agents[0], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runBinary(t, nil, "compact", "--dry-run", "--config", d.config)
	if code != 0 || !strings.Contains(out, "COMPACTED") || len(segmentsOf(t, blobs)) != 1 || segmentsOf(t, blobs)[0] != before[0] {
		t.Fatalf("compact --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runBinary(t, nil, "compact", "--json", "--config", d.config)
	var ephemeral archive.CompactReport
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r archive.CompactReport
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("compact --json line %q: %v", line, err)
		}
		if r.Mode == oplog.Ephemeral {
			ephemeral = r
		}
	}
	if code != 0 || ephemeral.Compacted != 1 || ephemeral.DeadChunks != 1 || len(ephemeral.Written) != 1 {
		t.Fatalf("compact --json: exit %d\n%s%s", code, out, errOut)
	}
	if after := segmentsOf(t, blobs); len(after) != 1 || after[0] != ephemeral.Written[0] {
		t.Fatalf("segments after compact %q, want only the new %s", after, ephemeral.Written[0])
	}
	got, err := stack.Read(ctx, agents[1], oplog.Ephemeral, 1, 100)
	if err != nil || len(got) != 30 {
		t.Fatalf("the agent kept reads %d entries (%v), want 30", len(got), err)
	}
}
