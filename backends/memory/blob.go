package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/btree"

	"github.com/stratalog/strata/archive"
)

// BlobStore is an in-process archive.BlobStore.
type BlobStore struct {
	mu     sync.RWMutex
	blobs  map[string][]byte
	paths  *btree.BTreeG[string] // sorted, so List seeks to its prefix
	closed bool
}

// NewBlobStore returns an empty BlobStore.
func NewBlobStore() *BlobStore {
	return &BlobStore{blobs: map[string][]byte{}, paths: btree.NewG(32, func(a, b string) bool { return a < b })}
}

var (
	_ archive.BlobStore   = (*BlobStore)(nil)
	_ archive.RangeReader = (*BlobStore)(nil)
)

func (s *BlobStore) Put(_ context.Context, path string, data []byte) error {
	if err := archive.ValidateBlobPath(path, false); err != nil {
		return failBlob("put", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return failBlob("put", path, errBlobClosed)
	}
	s.blobs[path] = slices.Clone(data)
	s.paths.ReplaceOrInsert(path)
	return nil
}

func (s *BlobStore) Get(_ context.Context, path string) ([]byte, error) {
	if err := archive.ValidateBlobPath(path, false); err != nil {
		return nil, failBlob("get", path, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, failBlob("get", path, errBlobClosed)
	}
	data, ok := s.blobs[path]
	if !ok {
		return nil, failBlob("get", path, archive.ErrBlobNotFound)
	}
	return slices.Clone(data), nil
}

// GetRange copies the range out of the blob under the read lock, so a concurrent Put (which swaps
// the whole slice) is seen entirely or not at all.
func (s *BlobStore) GetRange(_ context.Context, path string, offset, length int64) ([]byte, error) {
	if err := archive.ValidateBlobPath(path, false); err != nil {
		return nil, failBlob("get_range", path, err)
	}
	if err := archive.ValidateBlobRange(offset, length); err != nil {
		return nil, failBlob("get_range", path, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, failBlob("get_range", path, errBlobClosed)
	}
	data, ok := s.blobs[path]
	if !ok {
		return nil, failBlob("get_range", path, archive.ErrBlobNotFound)
	}
	if err := archive.CheckBlobSize(offset, length, int64(len(data))); err != nil {
		return nil, failBlob("get_range", path, err)
	}
	return slices.Clone(data[offset : offset+length : offset+length]), nil
}

func (s *BlobStore) Delete(_ context.Context, path string) error {
	if err := archive.ValidateBlobPath(path, false); err != nil {
		return failBlob("delete", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return failBlob("delete", path, errBlobClosed)
	}
	delete(s.blobs, path)
	s.paths.Delete(path)
	return nil
}

func (s *BlobStore) List(_ context.Context, prefix string) ([]string, error) {
	if err := archive.ValidateBlobPath(prefix, true); err != nil {
		return nil, failBlob("list", prefix, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, failBlob("list", prefix, errBlobClosed)
	}
	var paths []string
	s.paths.AscendGreaterOrEqual(prefix, func(p string) bool {
		if !strings.HasPrefix(p, prefix) {
			return false
		}
		paths = append(paths, p)
		return true
	})
	return paths, nil
}

// Close drops every blob; later calls fail.
func (s *BlobStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.blobs, s.paths = true, nil, nil
	return nil
}

var errBlobClosed = errors.New("blob store is closed")

// failBlob is the one place a blob operation's error takes its shape, the storage backends' (is.OpError):
// `memory <op> (path "<path>"): <err>`, op being the blob metric's label (put, get, get_range, delete,
// list).
func failBlob(op, path string, err error) error {
	return fmt.Errorf("memory %s (path %q): %w", op, path, err)
}
