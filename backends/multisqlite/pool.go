package multisqlite

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/backoff"
)

// errMissing is what an opener that may not create reports to the callers that joined it.
var errMissing = errors.New("index file does not exist")

// pool holds the open files, at most max of them: past that, idle files are closed least recently used
// first. A file in use is counted by refs and never closed under its user; while more than max are in
// use at once, the excess is closed as each is released.
type pool struct {
	max      int
	fileOpts sqlite.Options // how each file is opened
	mu       sync.Mutex
	conns    map[string]*conn // by path, including files still being opened
	idle     list.List        // of *conn with refs == 0, most recently used at the front
	open     int              // files open (in conns and opened successfully)
	closed   bool
	openings atomic.Int64 // files opened since the pool was made
}

type conn struct {
	path  string
	st    *sqlite.Store // set once ready is closed and err is nil
	id    os.FileInfo   // what path named when st was opened (under the directory's shared lock)
	err   error
	ready chan struct{}
	refs  int
	elem  *list.Element // in pool.idle while refs == 0
	// discarded: taken off the pool because path no longer names id; closed by its last release.
	discarded bool
}

func newPool(max int, opts sqlite.Options) *pool {
	return &pool{max: max, fileOpts: opts, conns: make(map[string]*conn)}
}

// acquire returns the open file at path, opening it if needed, with a reference the caller must
// release. A missing file is created only if create is set; otherwise acquire returns nil, nil.
func (p *pool) acquire(ctx context.Context, path string, create bool) (*conn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, is.ErrClosed
		}
		c, opener := p.conns[path], false
		if c == nil {
			c, opener = &conn{path: path, ready: make(chan struct{})}, true
			p.conns[path] = c
		} else if c.elem != nil {
			p.idle.Remove(c.elem)
			c.elem = nil
		}
		c.refs++
		p.mu.Unlock()

		if opener {
			p.openFile(ctx, c, create)
		} else {
			select {
			case <-c.ready:
			case <-ctx.Done():
				p.release(c)
				return nil, ctx.Err()
			}
		}
		switch {
		case c.err == nil:
			return c, nil
		case errors.Is(c.err, errMissing):
			p.release(c)
			if !create {
				return nil, nil
			}
			// The file was missing when a reader looked; this caller may create it, so it opens anew.
		default:
			p.release(c)
			return nil, c.err
		}
	}
}

// openFile opens c's file on behalf of every caller that joins c meanwhile. It does not stop for the
// opener's ctx (the others are waiting on the same open), only for the busy timeout.
func (p *pool) openFile(ctx context.Context, c *conn, create bool) {
	ctx = context.WithoutCancel(ctx)
	st, id, err := p.openStore(ctx, c.path, create)
	var evicted []*conn
	p.mu.Lock()
	switch {
	case err != nil:
		c.err = err
	case p.closed:
		evicted = append(evicted, &conn{st: st})
		c.err = is.ErrClosed
	default:
		c.st, c.id = st, id
		p.open++
		p.openings.Add(1)
		evicted = p.evictLocked()
	}
	if c.err != nil && p.conns[c.path] == c {
		delete(p.conns, c.path)
	}
	close(c.ready)
	p.mu.Unlock()
	closeAll(evicted)
}

// openStore opens the SQLite file at path, creating it (and its directory) only if create is set, and
// returns what the path names (which the caller's shared lock on the directory keeps the same).
func (p *pool) openStore(ctx context.Context, path string, create bool) (*sqlite.Store, os.FileInfo, error) {
	existed := false
	switch _, err := os.Stat(path); {
	case err == nil:
		existed = true
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("multisqlite: %w", err)
	case !create:
		return nil, nil, errMissing
	default:
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, nil, fmt.Errorf("multisqlite: %w", err)
		}
	}
	opts := p.fileOpts
	opts.SingleConnection = true
	// mode=rw keeps a read from recreating a file that something outside removed.
	opts.MustExist = existed
	st, err := openRetrying(ctx, path, opts)
	if err != nil {
		return nil, nil, err
	}
	// A read-only connection never removes the -wal and -shm (it cannot take the lock to), and sets
	// nothing on the file.
	if !opts.ReadOnly {
		if err := persistWAL(ctx, st); err != nil {
			st.Close()
			return nil, nil, err
		}
	}
	id, err := os.Stat(path)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("multisqlite: %w", err)
	}
	return st, id, nil
}

// openRetrying opens the file, retrying while it is busy: SQLite reports a file another process is
// creating (switching it to WAL, writing its schema) as locked at once, without its busy handler. It
// retries for as long as the busy timeout.
func openRetrying(ctx context.Context, path string, opts sqlite.Options) (*sqlite.Store, error) {
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = sqlite.DefaultBusyTimeout
	}
	deadline := time.Now().Add(busy)
	pauses := backoff.Policy{Initial: time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2}
	for attempt := 1; ; attempt++ {
		st, err := sqlite.New(ctx, path, &opts)
		if err == nil || !is.IsTransient(err) || !time.Now().Before(deadline) {
			return st, err
		}
		time.Sleep(min(pauses.Delay(attempt), time.Until(deadline)))
	}
}

// persistWAL makes closing the file's one connection leave its -wal (emptied: journal_size_limit 0)
// and -shm where they are rather than unlink them by path: the file may have been removed since it was
// opened, and a file created since under its name has -wal and -shm of its own.
func persistWAL(ctx context.Context, st *sqlite.Store) error {
	c, err := st.DB().Conn(ctx)
	if err != nil {
		return fmt.Errorf("multisqlite: %w", err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `PRAGMA journal_size_limit = 0`); err != nil {
		return fmt.Errorf("multisqlite: journal_size_limit: %w", err)
	}
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("multisqlite: driver connection is a %T, not a go-sqlite3 connection", dc)
		}
		if err := sc.SetFileControlInt("main", sqlite3.SQLITE_FCNTL_PERSIST_WAL, 1); err != nil {
			return fmt.Errorf("multisqlite: SQLITE_FCNTL_PERSIST_WAL: %w", err)
		}
		return nil
	})
}

// discard takes c off the pool because its path no longer names the file it has open (the file was
// removed, perhaps created again): the next acquire opens the path afresh, and c is closed by its last
// release.
func (p *pool) discard(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.st != nil && !c.discarded && p.conns[c.path] == c {
		delete(p.conns, c.path)
		c.discarded = true
		p.open--
	}
}

// evictLocked takes idle files off the pool, least recently used first, until it is within its bound,
// and returns them for the caller to close outside the lock.
func (p *pool) evictLocked() []*conn {
	var out []*conn
	for p.open > p.max && p.idle.Len() > 0 {
		c := p.idle.Remove(p.idle.Back()).(*conn)
		c.elem = nil
		delete(p.conns, c.path)
		p.open--
		out = append(out, c)
	}
	return out
}

// release gives back a reference from acquire. The last reference makes the file idle, or closes it
// if the pool is closed or over its bound.
func (p *pool) release(c *conn) {
	var evicted []*conn
	p.mu.Lock()
	c.refs--
	if c.refs == 0 && c.st != nil {
		if c.discarded {
			evicted = append(evicted, c)
		} else if p.closed {
			if p.conns[c.path] == c {
				delete(p.conns, c.path)
				p.open--
			}
			evicted = append(evicted, c)
		} else {
			c.elem = p.idle.PushFront(c)
			evicted = p.evictLocked()
		}
	}
	p.mu.Unlock()
	closeAll(evicted)
}

// close closes every idle file; a file in use is closed by its last release.
func (p *pool) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var idle []*conn
	for e := p.idle.Front(); e != nil; e = e.Next() {
		c := e.Value.(*conn)
		c.elem = nil
		delete(p.conns, c.path)
		p.open--
		idle = append(idle, c)
	}
	p.idle.Init()
	p.mu.Unlock()
	return closeAll(idle)
}

// closeAll closes files taken off the pool. Their writes are committed already, so a caller evicting
// a file to make room ignores the error; Close reports it.
func closeAll(conns []*conn) error {
	var errs []error
	for _, c := range conns {
		errs = append(errs, c.st.Close())
	}
	return errors.Join(errs...)
}

func (p *pool) openFiles() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}
