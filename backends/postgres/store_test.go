package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/test/backendtest"
)

const testNS = "test/ns"

func entriesFrom(first, last uint64) []is.Entry {
	var out []is.Entry
	for id := first; id <= last; id++ {
		out = append(out, is.Entry{ID: id, Value: fmt.Appendf(nil, "v%d", id)})
	}
	return out
}

func readIDs(t *testing.T, st is.Storage, key string) []uint64 {
	t.Helper()
	entries, err := st.Read(t.Context(), testNS, key, 0, is.MaxID)
	if err != nil {
		t.Fatalf("Read(%q): %v", key, err)
	}
	ids := make([]uint64, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

func span(first, last uint64) []uint64 {
	var ids []uint64
	for id := first; id <= last; id++ {
		ids = append(ids, id)
	}
	return ids
}

// The harness runs the whole suite with an empty search_path; this shows the setting really took, so
// that the suite passing means no query leans on search_path.
func TestStore_QueriesDoNotRelyOnSearchPath(t *testing.T) {
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
	ctx := t.Context()
	if err := st.Append(ctx, testNS, "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	var searchPath string
	if err := st.Pool().QueryRow(ctx, "SHOW search_path").Scan(&searchPath); err != nil {
		t.Fatal(err)
	}
	if searchPath != "" && searchPath != `""` {
		t.Fatalf("search_path is %q, want it empty", searchPath)
	}
	var n int
	err := st.Pool().QueryRow(ctx, "SELECT count(*) FROM index_storage").Scan(&n)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Fatalf("an unqualified query found the table (err %v): search_path is not empty", err)
	}
	if ok, err := st.Exists(ctx, testNS, "k"); err != nil || !ok {
		t.Fatalf("Exists through the store: %v, %v", ok, err)
	}
}

// A second New on a migrated schema finds the migration done (the suite's Reopen checks that the
// entries are still there).
func TestNew_MigratingTwiceRecordsOneMigration(t *testing.T) {
	schema := testenv.PostgresSchema(t, testenv.PostgresURL(t))
	newStore(t, schema).Close()
	requireMigratedOnce(t, newStore(t, schema))
}

// Processes starting together must not race on CREATE SCHEMA or CREATE TABLE: the advisory lock makes
// them take turns, and the later ones find the work done.
func TestNew_ConcurrentCallsOnAMissingSchemaMigrateOnce(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.UniqueName("strata_test_")
	t.Cleanup(func() { dropSchema(t, url, schema) })

	const starters = 4
	stores := make([]*postgres.Store, starters)
	errs := make([]error, starters)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range starters {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = postgres.New(t.Context(), url, &postgres.Options{Schema: schema, ConfigurePool: emptySearchPath})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("New %d of %d started together: %v", i, starters, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	requireMigratedOnce(t, stores[0])
	for i, st := range stores {
		if err := st.Append(t.Context(), testNS, fmt.Sprint("k", i), 1, nil); err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
}

func dropSchema(t *testing.T, url, schema string) {
	ctx, cancel := testenv.Context()
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

// requireMigratedOnce checks the migration record and the layout ScanStable relies on: keys compare
// as bytes whatever the database's collation.
func requireMigratedOnce(t *testing.T, st *postgres.Store) {
	t.Helper()
	ctx := t.Context()
	rows, _ := st.Pool().Query(ctx, "SELECT version FROM "+pgx.Identifier{st.Schema(), "index_storage_migrations"}.Sanitize()+" ORDER BY version")
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(versions, []int32{1}) {
		t.Fatalf("migration record %v, want [1]", versions)
	}
	var collation string
	err = st.Pool().QueryRow(ctx, `SELECT collation_name FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'index_storage' AND column_name = 'key'`, st.Schema()).Scan(&collation)
	if err != nil || collation != "C" {
		t.Fatalf("key column collation %q (%v), want C", collation, err)
	}
}

func TestOpen_ConnectionRefusedIsTransient(t *testing.T) {
	url := "postgres://postgres@" + backendtest.ClosedAddr(t) + "/test?sslmode=disable&connect_timeout=5"
	_, err := postgres.Open(t.Context(), url+"&max_concurrent_ops=2&schema=s")
	if !errors.Is(err, is.ErrTransient) {
		t.Fatalf("Open against a closed port: %v, want ErrTransient", err)
	}
}

// A server that drops the connection under the store (a restart, a failover, an administrator) fails
// the operation as transient, and the next one gets a fresh connection.
func TestStore_TerminatedConnectionIsTransientAndRecovers(t *testing.T) {
	url := testenv.PostgresURL(t)
	st := newStore(t, testenv.PostgresSchema(t, url), func(c *pgxpool.Config) {
		// One connection, never pinged or health-checked, so the next operation runs on the very
		// connection the server terminated.
		c.MaxConns = 1
		c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		c.HealthCheckPeriod = time.Hour
	})
	ctx := t.Context()
	if err := st.Append(ctx, testNS, "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	var pid uint32
	if err := st.Pool().QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var terminated bool
	// The timeout makes pg_terminate_backend wait until the backend has exited.
	if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("terminate backend %d: %v, %v", pid, terminated, err)
	}

	_, err = st.Exists(ctx, testNS, "k")
	if !errors.Is(err, is.ErrTransient) {
		t.Fatalf("Exists on a terminated connection: %v, want ErrTransient", err)
	}
	if ok, err := st.Exists(ctx, testNS, "k"); err != nil || !ok {
		t.Fatalf("Exists after the failure: %v, %v; want the pool to reconnect", ok, err)
	}
}

// A drop larger than one delete batch is still one transaction: while it is under way a reader sees
// the index whole, and a drop that fails part-way removes nothing.
func TestDropPrefix_ManyBatchesAreOneTransaction(t *testing.T) {
	url := testenv.PostgresURL(t)
	st := newStore(t, testenv.PostgresSchema(t, url))
	ctx := t.Context()
	const total, upTo, lockedID = 12_001, 11_000, 7_000 // lockedID falls in the second batch of 5,000

	for _, outcome := range []string{"Commits", "FailsPartWay"} {
		t.Run(outcome, func(t *testing.T) {
			key := "oplog-" + outcome
			if err := st.AppendMany(ctx, testNS, key, entriesFrom(1, total)); err != nil {
				t.Fatal(err)
			}
			// Another session holds one row of the second batch, so the drop stops there with the
			// first batch deleted but not committed.
			locker, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer locker.Close(ctx)
			tx, err := locker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SELECT 1 FROM "+st.Table()+" WHERE namespace = $1 AND key = $2 AND id = $3 FOR UPDATE", testNS, key, lockedID); err != nil {
				t.Fatal(err)
			}
			var lockerPID uint32
			if err := locker.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&lockerPID); err != nil {
				t.Fatal(err)
			}

			dropCtx, cancelDrop := context.WithCancel(ctx)
			defer cancelDrop()
			type result struct {
				n   uint64
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := st.DropPrefix(dropCtx, testNS, key, upTo)
				done <- result{n, err}
			}()
			waitBlockedBy(t, st, lockerPID)

			if first, ok, err := st.First(ctx, testNS, key); err != nil || !ok || first.ID != 1 {
				t.Fatalf("First during the drop: %v %v %v, want id 1: the first batch leaked", first.ID, ok, err)
			}
			if n, err := st.Length(ctx, testNS, key); err != nil || n != total {
				t.Fatalf("Length during the drop: %d %v, want %d", n, err, total)
			}

			if outcome == "Commits" {
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				r := <-done
				if r.err != nil || r.n != upTo {
					t.Fatalf("DropPrefix: %d, %v; want %d", r.n, r.err, upTo)
				}
				if got := readIDs(t, st, key); !slices.Equal(got, span(upTo+1, total)) {
					t.Fatalf("after the drop: %d ids from %d, want %d..%d", len(got), got[0], upTo+1, total)
				}
				return
			}
			cancelDrop()
			r := <-done
			if !errors.Is(r.err, context.Canceled) {
				t.Fatalf("DropPrefix cancelled part-way: %d, %v; want context.Canceled", r.n, r.err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if got := readIDs(t, st, key); !slices.Equal(got, span(1, total)) {
				t.Fatalf("after a failed drop: %d ids, want all %d", len(got), total)
			}
		})
	}
}

// waitBlockedBy returns once some session is waiting for a lock pid holds. It asks the server, round
// trip by round trip, rather than sleeping.
func waitBlockedBy(t *testing.T, st *postgres.Store, pid uint32) {
	t.Helper()
	for {
		var blocked bool
		err := st.Pool().QueryRow(t.Context(),
			"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid)))", pid).Scan(&blocked)
		if err != nil {
			t.Fatal(err)
		}
		if blocked {
			return
		}
	}
}
