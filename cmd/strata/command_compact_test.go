package main

import (
	"bytes"
	"encoding/json"
	"os"
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

// compactDeployment archives two agents of 30 entries in one segment two hours ago (older than any
// grace) and erases the first: the segment holds an erased chunk beside a live one.
func compactDeployment(t *testing.T) (deployment, *fsblob.Store, *oplog.Stack, []oplog.AgentID, string) {
	t.Helper()
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
	drained, err := stack.DrainMany(ctx, oplog.Ephemeral, agents)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range drained {
		if res.Err != nil || res.Moved == 0 {
			t.Fatalf("drain %s: moved %d (%v)", agents[i], res.Moved, res.Err)
		}
	}
	before := segmentsOf(t, blobs)
	if len(before) != 1 {
		t.Fatalf("%d segments, want the batch's one", len(before))
	}
	if _, err := stack.Erase(ctx, agents[0], oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	return d, blobs, stack, agents, before[0]
}

// Two agents archived in one segment two hours ago, one of them erased: strata compact rewrites the
// segment without the erased chunk, and the other agent reads back whole through the move.
func TestBinary_CompactRewritesASegmentHoldingAnErasedChunk(t *testing.T) {
	ctx := t.Context()
	d, blobs, stack, agents, segment := compactDeployment(t)
	before := []string{segment}
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

// A segment compact cannot rewrite (a live chunk beside the erased one fails its CRC) is left as it
// was, with the erased bytes in it: the run did not do its work, so it exits 1 and names the segment,
// dry run or not; the segment is untouched.
func TestCompact_ExitsOneWhenASegmentHoldingErasedBytesIsLeftAsItWas(t *testing.T) {
	d, blobs, _, agents, segment := compactDeployment(t)
	file := filepath.Join(d.dir, "blobs", filepath.FromSlash(segment))
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := archive.DecodeSegment(data)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(chunks, func(c archive.PackedChunk) bool { return c.Key == agents[1].StoredKey() })
	if i < 0 {
		t.Fatalf("no chunk of %s in the segment", agents[1])
	}
	data[chunks[i].Offset+chunks[i].Length/2] ^= 0x20 // the live agent's chunk, not the erased one's
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--dry-run"}, nil} {
		code, out, errOut := runIn(append([]string{"compact", "--config", d.config}, args...)...)
		if code != 1 || !strings.Contains(out, "kept as it is: "+segment) ||
			!strings.Contains(errOut, "segments left as they were: 1 ") {
			t.Fatalf("compact %q: exit %d, want 1 naming the segment\n%s%s", args, code, out, errOut)
		}
		after, err := os.ReadFile(file)
		if err != nil || !bytes.Equal(after, data) || !slices.Equal(segmentsOf(t, blobs), []string{segment}) {
			t.Fatalf("compact %q changed the segments: %q (%v)", args, segmentsOf(t, blobs), err)
		}
	}
}
