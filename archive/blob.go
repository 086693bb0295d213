package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// BlobStore is the contract of a blob store under the blob layer. Paths are '/'-separated segments, each
// non-empty, at most MaxSegmentLen bytes, made of [A-Za-z0-9%._-] and not starting with '.'
// (ValidateBlobPath): a store may map them to files or object names as they are. Implementations must
// be safe for concurrent use. A store that can read part of a blob without the rest also implements
// RangeReader.
type BlobStore interface {
	// Put stores data at path, replacing what was there. A reader never sees part of a Put: it sees
	// the old blob, or none, or the whole new one.
	Put(ctx context.Context, path string, data []byte) error
	// Get returns the blob at path, or an error matching ErrBlobNotFound.
	Get(ctx context.Context, path string) ([]byte, error)
	// Delete removes the blob at path. Deleting a missing blob must return nil.
	Delete(ctx context.Context, path string) error
	// List returns every path that starts with prefix, in ascending byte order.
	List(ctx context.Context, prefix string) ([]string, error)
	// Close releases the store; later calls may fail.
	Close() error
}

// ErrBlobNotFound is returned by BlobStore.Get for a missing blob.
var ErrBlobNotFound = errors.New("blob not found")

// ErrInvalidBlobPath is returned for a path that breaks ValidateBlobPath.
var ErrInvalidBlobPath = errors.New("invalid blob path")

// MaxSegmentLen is the longest segment of a blob path, in bytes: the longest file name common file
// systems allow.
const MaxSegmentLen = 255

// ValidateBlobPath checks path is safe to use as it is in a file system or an object store: segments
// of [A-Za-z0-9%._-], none empty or longer than MaxSegmentLen, none starting with '.' (so never "." or
// ".."). A List prefix may end with '/' or be empty; a blob path may not.
func ValidateBlobPath(path string, isPrefix bool) error {
	if isPrefix {
		path = strings.TrimSuffix(path, "/")
		if path == "" {
			return nil
		}
	}
	if path == "" {
		return fmt.Errorf("%w: empty path", ErrInvalidBlobPath)
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "" || seg[0] == '.' {
			return fmt.Errorf("%w: %q has an empty segment or one starting with '.'", ErrInvalidBlobPath, path)
		}
		if len(seg) > MaxSegmentLen {
			return fmt.Errorf("%w: a segment of %q has %d bytes, at most %d fit a file name", ErrInvalidBlobPath, path, len(seg), MaxSegmentLen)
		}
		for i := 0; i < len(seg); i++ {
			if !segmentByte(seg[i]) && seg[i] != '%' && seg[i] != '.' {
				return fmt.Errorf("%w: %q contains %q", ErrInvalidBlobPath, path, seg[i])
			}
		}
	}
	return nil
}

func segmentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// EscapeSegment turns any string into one blob path segment: bytes outside [A-Za-z0-9_-] become %XX
// (upper-case hex), '.' and '%' included, so "/" cannot add a segment, ".." cannot climb, and the
// mapping is one to one.
func EscapeSegment(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if segmentByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// PathSegment turns any string into one blob path segment of at most MaxSegmentLen bytes, one to one.
// A string whose EscapeSegment form fits is that form, unchanged. A longer one is the longest prefix
// of its escaped form that leaves room for the hash and does not split a %XX escape, then '.', then the
// lower-case hex SHA-256 of the raw string. EscapeSegment never writes '.', so a long form cannot
// equal a short one, and the hash tells long forms apart. docs/storage-format.md has a worked example.
func PathSegment(s string) string {
	esc := EscapeSegment(s)
	if len(esc) <= MaxSegmentLen {
		return esc
	}
	cut := MaxSegmentLen - 1 - 2*sha256.Size
	// Hex digits are never '%', so the last '%' before the cut starts the escape the cut may split.
	if i := strings.LastIndexByte(esc[:cut], '%'); i > cut-3 {
		cut = i
	}
	sum := sha256.Sum256([]byte(s))
	return esc[:cut] + "." + hex.EncodeToString(sum[:])
}

// Blob is a blob archive level, a target only (it cannot enumerate its agents). Each chunk is one
// blob at "{mode}/{L}/{bucket, 4 hex digits}/{component segment}/{name segment}/{last index, 20
// digits}", the segments made by PathSegment, so a chunk's path is fixed by its content: writing it
// again rewrites identical bytes.
type Blob struct {
	store BlobStore
	level int
	name  string
}

// NewBlob returns blob level level (≥ 0) over store.
func NewBlob(store BlobStore, level int) (*Blob, error) {
	if level < 0 {
		return nil, fmt.Errorf("blob archive level must be at least 0, got %d", level)
	}
	return &Blob{store: store, level: level, name: fmt.Sprintf("blob-%d", level)}, nil
}

var _ oplog.Layer = (*Blob)(nil)

func (b *Blob) Name() string { return b.name }

// ScanNamespace answers false: the blob layer is a target only.
func (b *Blob) ScanNamespace(oplog.Mode) (string, bool) { return "", false }

// ScanAgents returns oplog.ErrNotEnumerable: the blob layer is a target only.
func (b *Blob) ScanAgents(context.Context, oplog.Mode, oplog.BucketRange, is.Resume, int) (is.Page, error) {
	return is.Page{}, fmt.Errorf("%s: %w", b.name, oplog.ErrNotEnumerable)
}

// Dir is the path prefix under which the layer keeps the agent's chunks.
func (b *Blob) Dir(agent oplog.AgentID, mode oplog.Mode) string {
	return fmt.Sprintf("%s/%d/%s%s/%s/", mode, b.level, is.BucketPrefix(agent.Bucket()), PathSegment(agent.Component), PathSegment(agent.Name))
}

// ChunkPath is the path of the agent's chunk ending at last.
func (b *Blob) ChunkPath(agent oplog.AgentID, mode oplog.Mode, last oplog.Index) string {
	return fmt.Sprintf("%s%020d", b.Dir(agent, mode), last)
}

// chunks lists the agent's chunks: their last indices, ascending, and their paths.
func (b *Blob) chunks(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) ([]oplog.Index, []string, error) {
	dir := b.Dir(agent, mode)
	paths, err := b.store.List(ctx, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: list %s: %w", b.name, agent, err)
	}
	lasts := make([]oplog.Index, len(paths))
	for i, p := range paths {
		n, err := strconv.ParseUint(strings.TrimPrefix(p, dir), 10, 64)
		if err != nil || n == 0 {
			return nil, nil, fmt.Errorf("%s: %w: %q is not a chunk of %s", b.name, ErrCorruptChunk, p, agent)
		}
		lasts[i] = oplog.Index(n)
	}
	// Twenty zero-padded digits sort like the numbers; sort anyway so a store's order cannot matter.
	sort.Sort(byIndex{lasts, paths})
	return lasts, paths, nil
}

type byIndex struct {
	lasts []oplog.Index
	paths []string
}

func (s byIndex) Len() int           { return len(s.lasts) }
func (s byIndex) Less(i, j int) bool { return s.lasts[i] < s.lasts[j] }
func (s byIndex) Swap(i, j int) {
	s.lasts[i], s.lasts[j] = s.lasts[j], s.lasts[i]
	s.paths[i], s.paths[j] = s.paths[j], s.paths[i]
}

func (b *Blob) Read(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, from, to oplog.Index, limit oplog.ReadLimit) ([]oplog.Entry, error) {
	lasts, paths, err := b.chunks(ctx, agent, mode)
	if err != nil {
		return nil, err
	}
	return readChunks(ctx, b.name, agent, from, to, limit, func(ctx context.Context, from oplog.Index) (oplog.Index, []byte, bool, error) {
		i := sort.Search(len(lasts), func(i int) bool { return lasts[i] >= from })
		if i == len(lasts) {
			return 0, nil, false, nil
		}
		data, err := b.store.Get(ctx, paths[i])
		if errors.Is(err, ErrBlobNotFound) {
			// Dropped since the listing by a concurrent step: it is below by now.
			return 0, nil, false, nil
		}
		if err != nil {
			return 0, nil, false, fmt.Errorf("%s: get %s: %w", b.name, paths[i], err)
		}
		return lasts[i], data, true, nil
	})
}

func (b *Blob) FirstIndex(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) (oplog.Index, bool, error) {
	_, paths, err := b.chunks(ctx, agent, mode)
	if err != nil || len(paths) == 0 {
		return 0, false, err
	}
	data, err := b.store.Get(ctx, paths[0])
	if err != nil {
		return 0, false, fmt.Errorf("%s: get %s: %w", b.name, paths[0], err)
	}
	first, _, err := ChunkSpan(data)
	if err != nil {
		return 0, false, fmt.Errorf("%s: agent %s, chunk %s: %w", b.name, agent, paths[0], err)
	}
	return first, true, nil
}

func (b *Blob) LastIndex(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) (oplog.Index, bool, error) {
	lasts, _, err := b.chunks(ctx, agent, mode)
	if err != nil || len(lasts) == 0 {
		return 0, false, err
	}
	return lasts[len(lasts)-1], true, nil
}

// Append puts each chunk in ascending order, so a failure part way leaves a contiguous run whose last
// chunk is the layer's last index.
func (b *Blob) Append(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, entries []oplog.Entry) error {
	chunks, err := encodeChunks(entries)
	if err != nil {
		return fmt.Errorf("%s: append to %s: %w", b.name, agent, err)
	}
	for _, ch := range chunks {
		if err := b.store.Put(ctx, b.ChunkPath(agent, mode, ch.last), ch.data); err != nil {
			return fmt.Errorf("%s: put chunk %d of %s: %w", b.name, ch.last, agent, err)
		}
	}
	return nil
}

// DropPrefix returns how many chunks it listed and deleted. A blob store's Delete of a missing blob
// succeeds, so a chunk a racing drop deleted first may be counted by both: the blob layer cannot tell
// who removed it, which is one reason it is the bottom of a stack (oplog.Layer.DropPrefix).
func (b *Blob) DropPrefix(ctx context.Context, agent oplog.AgentID, mode oplog.Mode, upTo oplog.Index) (uint64, error) {
	lasts, paths, err := b.chunks(ctx, agent, mode)
	if err != nil {
		return 0, err
	}
	var dropped uint64
	for i, last := range lasts {
		if last > upTo {
			break
		}
		if err := b.store.Delete(ctx, paths[i]); err != nil {
			return dropped, fmt.Errorf("%s: delete %s: %w", b.name, paths[i], err)
		}
		dropped++
	}
	return dropped, nil
}

func (b *Blob) Delete(ctx context.Context, agent oplog.AgentID, mode oplog.Mode) error {
	_, err := b.DropPrefix(ctx, agent, mode, oplog.Index(1<<63-1))
	return err
}
