package memory_test

import (
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/archive/blobtest"
	"github.com/stratalog/strata/backends/memory"
)

func TestBlobStoreConformance(t *testing.T) {
	blobtest.Run(t, func(testing.TB) archive.BlobStore { return memory.NewBlobStore() })
}
