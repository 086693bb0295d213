package sweeps_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/cloudblob"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/internal/s3local"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/oplogtest"
)

// The blob layouts side by side on the workload of DESIGN §13: tiny ephemeral agents (5 entries of 64
// bytes), stranded in compressed level 1 of an embedded SQLite store and drained by the sweep with its
// default budgets into blob level 0.
const (
	tinyEntries      = 5
	tinyPayloadBytes = 64
	// tinyAgentsEnv and diskAgentsEnv size the two benchmarks below.
	tinyAgentsEnv = "STRATA_BENCH_TINY_AGENTS"
	diskAgentsEnv = "STRATA_BENCH_DISK_AGENTS"
	// readSample is how many archived agents each layout reads back, the same agents in both.
	readSample = 500
)

func strandTiny(b *testing.B, r *oplogtest.SweepRig, prefix string, n int) []oplog.AgentID {
	b.Helper()
	agents := make([]oplog.AgentID, n)
	payload := bytes.Repeat([]byte{'p'}, tinyPayloadBytes)
	entries := make([]oplog.Entry, tinyEntries)
	for i := range entries {
		entries[i] = oplog.Entry{Index: oplog.Index(i + 1), Payload: payload}
	}
	for i := range agents {
		agents[i] = oplogtest.AgentNamed(fmt.Sprintf("%s-%06d", prefix, i))
		if err := r.Stack.Append(b.Context(), agents[i], oplog.Ephemeral, entries); err != nil {
			b.Fatal(err)
		}
	}
	return agents
}

func tinyRig(b *testing.B, blobs archive.BlobStore, layout string) *oplogtest.SweepRig {
	b.Helper()
	st, err := sqlite.Open(b.Context(), "sqlite://"+filepath.Join(b.TempDir(), "strata.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return oplogtest.NewSweepRigOn(b, oplogtest.NewLayersIn(b, st, blobs, layout), oplogtest.SweepConfig())
}

// BenchmarkBlobLayoutsOnS3: per layout, STRATA_BENCH_TINY_AGENTS (default 10,000) tiny agents drained
// into an S3 bucket on the in-process S3 server, then readSample of them read back through the stack.
// Counted by the server (s3local.Server.Requests), not by strata: objects/agent (PUTs per archived
// agent), and per agent read back, LIST and GET requests, and the GETs per segment the read touched.
// Also the read time per agent of each layout, measured in the same run (read-ns/agent), and
// packed/chunks of it.
func BenchmarkBlobLayoutsOnS3(b *testing.B) {
	n := testenv.PositiveInt(b, tinyAgentsEnv, 10_000)
	testenv.S3LocalEnv()
	for b.Loop() {
		readNS := map[string]float64{}
		for _, layout := range []string{archive.LayoutChunks, archive.LayoutPacked} {
			srv, err := s3local.Start("127.0.0.1:0", true)
			if err != nil {
				b.Fatal(err)
			}
			blobs, err := cloudblob.Open(b.Context(), srv.BucketURL("layouts", ""))
			if err != nil {
				b.Fatal(err)
			}
			r := tinyRig(b, blobs, layout)
			agents := strandTiny(b, r, "tiny", n)
			before := srv.Requests()
			sweepUntilDrained(b, r, int64(n))
			puts := srv.Requests()["PUT"] - before["PUT"]
			if left := r.StrandedCount(b, agents); left != 0 {
				b.Fatalf("%s: %d agents left", layout, left)
			}

			sample := rand.New(rand.NewPCG(1, 2)).Perm(n)[:min(n, readSample)]
			segments := map[string]bool{}
			touched := 0
			for _, i := range sample {
				chunks, err := r.BlobChunks(b.Context(), agents[i], oplog.Ephemeral)
				if err != nil {
					b.Fatal(err)
				}
				clear(segments)
				for _, c := range chunks {
					segments[c.Where] = true
				}
				touched += len(segments)
			}
			before = srv.Requests()
			start := time.Now()
			for _, i := range sample {
				got, err := r.Stack.Read(b.Context(), agents[i], oplog.Ephemeral, 1, 100)
				if err != nil || len(got) != tinyEntries {
					b.Fatalf("%s: read %s: %d entries, %v", layout, agents[i], len(got), err)
				}
			}
			elapsed := time.Since(start)
			after := srv.Requests()
			gets, lists := after["GET"]-before["GET"], after["LIST"]-before["LIST"]
			readNS[layout] = float64(elapsed.Nanoseconds()) / float64(len(sample))

			b.ReportMetric(float64(puts)/float64(n), layout+"-objects/agent")
			b.ReportMetric(float64(lists)/float64(len(sample)), layout+"-lists/read")
			b.ReportMetric(float64(gets)/float64(len(sample)), layout+"-gets/read")
			if layout == archive.LayoutPacked {
				b.ReportMetric(float64(gets)/float64(touched), "packed-gets/segment-touched")
			}
			b.ReportMetric(readNS[layout], layout+"-read-ns/agent")
			blobs.Close()
			srv.Close()
		}
		b.ReportMetric(readNS[archive.LayoutPacked]/readNS[archive.LayoutChunks], "packed/chunks-read-time")
	}
}

// BenchmarkBlobLayoutsDisk: per layout, STRATA_BENCH_DISK_AGENTS (default 100,000) tiny agents drained
// into a directory (fsblob), then the disk the blob directory takes, as du counts it (allocated
// blocks of every file and directory under it), per archived agent; and the SQLite database's (WAL
// checkpointed), which in the packed layout holds the index rows too: the difference between the
// layouts' is what the index costs (SQLite keeps the pages the stranded chunks took, so both hold
// that high-water mark).
func BenchmarkBlobLayoutsDisk(b *testing.B) {
	n := testenv.PositiveInt(b, diskAgentsEnv, 100_000)
	for b.Loop() {
		for _, layout := range []string{archive.LayoutChunks, archive.LayoutPacked} {
			dir := b.TempDir()
			blobs, err := fsblob.New(b.Context(), filepath.Join(dir, "blobs"), nil)
			if err != nil {
				b.Fatal(err)
			}
			dbPath := filepath.Join(dir, "strata.db")
			st, err := sqlite.Open(b.Context(), "sqlite://"+dbPath)
			if err != nil {
				b.Fatal(err)
			}
			r := oplogtest.NewSweepRigOn(b, oplogtest.NewLayersIn(b, st, blobs, layout), oplogtest.SweepConfig())
			agents := strandTiny(b, r, "disk", n)
			sweepUntilDrained(b, r, int64(n))
			if left := r.StrandedCount(b, agents); left != 0 {
				b.Fatalf("%s: %d agents left", layout, left)
			}
			b.ReportMetric(float64(duBytes(b, filepath.Join(dir, "blobs")))/float64(n), layout+"-blob-disk-bytes/agent")
			if err := st.Close(); err != nil { // checkpoints the WAL into the file
				b.Fatal(err)
			}
			b.ReportMetric(float64(duBytes(b, dbPath)+duBytes(b, dbPath+"-wal"))/float64(n), layout+"-db-disk-bytes/agent")
			blobs.Close()
		}
	}
}

// duBytes is what du counts for path: the blocks allocated to it and, for a directory, to everything
// under it (st_blocks × 512), 0 for a path that does not exist.
func duBytes(b *testing.B, path string) int64 {
	b.Helper()
	var total int64
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += allocatedBytes(info)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.Fatal(err)
	}
	return total
}
