package baseline

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// PG archives a namespace of strata's PostgreSQL table (docs/storage-format.md, "PostgreSQL"):
// Schema.index_storage(namespace, key, id, value), keys collated "C", every mutation of an index under
// pg_advisory_xact_lock(hashtextextended('{schema}.{namespace}:{key}', 0)) in its transaction.
type PG struct {
	Pool   *pgxpool.Pool
	Schema string // the schema's name as it is (the lock's name uses it unquoted)
	Options
}

func (p *PG) table() string { return pgx.Identifier{p.Schema, "index_storage"}.Sanitize() }

// lockName is the name of an index's advisory lock, as strata's writers take it.
func (p *PG) lockName(ns, key string) string { return p.Schema + "." + ns + ":" + key }

type pgRow struct {
	id    int64
	value []byte
}

// PerAgent archives every index of ns: a keyset page of keys with their last ids (one statement),
// then per key, Workers at once, its rows up to that id (one statement), a blob a row, and the lock
// with one bounded DELETE (one pgx batch: one round trip, one implicit transaction). It returns the
// indexes archived.
func (p *PG) PerAgent(ctx context.Context, ns string) (int, error) {
	t := p.table()
	pageSQL := `SELECT key, max(id) FROM ` + t + ` WHERE namespace = $1 AND key > $2 GROUP BY key ORDER BY key LIMIT $3`
	readSQL := `SELECT id, value FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND id <= $3 ORDER BY id`
	dropSQL := `DELETE FROM ` + t + ` WHERE namespace = $1 AND key = $2 AND id <= $3`
	archived, after := 0, ""
	for {
		var keys []string
		var lasts []int64
		var key string
		var last int64
		rows, _ := p.Pool.Query(ctx, pageSQL, ns, after, p.pageSize())
		p.Counts.rt(1)
		if _, err := pgx.ForEachRow(rows, []any{&key, &last}, func() error {
			keys, lasts = append(keys, key), append(lasts, last)
			return nil
		}); err != nil {
			return archived, fmt.Errorf("baseline postgres page of %s: %w", ns, err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(p.workers())
		for i, key := range keys {
			g.Go(func() error {
				rows, _ := p.Pool.Query(gctx, readSQL, ns, key, lasts[i])
				p.Counts.rt(1)
				got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgRow, error) {
					var row pgRow
					return row, r.Scan(&row.id, &row.value)
				})
				if err != nil {
					return fmt.Errorf("baseline postgres read %s %q: %w", ns, key, err)
				}
				for _, r := range got {
					if err := p.Blobs.Put(gctx, BlobPath(key, uint64(r.id)), r.value); err != nil {
						return err
					}
				}
				var b pgx.Batch
				b.Queue(`SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))`, p.lockName(ns, key))
				b.Queue(dropSQL, ns, key, lasts[i])
				p.Counts.rt(1)
				if err := p.Pool.SendBatch(gctx, &b).Close(); err != nil {
					return fmt.Errorf("baseline postgres drop %s %q: %w", ns, key, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return archived, err
		}
		archived += len(keys)
		p.Counts.agents(len(keys))
		if len(keys) < p.pageSize() {
			return archived, nil
		}
		after = keys[len(keys)-1]
	}
}

// Batched archives every index of ns a page at a time: one statement reads the page's keys with their
// last ids and each key's rows up to its last id; the blobs are put Workers at once; one pgx batch (one
// round trip, one implicit transaction) takes the page's locks in key order and deletes each index's
// rows up to its own last id in one DELETE.
func (p *PG) Batched(ctx context.Context, ns string) (int, error) {
	t := p.table()
	pageSQL := `WITH page AS (
		SELECT key, max(id) AS last FROM ` + t + ` WHERE namespace = $1 AND key > $2 GROUP BY key ORDER BY key LIMIT $3
	)
	SELECT page.key, page.last, r.id, r.value FROM page
	JOIN ` + t + ` AS r ON r.namespace = $1 AND r.key = page.key AND r.id <= page.last
	ORDER BY page.key, r.id`
	// The locks in key order (byte order, as the keys collate): the aggregate evaluates its argument
	// row by row as the sorted subquery hands the rows up, so two batches never wait on each other
	// in a cycle.
	lockSQL := `SELECT count(pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(s.name, 0)))
	FROM (SELECT u.name FROM unnest($1::text[]) AS u(name) ORDER BY u.name COLLATE "C") AS s`
	dropSQL := `DELETE FROM ` + t + ` AS t USING unnest($2::text[], $3::bigint[]) AS u(key, last)
	WHERE t.namespace = $1 AND t.key = u.key AND t.id <= u.last`
	archived, after := 0, ""
	for {
		type item struct {
			key  string
			last int64
			rows []pgRow
		}
		var page []*item
		var key string
		var last, id int64
		var value []byte
		rows, _ := p.Pool.Query(ctx, pageSQL, ns, after, p.pageSize())
		p.Counts.rt(1)
		if _, err := pgx.ForEachRow(rows, []any{&key, &last, &id, &value}, func() error {
			if len(page) == 0 || page[len(page)-1].key != key {
				page = append(page, &item{key: key, last: last})
			}
			it := page[len(page)-1]
			it.rows = append(it.rows, pgRow{id, value})
			return nil
		}); err != nil {
			return archived, fmt.Errorf("baseline postgres page of %s: %w", ns, err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(p.workers())
		for _, it := range page {
			g.Go(func() error {
				for _, r := range it.rows {
					if err := p.Blobs.Put(gctx, BlobPath(it.key, uint64(r.id)), r.value); err != nil {
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
			keys := make([]string, len(page))
			names := make([]string, len(page))
			lasts := make([]int64, len(page))
			for i, it := range page {
				keys[i], names[i], lasts[i] = it.key, p.lockName(ns, it.key), it.last
			}
			if !slices.IsSorted(keys) {
				return archived, fmt.Errorf("baseline postgres page of %s: keys out of order", ns)
			}
			var b pgx.Batch
			b.Queue(lockSQL, names)
			b.Queue(dropSQL, ns, keys, lasts)
			p.Counts.rt(1)
			if err := p.Pool.SendBatch(ctx, &b).Close(); err != nil {
				return archived, fmt.Errorf("baseline postgres drop of a page of %s: %w", ns, err)
			}
		}
		archived += len(page)
		p.Counts.agents(len(page))
		if len(page) < p.pageSize() {
			return archived, nil
		}
		after = page[len(page)-1].key
	}
}

// flushSQL makes its backend report its counts before it answers. It reads a catalog table too: a
// backend whose transactions since its last report touched no table (this very statement, run
// again) has no pending table counts, and then skips the report, database counts and all.
const flushSQL = `SELECT pg_catalog.pg_stat_force_next_flush(), (SELECT count(*) FROM pg_catalog.pg_namespace)`

// PGCommits is the database's committed transactions (pg_stat_database.xact_commit, read and write
// alike) once every connection of pools has flushed its counts: each idle connection runs
// pg_stat_force_next_flush() (PostgreSQL 15+), whose backend then reports its counts before it
// answers, and conn reads the sum in a statement of its own after flushing itself. overhead is how
// many of the counted commits are this call's own (one a flushed connection, and conn's flush); the
// statement that reads the sum is counted by the next call: subtract both from a delta. Connections in
// use are not flushed: call it with the pools idle.
func PGCommits(ctx context.Context, conn *pgxpool.Pool, pools ...*pgxpool.Pool) (commits, overhead int64, err error) {
	for _, pool := range append(pools, conn) {
		for _, c := range pool.AcquireAllIdle(ctx) {
			_, err = c.Exec(ctx, flushSQL)
			c.Release()
			if err != nil {
				return 0, 0, err
			}
			overhead++
		}
	}
	err = conn.QueryRow(ctx, `SELECT xact_commit FROM pg_catalog.pg_stat_database WHERE datname = current_database()`).Scan(&commits)
	return commits, overhead, err
}

// PGWriteTransactions is the next transaction id the cluster will assign: a transaction takes one
// when it first writes, and a read-only one never does, so the advance between two readings is the
// write transactions committed or aborted between them, in every database of the cluster (run it on
// a server nothing else writes to). The reading itself assigns none.
func PGWriteTransactions(ctx context.Context, conn *pgxpool.Pool) (next int64, err error) {
	err = conn.QueryRow(ctx, `SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint`).Scan(&next)
	return next, err
}
