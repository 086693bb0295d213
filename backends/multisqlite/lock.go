package multisqlite

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/backoff"
)

// The removal protocol (docs/multisqlite.md states it for foreign writers).
//
// Every operation on an index file holds flock(2) on the file's directory (its bucket directory, or
// "other") for the operation's duration: shared for reads and writes, exclusive for the removal of an
// emptied file. flock locks belong to an open file description, so they exclude one another across
// processes and between two opens in one process alike, and they are independent of the POSIX locks
// SQLite takes on the database file (the directory is never opened by SQLite, so closing it cannot
// drop one of SQLite's locks).
//
//   - Whoever takes the lock opens the directory, locks it, and checks that the directory's path still
//     names the directory it locked (fstat of its descriptor against stat of the path). A remover may
//     have removed an emptied directory meanwhile; then it closes it and starts again (creating the
//     directory first, for a write).
//   - Under the shared lock, a file is opened (or created) only then, and the identity (device and
//     inode) the path names is recorded with the connection. Every later operation on that connection
//     first checks, under its shared lock, that the path still names that identity; if not (the file
//     was removed, or removed and created again), the connection is closed and the file opened or
//     created afresh. A write creates the file and commits its first rows under one shared lock, so an
//     empty file is never seen under the exclusive lock except one emptied by a drop (or left by a
//     writer that died before its first commit).
//   - A drop that leaves the file without rows releases its shared lock, and removes the file in the
//     steps of a removal (below), each a method of that type, which refuses to run before the one
//     above it has: (1) take the exclusive lock; (2) check again, under it, that the file the path
//     names holds no row at all; (3) only then unlink the file and its -wal and -shm; (4) remove the
//     directory if that left it empty. Under the exclusive lock no one is in the middle of an
//     operation, and whoever comes next finds the path gone.
//   - Every connection this package opens sets SQLITE_FCNTL_PERSIST_WAL (and journal_size_limit 0:
//     sqlitefile.Options.PersistWAL), so that closing a connection to a removed file never unlinks, by
//     path, the -wal and -shm of a file created since under the same name.
//
// Within the process, a read-write mutex per directory (shared by the operations, exclusive for the
// remover) comes first: Go's RWMutex lets a waiting remover in before later operations, which flock
// does not, so that the remover cannot be starved by this process's own traffic on the directory.

// removalPatience bounds how long a remover waits for the exclusive lock while other processes hold
// the shared one. A file it cannot remove in that time is left (it is in use) and removed by a later
// drop, or by the first operation that finds it empty.
const removalPatience = 200 * time.Millisecond

// errBusy is a lock that could not be taken within the patience given.
var errBusy = errors.New("directory lock busy")

// dirLocks are the in-process read-write mutexes, one shard per directory hash.
type dirLocks [256]sync.RWMutex

func (d *dirLocks) of(path string) *sync.RWMutex {
	h := fnv.New32a()
	h.Write([]byte(path))
	return &d[h.Sum32()%uint32(len(d))]
}

// dirLock is a held lock on one directory of a namespace.
type dirLock struct {
	f         *os.File // nil when the protocol is taken out (a test's unsafeNoLock)
	mu        *sync.RWMutex
	exclusive bool
}

func (l *dirLock) unlock() {
	if l.f != nil {
		l.f.Close() // releases the flock
	}
	if l.mu == nil {
		return
	}
	if l.exclusive {
		l.mu.Unlock()
	} else {
		l.mu.RUnlock()
	}
}

// lockDir takes the lock on directory dir of namespace ns: shared, or exclusive for a remover, waiting
// at most patience for another process's holders. A missing directory is created when create is set;
// otherwise lockDir returns nil, nil. The path is checked to name the locked directory before
// lockDir returns.
func (s *Store) lockDir(ctx context.Context, ns, dir string, exclusive, create bool, patience time.Duration) (*dirLock, error) {
	nsDir := s.NamespaceDir(ns)
	path := filepath.Join(nsDir, dir)
	l := &dirLock{exclusive: exclusive}
	if !s.unsafeNoLock {
		l.mu = s.dirLocks.of(path)
		if exclusive {
			l.mu.Lock()
		} else {
			l.mu.RLock()
		}
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for attempt := 0; ; attempt++ {
		if attempt == 1000 {
			l.unlock()
			return nil, is.Classify(is.ErrTransient, fmt.Errorf("directory %s/%s keeps being removed under its lock", filepath.Base(nsDir), dir))
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			if !create {
				l.unlock()
				return nil, nil
			}
			if err := s.mkdir(ns, nsDir, path); err != nil {
				l.unlock()
				return nil, err
			}
			continue
		}
		if err != nil {
			l.unlock()
			return nil, err
		}
		if s.hooks.locking != nil {
			s.hooks.locking(ns, dir, exclusive)
		}
		if s.unsafeNoLock {
			f.Close()
			return l, nil
		}
		if err := flockWait(ctx, f, how, patience); err != nil {
			f.Close()
			l.unlock()
			if errors.Is(err, errBusy) && !exclusive {
				return nil, is.Classify(is.ErrTransient, fmt.Errorf("lock %s/%s: %w", filepath.Base(nsDir), dir, err))
			}
			return nil, err
		}
		same, err := names(f, path)
		if err != nil {
			f.Close()
			l.unlock()
			return nil, err
		}
		if !same {
			f.Close() // a remover took this directory away while we waited: start again
			continue
		}
		l.f = f
		return l, nil
	}
}

// mkdir makes the directory at path (and the namespace directory above it); one that appeared
// meanwhile is no error. The namespace's listing is dropped, since it names directories.
func (s *Store) mkdir(ns, nsDir, path string) error {
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	s.listings.drop(ns)
	return nil
}

// names reports whether path still names the file open as f.
func names(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(held, now), nil
}

// flockWait takes flock how on f, retrying a lock held elsewhere with a growing pause until patience
// has passed (errBusy) or ctx is done. flock has no timeout of its own and a blocking call cannot be
// interrupted by ctx, so it polls.
func flockWait(ctx context.Context, f *os.File, how int, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	pauses := backoff.Policy{Initial: 50 * time.Microsecond, Max: 5 * time.Millisecond, Multiplier: 2}
	for attempt := 1; ; {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return fmt.Errorf("flock %s: %w", filepath.Base(f.Name()), err)
		}
		if !time.Now().Before(deadline) {
			return errBusy
		}
		if err := backoff.Wait(ctx, min(pauses.Delay(attempt), time.Until(deadline))); err != nil {
			return err
		}
		attempt++ // not on EINTR, which retries at once
	}
}

// removalStep is a step of a removal, in the protocol's order (the doc at the top of this file).
type removalStep int

const (
	removalStarted    removalStep = iota
	removalLocked                 // (1) the exclusive lock of the file's directory is held
	removalFoundEmpty             // (2) under it, the file the path names holds no row
	removalUnlinked               // (3) the file, its -wal and its -shm are unlinked
	removalDirRemoved             // (4) the directory, if the file was its last, is removed
)

func (st removalStep) String() string {
	return [...]string{"start", "lock exclusively", "find the file empty", "unlink the file", "remove its directory"}[st]
}

// A removal removes the file of one index that a drop or a delete emptied, or a read found empty, by
// the protocol's steps: its methods below, in the order they run. Each step refuses to run unless the
// step before it has (errStepOutOfOrder), so that the ordering the protocol's safety rests on is held
// by the code, not by the order of lines in a caller. release ends every removal, however far it got.
type removal struct {
	s       *Store
	ns, key string
	path    string
	loc     location
	done    removalStep // the last step that ran
	lock    *dirLock    // held from lockExclusively to release
	conn    *conn       // the connection findEmpty checked through, until unlink or release give it back
	// upTo, for a removal that drops (dropRemoving), is the drop's bound: findEmpty then also takes a
	// file whose rows are all the index's up to upTo, which the unlink drops with the file, and else
	// drops them as a drop does. dropped is how many rows the removal dropped either way, and deleted
	// whether it deleted them (the drop took place although the file stays).
	upTo    uint64
	dropped uint64
	deleted bool
}

// errStepOutOfOrder is a removal step called before the step it follows: a bug, never a file's state.
var errStepOutOfOrder = errors.New("removal step out of the protocol's order")

func (s *Store) newRemoval(ns, key string) *removal {
	loc := locate(ns, key)
	return &removal{s: s, ns: ns, key: key, loc: loc, path: s.path(ns, loc)}
}

// remove removes the file of (ns, key) if it holds no row, by a removal (see the doc at the top of
// this file). A lock that other processes hold for longer than patience leaves the file (it is in
// use), which a later drop or the first operation to find it empty removes; that is no error, nor is a
// file found gone or holding rows again.
func (s *Store) remove(ctx context.Context, ns, key string, patience time.Duration) error {
	ctx = context.WithoutCancel(ctx)
	r := s.newRemoval(ns, key)
	defer r.release()
	if held, err := r.lockExclusively(ctx, patience); !held || err != nil {
		return err
	}
	if empty, err := r.findEmpty(ctx); !empty || err != nil {
		return err
	}
	if err := r.unlink(); err != nil {
		return err
	}
	return r.removeDirIfEmpty()
}

// begin refuses to run step unless the step before it is the last that ran.
func (r *removal) begin(step removalStep) error {
	if r.done != step-1 {
		return fmt.Errorf("%w: %q after %q", errStepOutOfOrder, step.String(), r.done.String())
	}
	return nil
}

// finish records that step ran.
func (r *removal) finish(step removalStep) {
	r.done = step
	if r.s.hooks.removalStep != nil {
		r.s.hooks.removalStep(step)
	}
}

// lockExclusively is step (1): the exclusive lock of the file's directory, waiting at most patience
// for other processes' holders. held is false, with no error, when the lock stays busy that long or
// the directory is gone (and the file with it).
func (r *removal) lockExclusively(ctx context.Context, patience time.Duration) (held bool, err error) {
	if err := r.begin(removalLocked); err != nil {
		return false, err
	}
	if r.s.hooks.removing != nil {
		r.s.hooks.removing(r.ns, r.key)
	}
	lk, err := r.s.lockDir(ctx, r.ns, r.loc.dir, true, false, patience)
	switch {
	case errors.Is(err, errBusy):
		return false, nil
	case err != nil || lk == nil:
		return false, err
	}
	r.lock = lk
	r.finish(removalLocked)
	return true, nil
}

// findEmpty is step (2), under the exclusive lock: whether the file the path names now holds no row
// at all. An append may have come between the drop's commit and the lock; a file found gone is not
// empty, there being nothing left to remove.
//
// A removal that drops (upTo > 0) takes the file as empty when every row it holds is the index's, up to
// upTo: those are the rows the drop removes, and the unlink removes them with the file. Otherwise (an
// append came between the drop's look and this lock, or a row of another index is there) it drops them
// here, under this lock, as a drop does, and the file goes only if that left it without rows.
func (r *removal) findEmpty(ctx context.Context) (empty bool, err error) {
	if err := r.begin(removalFoundEmpty); err != nil {
		return false, err
	}
	c, err := r.s.current(ctx, r.path, false)
	if err != nil || c == nil {
		return false, err
	}
	r.conn = c
	if r.upTo > 0 {
		only, err := c.eng.OnlyPrefix(ctx, r.ns, r.key, r.upTo)
		if err == nil && only {
			// Every row goes with the file: they are the count the drop reports.
			r.dropped, err = c.eng.Length(ctx, r.ns, r.key)
		}
		switch {
		case err != nil:
			return false, c.eng.Classify(err)
		case only:
			r.finish(removalFoundEmpty)
			return true, nil
		}
		if r.dropped, err = c.eng.DropPrefix(ctx, r.ns, r.key, r.upTo); err != nil {
			return false, c.eng.Classify(err)
		}
		r.deleted = true
	}
	if empty, err = c.eng.Empty(ctx); err != nil || !empty {
		return false, c.eng.Classify(err)
	}
	r.finish(removalFoundEmpty)
	return true, nil
}

// unlink is step (3), once the file was found empty under the lock: it unlinks the file, then its -wal
// and -shm, and takes its connection off the pool.
func (r *removal) unlink() error {
	if err := r.begin(removalUnlinked); err != nil {
		return err
	}
	if r.s.hooks.unlinking != nil {
		r.s.hooks.unlinking(r.ns, r.key)
	}
	if err := os.Remove(r.path); err != nil {
		return err
	}
	for _, side := range []string{"-wal", "-shm"} {
		if err := os.Remove(r.path + side); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// The file is gone, and with it the index; a stray side file is no index and no walk
			// lists it. It is removed with the next file of that name.
			break
		}
	}
	r.s.pool.discard(r.conn)
	r.s.pool.release(r.conn) // its last release closes it
	r.s.pool.forgetChecked(r.path)
	r.conn = nil
	r.s.removed.Add(1)
	r.finish(removalUnlinked)
	return nil
}

// removeDirIfEmpty is step (4): the file's directory goes too if the file was its last (only an
// empty directory can be removed; one that still holds files stays).
func (r *removal) removeDirIfEmpty() error {
	if err := r.begin(removalDirRemoved); err != nil {
		return err
	}
	if err := os.Remove(filepath.Dir(r.path)); err == nil {
		r.s.listings.drop(r.ns)
	}
	r.finish(removalDirRemoved)
	return nil
}

// release gives back the connection and the lock the removal holds, whichever step it reached.
func (r *removal) release() {
	if r.conn != nil {
		r.s.pool.release(r.conn)
		r.conn = nil
	}
	if r.lock != nil {
		r.lock.unlock()
		r.lock = nil
	}
}
