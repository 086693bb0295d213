package baseline

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mattn/go-sqlite3"
	"golang.org/x/sync/errgroup"
)

// connector opens connections of dsn through drv, a mattn/go-sqlite3 driver of the archiver's own
// whose connect hook counts each connection's committed write transactions (sqlite3_commit_hook).
type connector struct {
	drv *sqlite3.SQLiteDriver
	dsn string
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }

// countingDB opens path through the counting driver: WAL, synchronous NORMAL, transactions BEGIN
// IMMEDIATE, a busy timeout, as docs/storage-format.md asks of a writer (and as strata opens it). Every
// commit of its connections adds one to commits.
func countingDB(path string, commits *atomic.Int64, maxConns int, mustExist bool) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_txlock", "immediate")
	if mustExist {
		q.Set("mode", "rw")
	}
	dsn := (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String() + "?" + q.Encode()
	drv := &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		if commits != nil {
			c.RegisterCommitHook(func() int { commits.Add(1); return 0 })
		}
		return nil
	}}
	db := sql.OpenDB(connector{drv, dsn})
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	return db, nil
}

// SQLite archives a namespace of strata's SQLite file (docs/storage-format.md, "SQLite"): the table
// index_storage(namespace, key, id, value) WITHOUT ROWID, keys compared BINARY, writers BEGIN
// IMMEDIATE. It opens the file itself: Workers reading connections and one writing one, as strata does.
type SQLite struct {
	Path string
	Options

	once           sync.Once
	openErr        error
	reader, writer *sql.DB
}

func (s *SQLite) open() error {
	s.once.Do(func() {
		var commits *atomic.Int64
		if s.Counts != nil {
			commits = &s.Counts.Commits
		}
		if s.reader, s.openErr = countingDB(s.Path, commits, s.workers(), true); s.openErr != nil {
			return
		}
		s.writer, s.openErr = countingDB(s.Path, commits, 1, true)
	})
	return s.openErr
}

// Close closes the connections the archiver opened.
func (s *SQLite) Close() error {
	if s.reader != nil {
		s.reader.Close()
	}
	if s.writer != nil {
		return s.writer.Close()
	}
	return nil
}

const (
	sqlitePage = `SELECT key, max(id) FROM index_storage WHERE namespace = ? AND key > ? GROUP BY key ORDER BY key LIMIT ?`
	sqliteRead = `SELECT id, value FROM index_storage WHERE namespace = ? AND key = ? AND id <= ? ORDER BY id`
	sqliteDrop = `DELETE FROM index_storage WHERE namespace = ? AND key = ? AND id <= ?`
)

// PerAgent: a page of keys with their last ids (one statement), then per key, Workers at once, its
// rows up to that id (one statement), a blob a row, one bounded DELETE (one autocommit statement on
// the writing connection: one commit).
func (s *SQLite) PerAgent(ctx context.Context, ns string) (int, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	archived, after := 0, ""
	for {
		keys, lasts, err := s.page(ctx, ns, after)
		if err != nil {
			return archived, err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(s.workers())
		for i, key := range keys {
			g.Go(func() error {
				rows, err := s.rows(gctx, s.reader, ns, key, lasts[i])
				if err != nil {
					return err
				}
				for _, r := range rows {
					if err := s.Blobs.Put(gctx, BlobPath(key, uint64(r.id)), r.value); err != nil {
						return err
					}
				}
				s.Counts.rt(1)
				if _, err := s.writer.ExecContext(gctx, sqliteDrop, ns, key, lasts[i]); err != nil {
					return fmt.Errorf("baseline sqlite drop %s %q: %w", ns, key, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return archived, err
		}
		archived += len(keys)
		s.Counts.agents(len(keys))
		if len(keys) < s.pageSize() {
			return archived, nil
		}
		after = keys[len(keys)-1]
	}
}

// Batched: one statement reads a page of keys with their last ids and each key's rows up to it, the
// blobs are put Workers at once, and one DELETE on the writing connection drops each key's rows up to
// its own last id (one statement, one commit a page).
func (s *SQLite) Batched(ctx context.Context, ns string) (int, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	const pageSQL = `WITH page AS (
		SELECT key, max(id) AS last FROM index_storage WHERE namespace = ? AND key > ? GROUP BY key ORDER BY key LIMIT ?
	)
	SELECT page.key, page.last, r.id, r.value FROM page
	JOIN index_storage AS r ON r.namespace = ? AND r.key = page.key AND r.id <= page.last
	ORDER BY page.key, r.id`
	type item struct {
		key  string
		last int64
		rows []sqlRow
	}
	archived, after := 0, ""
	for {
		var page []*item
		s.Counts.rt(1)
		q, err := s.reader.QueryContext(ctx, pageSQL, ns, after, s.pageSize(), ns)
		if err != nil {
			return archived, fmt.Errorf("baseline sqlite page of %s: %w", ns, err)
		}
		for q.Next() {
			var key string
			var last int64
			var r sqlRow
			if err := q.Scan(&key, &last, &r.id, &r.value); err != nil {
				q.Close()
				return archived, err
			}
			if len(page) == 0 || page[len(page)-1].key != key {
				page = append(page, &item{key: key, last: last})
			}
			it := page[len(page)-1]
			it.rows = append(it.rows, r)
		}
		if err := q.Close(); err != nil {
			return archived, err
		}
		if err := q.Err(); err != nil {
			return archived, err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(s.workers())
		for _, it := range page {
			g.Go(func() error {
				for _, r := range it.rows {
					if err := s.Blobs.Put(gctx, BlobPath(it.key, uint64(r.id)), r.value); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return archived, err
		}
		if len(page) > 0 {
			// page(k, l) AS (VALUES (?, ?), …): each key with its own bound.
			values := strings.TrimSuffix(strings.Repeat("(?, ?), ", len(page)), ", ")
			args := make([]any, 0, 2*len(page)+1)
			for _, it := range page {
				args = append(args, it.key, it.last)
			}
			args = append(args, ns)
			s.Counts.rt(1)
			if _, err := s.writer.ExecContext(ctx, `WITH page(k, l) AS (VALUES `+values+`)
				DELETE FROM index_storage WHERE namespace = ? AND key IN (SELECT k FROM page)
				AND id <= (SELECT l FROM page WHERE k = index_storage.key)`, args...); err != nil {
				return archived, fmt.Errorf("baseline sqlite drop of a page of %s: %w", ns, err)
			}
		}
		archived += len(page)
		s.Counts.agents(len(page))
		if len(page) < s.pageSize() {
			return archived, nil
		}
		after = page[len(page)-1].key
	}
}

func (s *SQLite) page(ctx context.Context, ns, after string) (keys []string, lasts []int64, err error) {
	s.Counts.rt(1)
	rows, err := s.reader.QueryContext(ctx, sqlitePage, ns, after, s.pageSize())
	if err != nil {
		return nil, nil, fmt.Errorf("baseline sqlite page of %s: %w", ns, err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var last int64
		if err := rows.Scan(&key, &last); err != nil {
			return nil, nil, err
		}
		keys, lasts = append(keys, key), append(lasts, last)
	}
	return keys, lasts, rows.Err()
}

type sqlRow = pgRow

func (s *SQLite) rows(ctx context.Context, db *sql.DB, ns, key string, last int64) ([]sqlRow, error) {
	s.Counts.rt(1)
	return readRows(ctx, db, sqliteRead, ns, key, last)
}

func readRows(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args ...any) ([]sqlRow, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("baseline sqlite read: %w", err)
	}
	defer rows.Close()
	var out []sqlRow
	for rows.Next() {
		var r sqlRow
		if err := rows.Scan(&r.id, &r.value); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
