package multisqlite

import (
	"container/list"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/stratalog/strata/backends/internal/sqlitefile"
	is "github.com/stratalog/strata/indexedstorage"
)

// errMissing is what an opener that may not create reports to the callers that joined it.
var errMissing = errors.New("index file does not exist")

// pool holds the open files, at most max of them: past that, idle files are closed least recently used
// first. A file in use is counted by refs and never closed under its user; while more than max are in
// use at once, the excess is closed as each is released.
type pool struct {
	max      int
	fileOpts sqlitefile.Options // how each file is opened
	mu       sync.Mutex
	conns    map[string]*conn // by path, including files still being opened
	idle     list.List        // of *conn with refs == 0, most recently used at the front
	open     int              // files open (in conns and opened successfully)
	closed   bool
	openings atomic.Int64 // files opened since the pool was made
	// checked is the schema-check cache (see schemaChecked), guarded by mu.
	checked      map[string]fileStamp
	schemaChecks atomic.Int64 // opens that checked (or migrated) a file's schema, or tried to
	// uncached takes the schema-check cache out (a test's, to measure what it saves).
	uncached bool
}

// The schema-check cache. Opening a file checks its schema version (a user_version read, and a
// migration when it is older): that is the file's own, so a file checked once need not be checked
// again when the pool opens it anew after an eviction, as long as it is the same file. The cache keys
// it by path and remembers the file's identity when checked: its device, inode and birth time
// (stamp_linux.go; where the platform gives no birth time nothing is cached and every open checks).
// Writes and checkpoints change none of the three, so a file written between visits stays known;
// an open whose file has another identity checks it, as before.
//
// A file removed (lock.go's protocol, by this process or another) and created again under its name
// must be checked again, and is: the new file is born later, and usually on another inode; and this
// process forgets a path whose file it removes, and a path whose operation failed. The residue is
// what an identity of this kind cannot rule out: a new file given the inode just freed and born
// within the kernel's timestamp granularity (a few milliseconds on a coarse clock) of the old one's
// birth. It is harmless in all but one moment: the creator of a file checks (migrates) it under its
// directory's shared lock before writing to it, so a file this build made is current; an open in
// the moment between a file's creation and its creator's migration finds no table, fails that one
// operation, and the path is forgotten, so the next open checks it.
const maxCheckedFiles = 1 << 15 // about 5 MB of paths at most; past it, an arbitrary entry goes

// schemaChecked reports whether the file at path is one whose schema an open checked.
func (p *pool) schemaChecked(path string) bool {
	now, ok := stampOf(path)
	if !ok || p.uncached {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	then, ok := p.checked[path]
	return ok && then == now
}

// rememberChecked records that the file at path had its schema checked by the open that has it open
// now (so that its inode cannot have been reused).
func (p *pool) rememberChecked(path string) {
	stamp, ok := stampOf(path)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, known := p.checked[path]; !known && len(p.checked) >= maxCheckedFiles {
		for old := range p.checked {
			delete(p.checked, old)
			break
		}
	}
	p.checked[path] = stamp
}

// forgetChecked makes the next open of path check its file's schema.
func (p *pool) forgetChecked(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.checked, path)
}

type conn struct {
	path  string
	eng   *sqlitefile.Engine // set once ready is closed and err is nil
	id    os.FileInfo        // what path named when eng was opened (under the directory's shared lock)
	err   error
	ready chan struct{}
	refs  int
	elem  *list.Element // in pool.idle while refs == 0
	// discarded: taken off the pool because path no longer names id; closed by its last release.
	discarded bool
}

func newPool(max int, opts sqlitefile.Options) *pool {
	return &pool{max: max, fileOpts: opts, conns: make(map[string]*conn), checked: make(map[string]fileStamp)}
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
	eng, id, err := p.openEngine(ctx, c.path, create)
	var evicted []*conn
	p.mu.Lock()
	switch {
	case err != nil:
		c.err = err
	case p.closed:
		evicted = append(evicted, &conn{eng: eng})
		c.err = is.ErrClosed
	default:
		c.eng, c.id = eng, id
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

// openEngine opens the SQLite file at path, creating it (and its directory) only if create is set, and
// returns what the path names (which the caller's shared lock on the directory keeps the same).
func (p *pool) openEngine(ctx context.Context, path string, create bool) (*sqlitefile.Engine, os.FileInfo, error) {
	existed, checked := false, false
	switch _, err := os.Stat(path); {
	case err == nil:
		existed, checked = true, p.schemaChecked(path)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, err
	case !create:
		return nil, nil, errMissing
	default:
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, nil, err
		}
	}
	opts := p.fileOpts
	// mode=rw keeps a read from recreating a file that something outside removed.
	opts.MustExist = existed
	opts.SchemaChecked = checked
	if !checked && !opts.ReadOnly {
		p.schemaChecks.Add(1)
	}
	eng, err := sqlitefile.Open(ctx, path, opts) // retries a file another process is creating
	if err != nil {
		p.forgetChecked(path)
		return nil, nil, err
	}
	id, err := os.Stat(path)
	if err != nil {
		eng.Close()
		return nil, nil, err
	}
	p.rememberChecked(path) // under the directory's shared lock: still the file just opened
	return eng, id, nil
}

// discard takes c off the pool because its path no longer names the file it has open (the file was
// removed, perhaps created again): the next acquire opens the path afresh, and c is closed by its last
// release.
func (p *pool) discard(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.eng != nil && !c.discarded && p.conns[c.path] == c {
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
	if c.refs == 0 && c.eng != nil {
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
		errs = append(errs, c.eng.Close())
	}
	return errors.Join(errs...)
}

func (p *pool) openFiles() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}
