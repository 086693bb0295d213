package multisqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/stratalog/strata/backends/internal/sqlitefile"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
)

// SharedFileName is the file, in its namespace directory, that holds every index of a shared
// namespace (Shared).
const SharedFileName = "shared.db"

// Shared reports whether the namespace ns keeps all its indexes in one file, <ns dir>/shared.db, with
// the sqlite backend's table and schema, instead of a file an index. Those are the namespaces of a
// blob layer's index ("<mode>/blobindex/<level>", oplog.BlobIndexNamespace): an index there is one
// row an archived agent, written a batch of agents at a time and never drained by the sweep, so a
// file each would cost a SQLite file (a few KB on disk, a create and its fsyncs) for every agent ever
// archived, where the other layers' files come and go with their agents. The rule depends on the
// name alone, so every process and a foreign writer agree on where an index is (docs/multisqlite.md).
func Shared(ns string) bool {
	mode, rest, ok := strings.Cut(ns, "/blobindex/")
	if !ok || mode == "" || strings.Contains(mode, "/") || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return false
		}
	}
	return true
}

// sharedIndexes is what a shared namespace's store serves: a whole Storage with the batch forms.
type sharedIndexes interface {
	is.Storage
	is.ClosestLastReader
	is.BatchReader
	is.BatchDropper
	is.BatchAppender
}

// sharedFiles are the open stores of the shared namespaces' files. A shared file is never removed
// (its namespace's indexes come and go as its rows do), so once open its store stays open until
// Close; on a read-only store, until a read finds that a writer changed a file it read as immutable
// (sqlitefile's ReadOnly), when the next operation opens it afresh, as withFile does a file an index.
type sharedFiles struct {
	mu    sync.Mutex
	files map[string]*sharedFile
	// empty stands for a shared namespace whose file does not exist yet, for reads: they create
	// nothing, as a read of a missing index in its own file does not.
	empty *memory.Store
}

// sharedFile is one open shared file: its store, the operations using it, and whether it was taken
// off the map (then its last operation closes it).
type sharedFile struct {
	st        *sqlite.Store
	refs      int
	discarded bool
}

// isShared reports whether ns is kept in one file by this store (Shared, or every namespace for tests).
func (s *Store) isShared(ns string) bool { return s.shareAll || Shared(ns) }

// sharedPath is where the shared file of ns is.
func (s *Store) sharedPath(ns string) string {
	return filepath.Join(s.NamespaceDir(ns), SharedFileName)
}

// sharedStore returns the open shared file of ns, opening it (and with create, unless the store is
// read-only, creating it and its directory) the first time; the caller releases it. Without the
// file, a read gets nil and the empty store instead: the namespace holds nothing yet.
func (s *Store) sharedStore(ctx context.Context, ns string, create bool) (*sharedFile, sharedIndexes, error) {
	sh := &s.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.closed.Load() {
		return nil, nil, is.ErrClosed
	}
	if f := sh.files[ns]; f != nil {
		f.refs++
		return f, f.st, nil
	}
	path := s.sharedPath(ns)
	if !create || s.readOnly {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			if sh.empty == nil {
				sh.empty = memory.New()
			}
			return nil, sh.empty, nil
		} else if err != nil {
			return nil, nil, err
		}
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, err
	}
	st, err := sqlite.New(ctx, path, &sqlite.Options{BusyTimeout: s.busy, MustExist: !create, ReadOnly: s.readOnly})
	if err != nil {
		return nil, nil, sqlitefile.Classify(err, false)
	}
	if sh.files == nil {
		sh.files = make(map[string]*sharedFile)
	}
	f := &sharedFile{st: st, refs: 1}
	sh.files[ns] = f
	return f, st, nil
}

// releaseShared ends an operation's use of f (nil: the empty store), taking it off the map first
// when discard is set; a file off the map is closed by its last operation.
func (s *Store) releaseShared(ns string, f *sharedFile, discard bool) {
	if f == nil {
		return
	}
	sh := &s.shared
	sh.mu.Lock()
	f.refs--
	if discard && !f.discarded {
		f.discarded = true
		if sh.files[ns] == f {
			delete(sh.files, ns)
		}
	}
	closing := f.discarded && f.refs == 0
	sh.mu.Unlock()
	if closing {
		_ = f.st.Close() // a read-only store's: nothing to lose
	}
}

// closeShared closes the shared files' stores; the caller has marked the store closed. An operation
// still on one fails as on a closed store.
func (s *Store) closeShared() error {
	sh := &s.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var errs []error
	for ns, f := range sh.files {
		if err := f.st.Close(); err != nil {
			errs = append(errs, err)
		}
		f.discarded = true
		delete(sh.files, ns)
	}
	return errors.Join(errs...)
}

// access is what an operation on a shared namespace does to its file.
type access int

const (
	reads    access = iota // reads: a missing file is an empty namespace
	creates                // appends: creates the file
	modifies               // drops and deletes: a missing file has nothing to change
)

// onShared runs fn on the store of ns when ns is shared, and reports whether it did. The error, fn's
// or the file's, names this backend. A read-only store refuses every write, whether or not the file
// exists.
func (s *Store) onShared(ctx context.Context, op is.Operation, ns, key string, a access, fn func(st sharedIndexes) error) (bool, error) {
	if !s.isShared(ns) {
		return false, nil
	}
	if a != reads && s.readOnly {
		return true, fail(op, ns, key, fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument))
	}
	f, st, err := s.sharedStore(ctx, ns, a == creates)
	if err != nil {
		return true, fail(op, ns, key, fmt.Errorf("%s: %w", where(ns, SharedFileName), err))
	}
	err = fn(st)
	// A file read as immutable that a writer has touched since fails every read: open it afresh.
	s.releaseShared(ns, f, s.readOnly && is.IsTransient(err))
	return true, relabel(op, err)
}

// relabel names this backend and op (an Append is its store's AppendMany) in an error of the store of
// a shared file (an is.OpError of the sqlite or the memory backend), keeping the rest of it.
func relabel(op is.Operation, err error) error {
	if oe, ok := err.(*is.OpError); ok {
		return fail(op, oe.Namespace, oe.Key, oe.Err)
	}
	return err
}

// relabelEach relabels the per-key errors of a batch.
func relabelEach[T any](op is.Operation, out []T, errOf func(*T) *error) {
	for i := range out {
		if e := errOf(&out[i]); *e != nil {
			*e = relabel(op, *e)
		}
	}
}

// errStray is the Unreadable error of a file an index found in a shared namespace's directory.
var errStray = errors.New("a file an index in a namespace kept in one shared file (written by a build before shared files, or by a foreign writer), which this build does not read: see docs/multisqlite.md")

// strayFiles lists the files an index in the directory of the shared namespace ns, which hold rows
// no operation of this store reads: a walk from the start hands them back in its Unreadable, so that
// they are reported rather than silently unseen. A directory that cannot be listed lists nothing here
// (the walk itself read the shared file).
func (s *Store) strayFiles(ns string) []is.Unreadable {
	nsDir := s.NamespaceDir(ns)
	dirs, err := os.ReadDir(nsDir)
	if err != nil {
		return nil
	}
	var out []is.Unreadable
	for _, d := range dirs {
		if isLegacyName(d.Name()) {
			out = append(out, is.Unreadable{Where: where(ns, d.Name()), Err: errLegacy})
		}
		if !d.IsDir() || !isDirName(d.Name()) {
			continue
		}
		names, err := readFiles(nsDir, d.Name())
		if err != nil {
			continue
		}
		for _, name := range names {
			out = append(out, is.Unreadable{Where: where(ns, d.Name()+"/"+name), Err: errStray})
		}
	}
	return out
}
