package archive

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// DefaultCompressedLevels is the number of compressed levels of the default stack: primary →
// compressed level 1 → blob level 0.
const DefaultCompressedLevels = 1

// StackOptions configures DefaultStack. The zero value, and nil, is the default: one compressed level,
// no metrics, no limit beyond the storage's own.
type StackOptions struct {
	// CompressedLevels is how many compressed levels lie between the primary and blob level 0 (0:
	// DefaultCompressedLevels; the sidecar's configuration allows 1 to 8).
	CompressedLevels int
	// MeterProvider records every storage and blob operation of the stack (strata_storage_operation_*
	// labelled storage = "indexed", strata_blob_operation_*); nil: nothing is recorded.
	MeterProvider metric.MeterProvider
	// BlobLayout is how blob level 0 stores chunks: LayoutPacked (the default, also for "") or
	// LayoutChunks.
	BlobLayout string
	// SegmentGrace is the packed layout's collector grace (PackedOptions.Grace; 0: DefaultSegmentGrace).
	SegmentGrace time.Duration
	// MaxConcurrentOps bounds the storage operations in flight at once (indexedstorage.Limit); < 1: no
	// limit beyond the storage's own.
	MaxConcurrentOps int
	// Now is the packed layout's clock (PackedOptions.Now; time.Now when nil): the time segment names
	// carry, which the collector's grace and retention read.
	Now func() time.Time
}

// DefaultStack builds the stack the sidecar sweeps: the primary and CompressedLevels compressed levels
// in st, then blob level 0 in blobs, over the stores as Stores wraps them.
func DefaultStack(st is.Storage, blobs BlobStore, opts *StackOptions) (*oplog.Stack, error) {
	if opts == nil {
		opts = &StackOptions{}
	}
	levels := opts.CompressedLevels
	switch {
	case levels == 0:
		levels = DefaultCompressedLevels
	case levels < 0:
		return nil, fmt.Errorf("default stack: %d compressed levels", levels)
	}
	st, blobs = opts.Stores(st, blobs)
	var archives []oplog.Layer
	for l := 1; l <= levels; l++ {
		c, err := NewCompressed(st, l)
		if err != nil {
			return nil, err
		}
		archives = append(archives, c)
	}
	b, err := NewBlobLayer(st, blobs, 0, opts.BlobLayout, &PackedOptions{Grace: opts.SegmentGrace, Now: opts.Now})
	if err != nil {
		return nil, err
	}
	stack, err := oplog.NewStack(oplog.NewPrimary(st), append(archives, b)...)
	if err != nil {
		return nil, err
	}
	return stack.WithTombstones(st), nil
}

// The blob layouts (DESIGN §13): chunks packed into segments with an index in indexed storage, or one
// blob per chunk in a directory per agent (the layout before segments, kept for stores that hold it).
const (
	LayoutPacked = "packed"
	LayoutChunks = "chunks"
)

// NewBlobLayer returns blob level level in layout (LayoutPacked for ""): a Packed over st and blobs, or
// a Blob over blobs.
func NewBlobLayer(st is.Storage, blobs BlobStore, level int, layout string, opts *PackedOptions) (oplog.Layer, error) {
	switch layout {
	case "", LayoutPacked:
		return NewPacked(st, blobs, level, opts)
	case LayoutChunks:
		return NewBlob(blobs, level)
	}
	return nil, fmt.Errorf("blob layout %q: want %q or %q", layout, LayoutPacked, LayoutChunks)
}

// Stores returns st and blobs as DefaultStack uses them: st limited to MaxConcurrentOps operations at
// once, then each operation of both recorded by MeterProvider. An embedder whose own calls (a readiness
// probe) must share the stack's slots and metrics makes them through these, and builds the stack over
// them with only CompressedLevels set, as the sidecar does.
func (o *StackOptions) Stores(st is.Storage, blobs BlobStore) (is.Storage, BlobStore) {
	if o == nil {
		return st, blobs
	}
	if o.MaxConcurrentOps > 0 {
		st = is.Limit(st, o.MaxConcurrentOps)
	}
	if o.MeterProvider != nil {
		st = is.Instrument(st, o.MeterProvider, "indexed")
		blobs = InstrumentBlobs(blobs, o.MeterProvider)
	}
	return st, blobs
}
