package sweeps_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/internal/testenv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/multisqlite"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/sweeper"
	"github.com/stratalog/strata/test/backendtest"
	"github.com/stratalog/strata/test/oplogtest"
)

// level1 is the namespace the sweep walks.
var level1 = oplog.CompressedNamespace(oplog.Ephemeral, 1)

// A poisoned key beside stranded agents, the way each engine gets one in the field: a multi-file
// SQLite file that is not a database, a Redis key of another type under the namespace, a SQLite row a
// foreign writer gave a text id. The sweep counts it unreadable, names it, moves past it, completes
// every pass, and archives every other agent; it never stalls on it. A multi-SQLite file the walk
// stamps (stamped: every file settled before the first tick) is not read by the gate: its first read
// is the archive's, from its second sighting on, and it is counted and named there.
func TestSweep_APoisonedKeyDoesNotStallTheRoute(t *testing.T) {
	for _, c := range []struct {
		backend backendtest.Backend
		poison  func(t *testing.T, st is.Storage) (where string)
		stamped bool
	}{
		{backendtest.MultiSQLite(), func(t *testing.T, st is.Storage) string {
			// A file named like the backend's files for a key too long to name one (a hash, which a walk
			// must open to learn its key), in a bucket in the middle of the walk's range.
			dir := st.(*multisqlite.Store).BucketDir(level1, is.Buckets/2)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			name := "h" + strings.Repeat("7f", 32) + ".db"
			if err := os.WriteFile(filepath.Join(dir, name), []byte("this is not a SQLite database, though it is named like one"), 0o644); err != nil {
				t.Fatal(err)
			}
			return name
		}, false},
		{backendtest.MultiSQLite(), func(t *testing.T, st is.Storage) string {
			// The file of an agent's key, named by the key, holding garbage: a walk hands the key back
			// without opening it, and its reads fail.
			key := oplogtest.AgentNamed("poisoned").StoredKey()
			path := st.(*multisqlite.Store).FilePath(level1, key)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte("this is not a SQLite database, though it is named like one"), 0o644); err != nil {
				t.Fatal(err)
			}
			return key
		}, true},
		{backendtest.Redis(), func(t *testing.T, st is.Storage) string {
			rs := st.(*redis.Store)
			key := oplogtest.AgentNamed("poisoned").StoredKey()
			// Listed in its index set, as every index is, and of another type at its own key.
			if err := rs.Client().ZAdd(t.Context(), rs.IndexSetKey(level1, key), goredis.Z{Member: key}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rs.Client().Set(t.Context(), rs.RedisKey(level1, key), "a string, not a sorted set", 0).Err(); err != nil {
				t.Fatal(err)
			}
			return key
		}, false},
		{backendtest.SQLite(), func(t *testing.T, st is.Storage) string {
			key := oplogtest.AgentNamed("poisoned").StoredKey()
			if err := testenv.ExecUnchecked(t.Context(), st.(*sqlite.Store).DB(),
				`INSERT INTO index_storage (namespace, key, id, value) VALUES (?, ?, 'seven', x'00')`, level1, key); err != nil {
				t.Fatal(err)
			}
			return key
		}, false},
	} {
		t.Run(c.backend.Name, func(t *testing.T) {
			cfg := oplogtest.SweepConfig()
			cfg.PageSize = 7
			st := c.backend.Open(t)
			where := c.poison(t, st) // before the agents: their files drop any cached listing
			r := oplogtest.NewSweepRig(t, st, cfg)
			stranded := r.StrandAgents(t, "beside-poison", 30, 3)
			if c.stamped {
				time.Sleep(multisqlite.StampSettle + 100*time.Millisecond)
			}
			passes, unreadable := 0, 0
			for tick := 0; tick < 10 && r.StrandedCount(t, stranded) > 0; tick++ {
				rep := r.Sweeper.SweepOnce(t.Context())
				rr := rep.Routes[0]
				if rr.PassCompleted {
					passes++
				}
				unreadable += rr.Outcomes[sweeper.OutcomeUnreadable]
				for _, u := range rr.Unreadable {
					if !strings.Contains(u.Where, where) {
						t.Fatalf("unreadable %+v, want %s", u, where)
					}
				}
			}
			if n := r.StrandedCount(t, stranded); n > 0 {
				t.Fatalf("%d of 30 agents still stranded beside the poisoned key after %d passes", n, passes)
			}
			counted := passes // passes in which the poisoned key was read
			if c.stamped {
				counted-- // the first sighted it by its stamp alone
			}
			if unreadable < counted || passes < 2 {
				t.Fatalf("%d unreadable outcomes over %d passes: want the poisoned key counted once a pass it was read in (%d)", unreadable, passes, counted)
			}
			for _, a := range stranded {
				r.RequireExact(t, a, oplog.Ephemeral, 3)
				r.RequireDrained(t, a, oplog.Ephemeral, 3)
			}
			if st := r.Sweeper.Status(); len(st.Unreadable) == 0 || !strings.Contains(st.Unreadable[0].Where, where) {
				t.Fatalf("status lists %+v", st.Unreadable)
			}
		})
	}
}
