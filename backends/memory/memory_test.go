package memory_test

import (
	"testing"

	"github.com/stratalog/strata/indexedstorage/storagetest"
	"github.com/stratalog/strata/test/backendtest"
)

func TestConformance(t *testing.T) { storagetest.Run(t, backendtest.Memory().Harness()) }

func BenchmarkStorage(b *testing.B) { storagetest.Bench(b, backendtest.Memory().Harness(), 0) }
