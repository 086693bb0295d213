package baseline_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/baseline"
	"github.com/stratalog/strata/test/baseline/baselinetest"
	"github.com/stratalog/strata/test/oplogtest"
)

// TestPG_DropsWaitForTheIndexLockStrataTakes: while another session holds the advisory lock strata's
// writers take on one index ('{schema}.{namespace}:{key}'), each PostgreSQL baseline's drop of that
// index waits, and the index is still whole; released, the drop goes on. So the baselines are
// serialized with strata's appends as strata's own drops are.
func TestPG_DropsWaitForTheIndexLockStrataTakes(t *testing.T) {
	for _, shape := range []string{"per-agent", "batched"} {
		t.Run(shape, func(t *testing.T) {
			st := backendtest.Postgres().Open(t)
			store, _ := backendtest.PostgresStore(st)
			blobs := memory.NewBlobStore()
			opts := baseline.Options{Blobs: blobs}
			eng, _ := baselinetest.For(t, st, opts, opts)
			archive := eng.PerAgent
			if shape == "batched" {
				archive = eng.Batched
			}
			l := oplogtest.NewLayers(t, st, nil)
			agents := strand(t, l, shape, 3)
			var held string
			for a := range agents {
				held = a.StoredKey()
				break
			}

			ctx := t.Context()
			holder, err := pgx.Connect(ctx, store.Pool().Config().ConnString())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close(context.Background())
			tx, err := holder.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, store.Schema()+"."+ns+":"+held); err != nil {
				t.Fatal(err)
			}

			watcher, err := pgx.Connect(ctx, store.Pool().Config().ConnString())
			if err != nil {
				t.Fatal(err)
			}
			defer watcher.Close(context.Background())

			done := make(chan error, 1)
			go func() { _, err := archive(ctx, ns); done <- err }()
			// Wait (no deadline but the test's) until a session of the baseline waits for an
			// advisory lock: its drop.
			for {
				var waiting bool
				// A connection of its own: within a transaction, pg_stat_activity is read once.
				if err := watcher.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'
					AND application_name = $1)`, baselinetest.ApplicationName).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting {
					break
				}
				select {
				case err := <-done:
					t.Fatalf("the baseline finished (%v) while the index's lock was held", err)
				case <-time.After(10 * time.Millisecond):
				}
			}
			if ok, err := st.Exists(ctx, ns, held); !ok || err != nil {
				t.Fatalf("%s was dropped while its lock was held (%v)", held, err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			requireArchived(t, st, blobs, agents)
		})
	}
}
