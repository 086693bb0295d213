package oplogtest

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/cloudblob"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/internal/s3local"
	"github.com/stratalog/strata/internal/testenv"
)

// BlobKind is a blob store a cross-backend test runs the blob level over, and the layout it uses.
type BlobKind struct {
	Name   string
	Layout string
	Open   func(tb testing.TB) archive.BlobStore // empty, the test's own, closed when it ends
}

// PackedBlobKinds are the packed layout over a file system and over the S3 protocol (an in-process S3
// server on loopback), the stores DESIGN §13's crash tests name.
var PackedBlobKinds = []BlobKind{
	{Name: "packed-fs", Layout: archive.LayoutPacked, Open: openFS},
	{Name: "packed-s3", Layout: archive.LayoutPacked, Open: openS3},
}

// ChunksInMemory is the chunk layout over memory: the layout before segments, still written by stores
// configured for it.
var ChunksInMemory = BlobKind{Name: "chunks-memory", Layout: archive.LayoutChunks,
	Open: func(testing.TB) archive.BlobStore { return memory.NewBlobStore() }}

// EachBlobKind runs fn in a subtest per kind.
func EachBlobKind(t *testing.T, kinds []BlobKind, fn func(t *testing.T, k BlobKind)) {
	for _, k := range kinds {
		t.Run(k.Name, func(t *testing.T) { fn(t, k) })
	}
}

func openFS(tb testing.TB) archive.BlobStore {
	tb.Helper()
	s, err := fsblob.New(tb.Context(), tb.TempDir(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

var s3Buckets atomic.Int64

// openS3 starts an S3 server in process on 127.0.0.1 for the test and opens a bucket of its own.
func openS3(tb testing.TB) archive.BlobStore {
	tb.Helper()
	testenv.S3LocalEnv()
	srv, err := s3local.Start("127.0.0.1:0", true)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	s, err := cloudblob.Open(tb.Context(), srv.BucketURL(fmt.Sprintf("oplogtest-%d", s3Buckets.Add(1)), ""))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
