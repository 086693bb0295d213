package multisqlite_test

import (
	"testing"

	"github.com/stratalog/strata/backends/multisqlite"
	"github.com/stratalog/strata/indexedstorage/storagetest"
	"github.com/stratalog/strata/test/backendtest"
)

// harness is backendtest's multi-file SQLite, with a pool holding more files than the model check's
// namespace ever has (keys of 1-3 bytes from a 5-letter alphabet: at most 155), so the check measures
// the contract rather than reopening files; eviction has tests of its own. The raw walk and poison
// reach the files through the package's insides, so this test sets them.
func harness() storagetest.Harness {
	b := backendtest.MultiSQLiteWith(multisqlite.Options{MaxOpenFiles: 256})
	b.RawWalk = multisqlite.RawWalk
	b.Poison = multisqlite.Poison
	return b.Harness()
}

func TestConformance(t *testing.T) { storagetest.Run(t, harness()) }

// benchFiles is how many files the Scan benchmark walks. Bench's default of 100,000 files would take
// several minutes to create here (about 2 ms a file with 8 writers, mostly fsyncs of new WAL files);
// 10,000 stays far beyond the LRU, so nearly every file a walk visits is opened.
const benchFiles = 10_000

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, harness(), benchFiles) }

// TestConformance_TinyPool runs the suite again with two files open at most, as go-cloud runs its
// memory driver's twice: every check then evicts and reopens files under it, concurrent ones too.
func TestConformance_TinyPool(t *testing.T) {
	b := backendtest.MultiSQLiteWith(multisqlite.Options{MaxOpenFiles: 2})
	b.Poison = multisqlite.Poison
	storagetest.Run(t, b.Harness())
}

// TestConformance_Shared runs the suite with every namespace kept in one shared file, the layout of
// the blob layer's index (Shared): every operation goes to that file's store instead of a file a key.
func TestConformance_Shared(t *testing.T) {
	b := backendtest.MultiSQLiteSetUp(multisqlite.Options{}, multisqlite.ShareEveryNamespace)
	b.Poison = multisqlite.SharedPoison
	storagetest.Run(t, b.Harness())
}
