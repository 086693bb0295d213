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

	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
)

// errMissing is what an opener that may not create reports to the callers that joined it.
var errMissing = errors.New("index file does not exist")

// pool holds the open files, at most max of them: past that, idle files are closed least recently used
// first. A file in use is counted by refs and never closed under its user; while more than max are in
// use at once, the excess is closed as each is released.
type pool struct {
	max      int
	fileOpts sqlite.Options  // how each file is opened
	created  func(ns string) // called after this process created a file, before the creator returns
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
	err   error
	ready chan struct{}
	refs  int
	elem  *list.Element // in pool.idle while refs == 0
}

func newPool(max int, opts sqlite.Options, created func(ns string)) *pool {
	return &pool{max: max, fileOpts: opts, created: created, conns: make(map[string]*conn)}
}

// acquire returns the open file at path, opening it if needed, with a reference the caller must
// release. A missing file is created only if create is set; otherwise acquire returns nil, nil.
func (p *pool) acquire(ctx context.Context, ns, path string, create bool) (*conn, error) {
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
			p.openFile(ctx, c, ns, create)
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
func (p *pool) openFile(ctx context.Context, c *conn, ns string, create bool) {
	ctx = context.WithoutCancel(ctx)
	st, existed, err := p.openStore(ctx, c.path, create)
	if err == nil && !existed {
		// Only a file that did not exist before this open is news to the listing (an evicted file
		// opened again changes nothing), and the listing must hear of it before any caller sharing
		// this open returns.
		p.created(ns)
	}
	var evicted []*conn
	p.mu.Lock()
	switch {
	case err != nil:
		c.err = err
	case p.closed:
		evicted = append(evicted, &conn{st: st})
		c.err = is.ErrClosed
	default:
		c.st = st
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

// openStore opens the SQLite file at path, creating it (and its directory) only if create is set.
// existed reports whether the file was there before.
func (p *pool) openStore(ctx context.Context, path string, create bool) (st *sqlite.Store, existed bool, err error) {
	switch _, err := os.Stat(path); {
	case err == nil:
		existed = true
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("multisqlite: %w", err)
	case !create:
		return nil, false, errMissing
	default:
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, false, fmt.Errorf("multisqlite: %w", err)
		}
	}
	opts := p.fileOpts
	opts.SingleConnection = true
	// Files are never removed, so one that existed still does; mode=rw keeps a read from recreating one
	// that something outside removed anyway.
	opts.MustExist = existed
	st, err = sqlite.Open(ctx, path, opts)
	if err != nil {
		return nil, false, err
	}
	return st, existed, nil
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
		if p.closed {
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
