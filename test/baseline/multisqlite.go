package baseline

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sync/errgroup"
)

// MultiSQLite archives a namespace of strata's multi-file SQLite directory (docs/multisqlite.md): one
// SQLite file an index at Dir/<namespace dir>/<bucket>/<name>.db, each file's rows that one index's,
// every read and write under a shared flock(2) on the file's directory and the removal of an emptied
// file under an exclusive one. It is the "simplest correct client" of that page: it opens a file's
// connection after taking the lock and closes it before releasing it, so it needs no PERSIST_WAL.
// It takes the exclusive lock for the whole of a file's archive, reads and writes included.
// The keys come from the rows (a file's name is not decoded).
type MultiSQLite struct {
	Dir string
	Options
}

// nsDir is the namespace's directory name, as docs/multisqlite.md gives it.
func nsDir(ns string) string {
	var b strings.Builder
	b.WriteString("ns-")
	for i := 0; i < len(ns); i++ {
		switch c := ns[i]; {
		case c == '/':
			b.WriteByte('~')
		case c >= 'A' && c <= 'Z':
			b.WriteByte('^')
			b.WriteByte(c - 'A' + 'a')
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() > 200 {
		sum := sha256.Sum256([]byte(ns))
		return "nh-" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

func isBucketDir(name string) bool {
	if len(name) != 4 || strings.ToLower(name) != name {
		return false
	}
	var b int
	_, err := fmt.Sscanf(name, "%04x", &b)
	return err == nil && b < 16384
}

// lockDir takes the protocol's flock on dir: open it read-only, flock, check it is still the
// directory the path names. ok is false when the directory is gone.
func lockDir(dir string, how int) (fd int, ok bool, err error) {
	for {
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.ENOENT) {
			return -1, false, nil
		}
		if err != nil {
			return -1, false, err
		}
		if err := syscall.Flock(fd, how); err != nil {
			syscall.Close(fd)
			return -1, false, err
		}
		var held, named syscall.Stat_t
		if err := syscall.Fstat(fd, &held); err != nil {
			syscall.Close(fd)
			return -1, false, err
		}
		err = syscall.Stat(dir, &named)
		if err == nil && held.Dev == named.Dev && held.Ino == named.Ino {
			return fd, true, nil
		}
		syscall.Close(fd)
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			return -1, false, err
		}
		if errors.Is(err, syscall.ENOENT) {
			return -1, false, nil
		}
	}
}

// PerAgent: the namespace directory's bucket directories in order, each listed, and per file, Workers
// at once, all under the exclusive lock of its directory (one lock and one open a file: the least the
// protocol allows; it keeps the bucket's other files waiting while the blobs are put): open it, read
// its rows (one statement), a blob a row, delete the rows up to the last id read (one statement, one
// commit), check it holds no row (one statement), close it and remove it with its -wal and -shm, and
// the directory if that emptied it.
func (m *MultiSQLite) PerAgent(ctx context.Context, ns string) (int, error) {
	root := filepath.Join(m.Dir, nsDir(ns))
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() || !isBucketDir(e.Name()) {
			continue
		}
		names, err := os.ReadDir(filepath.Join(root, e.Name()))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
		for _, n := range names {
			if name := n.Name(); strings.HasSuffix(name, ".db") && (name[0] == 'k' || name[0] == 'h') {
				files = append(files, filepath.Join(root, e.Name(), name))
			}
		}
	}
	slices.Sort(files)
	archived := 0
	for len(files) > 0 {
		page := files[:min(len(files), m.pageSize())]
		files = files[len(page):]
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(m.workers())
		var done = make([]bool, len(page))
		for i, path := range page {
			g.Go(func() error {
				var err error
				done[i], err = m.archiveFile(gctx, path)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return archived, err
		}
		for _, d := range done {
			if d {
				archived++
				m.Counts.agents(1)
			}
		}
	}
	return archived, nil
}

type keyedRow struct {
	key string
	sqlRow
}

func (m *MultiSQLite) commitCounter() *atomic.Int64 {
	if m.Counts == nil {
		return nil
	}
	return &m.Counts.Commits
}

// archiveFile archives one file; done is false when it was gone, or still held rows (an append won).
func (m *MultiSQLite) archiveFile(ctx context.Context, path string) (done bool, err error) {
	dir := filepath.Dir(path)
	err = m.underLock(dir, syscall.LOCK_EX, func() error {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		db, err := countingDB(path, m.commitCounter(), 1, true)
		if err != nil {
			return err
		}
		defer db.Close()
		m.Counts.rt(1)
		q, err := db.QueryContext(ctx, `SELECT key, id, value FROM index_storage ORDER BY id`)
		if err != nil {
			return fmt.Errorf("baseline multisqlite read %s: %w", path, err)
		}
		var rows []keyedRow
		for q.Next() {
			var r keyedRow
			if err := q.Scan(&r.key, &r.id, &r.value); err != nil {
				q.Close()
				return err
			}
			rows = append(rows, r)
		}
		if err := q.Close(); err != nil {
			return err
		}
		if err := q.Err(); err != nil || len(rows) == 0 {
			return err
		}
		for _, r := range rows {
			if err := m.Blobs.Put(ctx, BlobPath(r.key, uint64(r.id)), r.value); err != nil {
				return err
			}
		}
		m.Counts.rt(2)
		if _, err := db.ExecContext(ctx, `DELETE FROM index_storage WHERE id <= ?`, rows[len(rows)-1].id); err != nil {
			return fmt.Errorf("baseline multisqlite drop %s: %w", path, err)
		}
		var one int
		switch err := db.QueryRowContext(ctx, `SELECT 1 FROM index_storage LIMIT 1`).Scan(&one); {
		case err == nil: // rows above the last id read: the file stays
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("baseline multisqlite check %s: %w", path, err)
		}
		if err := db.Close(); err != nil {
			return err
		}
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		done = true
		if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			return err
		}
		return nil
	})
	return done, err
}

func (m *MultiSQLite) underLock(dir string, how int, fn func() error) error {
	fd, ok, err := lockDir(dir, how)
	if err != nil || !ok {
		return err
	}
	defer syscall.Close(fd)
	return fn()
}
