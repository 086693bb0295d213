package backendtest

// The raw walks (storagetest.Harness.RawWalk: the loop an application writes against the engine
// without strata) and poisons (Harness.Poison: an index made unreadable in the engine's own terms) of
// the engines whose handles export what they need.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stratalog/strata/internal/testenv"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/backends/postgres"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
)

// memoryRawWalk is the loop a sorted slice allows: binary search past the last key, take a page. The slice is
// built once from the store, outside the walk, so the row measures the walk alone.
func memoryRawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	keys, err := sortedKeys(ctx, st, ns)
	if err != nil {
		return 0, err
	}
	n, last := 0, ""
	for {
		i, found := slices.BinarySearch(keys, last)
		if found {
			i++
		}
		page := keys[i:min(i+pageSize, len(keys))]
		n += len(page)
		if len(page) < pageSize {
			return n, nil
		}
		last = page[len(page)-1]
	}
}

var sortedKeysCache = map[cacheKey][]string{}

type cacheKey struct {
	st is.Storage
	ns string
}

func sortedKeys(ctx context.Context, st is.Storage, ns string) ([]string, error) {
	if keys, ok := sortedKeysCache[cacheKey{st, ns}]; ok {
		return keys, nil
	}
	var keys []string
	for cursor := uint64(0); ; {
		next, page, err := st.Scan(ctx, ns, "", cursor, 1<<20)
		if err != nil {
			return nil, err
		}
		keys = append(keys, page...)
		if next == 0 {
			break
		}
		cursor = next
	}
	sortedKeysCache[cacheKey{st, ns}] = keys
	return keys, nil
}

// SQLitePoison adds to the index a row whose id is text, as a foreign writer that gets the documented
// schema's types wrong does: 'abc' sorts above every integer, so the index's last entry is the one no
// int64 can hold. The schema's checks refuse such a row, so the writer here is one that told its
// connection to skip them (PRAGMA ignore_check_constraints), as any other program with the file open
// can; the store must still fail that one index loudly and nothing else.
func SQLitePoison(tb testing.TB, st is.Storage, ns, key string) {
	tb.Helper()
	if err := testenv.ExecUnchecked(context.Background(), st.(*sqlite.Store).DB(),
		`INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, 'abc', x'00')`, ns, key); err != nil {
		tb.Fatalf("poison %s:%q: %v", ns, key, err)
	}
}

// sqliteRawWalk is the keyset loop an application would write against the table itself, through the same
// connection pool ScanStable reads with: keys with their last id, as an archiver needs them and as
// ScanStable's pages carry them.
func sqliteRawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	db := st.(*sqlite.Store).DB()
	n, last := 0, ""
	var lastID int64
	for {
		rows, err := db.QueryContext(ctx,
			`SELECT key, max(id) FROM index_storage WHERE namespace = ? AND key > ? GROUP BY key ORDER BY key LIMIT ?`, ns, last, pageSize)
		if err != nil {
			return n, err
		}
		got := 0
		for rows.Next() {
			if err := rows.Scan(&last, &lastID); err != nil {
				rows.Close()
				return n, err
			}
			got++
		}
		if err := rows.Close(); err != nil {
			return n, err
		}
		if err := rows.Err(); err != nil {
			return n, err
		}
		n += got
		if got < pageSize {
			return n, nil
		}
	}
}

// postgresRawWalk is the keyset loop a Postgres user would write without strata, on the store's own
// pool: keys with their last id, as an archiver needs them and as ScanStable's pages carry them.
func postgresRawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	store, ok := PostgresStore(st)
	if !ok {
		return 0, fmt.Errorf("raw walk: %T is not a postgres store", st)
	}
	query := `SELECT key, max(id) FROM ` + store.Table() + ` WHERE namespace = $1 AND key > $2 GROUP BY key ORDER BY key LIMIT $3`
	n, last := 0, ""
	for {
		rows, _ := store.Pool().Query(ctx, query, ns, last, pageSize)
		var keys []string
		var key string
		var id int64
		_, err := pgx.ForEachRow(rows, []any{&key, &id}, func() error { keys = append(keys, key); return nil })
		if err != nil {
			return n, err
		}
		n += len(keys)
		if len(keys) < pageSize {
			return n, nil
		}
		last = keys[len(keys)-1]
	}
}

// PostgresStore finds the *postgres.Store under any wrappers, for a test that reaches its pool.
func PostgresStore(st is.Storage) (*postgres.Store, bool) {
	for {
		switch s := st.(type) {
		case *postgres.Store:
			return s, true
		case is.Wrapper:
			st = s.Unwrap()
		default:
			return nil, false
		}
	}
}

// redisPoison replaces the index's sorted set with a string at the same Redis key (RedisKey: P{ns|T}:key,
// as docs/redis.md documents), as another program sharing the database would; the index set still
// lists it.
func redisPoison(tb testing.TB, st is.Storage, ns, key string) {
	tb.Helper()
	s := st.(*redis.Store)
	if err := s.Client().Set(context.Background(), s.RedisKey(ns, key), "not a sorted set", 0).Err(); err != nil {
		tb.Fatalf("poison %s:%q: %v", ns, key, err)
	}
}

// redisRawWalk is the loop a Redis user writes without strata to list the namespace's indexes with each
// one's last id, as ScanStable's pages carry them: SCAN with a MATCH pattern of the namespace's index
// keys and COUNT until the cursor comes back 0, each page's last members read in one pipeline
// (ZRANGE key -1 -1), counting keys. The SQL backends' raw loops read max(id) with their keys too.
func redisRawWalk(ctx context.Context, st is.Storage, ns string, pageSize int) (int, error) {
	s := st.(*redis.Store)
	if s.IsCluster() {
		return 0, errors.New("SCAN reaches one node of a cluster")
	}
	match := testenv.EscapeGlob(s.KeyPrefix()) + "{" + ns + "|*}:*"
	n, cursor := 0, uint64(0)
	for {
		keys, next, err := s.Client().Scan(ctx, cursor, match, int64(pageSize)).Result()
		if err != nil {
			return n, err
		}
		if len(keys) > 0 {
			pipe := s.Client().Pipeline()
			for _, k := range keys {
				pipe.ZRange(ctx, k, -1, -1)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return n, err
			}
		}
		n += len(keys)
		if next == 0 {
			return n, nil
		}
		cursor = next
	}
}
