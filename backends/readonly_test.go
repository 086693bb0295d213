package backends_test

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
)

// roAgents are the agents the read-only tests store: each has readEntries entries in the primary
// layer (durable) and in compressed level 1 (both modes).
var roAgents = []oplog.AgentID{{Component: "shop", Name: "cart-1"}, {Component: "shop", Name: "cart-2"}, {Component: "mail", Name: "out"}}

const readEntries = 5

// layersOver are the layers whose namespaces the read-only commands walk.
func layersOver(t *testing.T, st is.Storage) []oplog.Layer {
	t.Helper()
	c, err := archive.NewCompressed(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	return []oplog.Layer{oplog.NewPrimary(st), c}
}

// fillLayers stores roAgents through st, a store opened for writing.
func fillLayers(t *testing.T, st is.Storage) {
	t.Helper()
	for _, l := range layersOver(t, st) {
		for _, m := range []oplog.Mode{oplog.Ephemeral, oplog.Durable} {
			if _, ok := l.ScanNamespace(m); !ok {
				continue
			}
			for _, a := range roAgents {
				var entries []oplog.Entry
				for i := 1; i <= readEntries; i++ {
					entries = append(entries, oplog.Entry{Index: oplog.Index(i), Payload: fmt.Appendf(nil, "%s#%d", a.Key(), i)})
				}
				if err := l.Append(t.Context(), a, m, entries); err != nil {
					t.Fatalf("%s %s: %v", l.Name(), m, err)
				}
			}
		}
	}
}

// walkAndRead walks every namespace the layers enumerate with ScanStable, and reads every entry of
// every key it hands back, through the storage and through the layer, as strata scan and inspect do.
func walkAndRead(t *testing.T, st is.Storage) {
	t.Helper()
	ctx := t.Context()
	walked := 0
	for _, l := range layersOver(t, st) {
		for _, m := range []oplog.Mode{oplog.Ephemeral, oplog.Durable} {
			ns, ok := l.ScanNamespace(m)
			if !ok {
				continue
			}
			var keys []string
			for from := (is.Resume{}); ; {
				page, err := st.ScanStable(ctx, ns, is.KeyRange{}, from, 2)
				if err != nil {
					t.Fatalf("ScanStable %s: %v", ns, err)
				}
				if len(page.Unreadable) > 0 {
					t.Fatalf("ScanStable %s: unreadable %v", ns, page.Unreadable)
				}
				keys = append(keys, page.Keys...)
				if page.Done {
					break
				}
				from = page.Next
			}
			if len(keys) != len(roAgents) {
				t.Fatalf("%s: walked %q, want %d keys", ns, keys, len(roAgents))
			}
			for _, key := range keys {
				if _, err := st.Read(ctx, ns, key, 1, is.MaxID); err != nil {
					t.Fatalf("Read %s %q: %v", ns, key, err)
				}
				a, err := oplog.ParseStoredKey(key)
				if err != nil {
					t.Fatal(err)
				}
				got, err := l.Read(ctx, a, m, 1, readEntries, oplog.ChunkLimit)
				if err != nil || len(got) != readEntries || string(got[readEntries-1].Payload) != fmt.Sprintf("%s#%d", a.Key(), readEntries) {
					t.Fatalf("%s %s %s: %d entries, %v", l.Name(), m, a, len(got), err)
				}
				if last, ok, err := l.LastIndex(ctx, a, m); err != nil || !ok || last != readEntries {
					t.Fatalf("%s %s %s: last index %d %v %v", l.Name(), m, a, last, ok, err)
				}
			}
			walked++
		}
	}
	if walked != 3 {
		t.Fatalf("walked %d namespaces, want 3", walked)
	}
}

// refusesWrites checks a store OpenExisting opens refuses an append (the test's last step: on a
// store that does not refuse, it writes).
func refusesWrites(t *testing.T, url string) {
	t.Helper()
	st := openExisting(t, url)
	defer st.Close()
	if err := st.Append(t.Context(), "ephemeral/compressed/1", "new", 1, nil); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("Append through a read-only store: %v, want ErrInvalidArgument", err)
	}
}

func openExisting(t *testing.T, url string) is.Storage {
	t.Helper()
	st, err := backends.OpenExisting(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func openFilled(t *testing.T, url string) {
	t.Helper()
	st, err := backends.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	fillLayers(t, st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// OpenExisting of a SQLite file reads every namespace and leaves the directory as it was: the file
// byte for byte, in WAL mode still, no -wal or -shm created.
func TestOpenExisting_SQLiteFileIsLeftAsItWas(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "strata.db")
	openFilled(t, "sqlite://"+path)
	before := testenv.FileDigests(t, dir)
	st := openExisting(t, "sqlite://"+path)
	walkAndRead(t, st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after OpenExisting: %v, want %v", after, before)
	}
	if mode := testenv.JournalMode(t, path); mode != "wal" {
		t.Fatalf("journal mode %s, want wal", mode)
	}
	refusesWrites(t, "sqlite://"+path)
}

// OpenExisting of a foreign SQLite database (rollback journal, no index_storage) fails with
// fs.ErrNotExist naming the table, and leaves it byte for byte as it was, in its own journal mode:
// no index_storage created, no switch to WAL.
func TestOpenExisting_ForeignSQLiteDatabaseIsLeftAsItWas(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "foreign.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{`CREATE TABLE orders (id INTEGER PRIMARY KEY, total)`, `INSERT INTO orders (total) VALUES (42)`} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	before := testenv.FileDigests(t, dir)
	st, err := backends.OpenExisting(t.Context(), "sqlite://"+path)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "index_storage") || st != nil {
		t.Fatalf("OpenExisting of a foreign database: %v, %v; want fs.ErrNotExist naming index_storage", st, err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after OpenExisting: %v, want %v", after, before)
	}
	if mode := testenv.JournalMode(t, path); mode != "rollback" {
		t.Fatalf("journal mode %s, want rollback (DELETE)", mode)
	}
}

// OpenExisting of a multisqlite directory reads every namespace and leaves every file and directory
// under it as it was, byte for byte.
func TestOpenExisting_MultisqliteDirectoryIsLeftAsItWas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "multi")
	openFilled(t, "multisqlite://"+dir)
	before := testenv.FileDigests(t, dir)
	st := openExisting(t, "multisqlite://"+dir)
	walkAndRead(t, st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after OpenExisting: %v\nwant %v", after, before)
	}
	refusesWrites(t, "multisqlite://"+dir)
}

// OpenExisting of Redis reads every namespace and writes no key: not the layout marker on a prefix
// that has none (written there by a writer that never opened it, as a foreign writer or New does), nor
// anything on one that has it. The test's own database keeps its size.
func TestOpenExisting_RedisGetsNoNewKey(t *testing.T) {
	raw := testenv.RedisURL(t)
	opts, err := goredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	for _, marked := range []bool{false, true} {
		t.Run(fmt.Sprintf("marked=%v", marked), func(t *testing.T) {
			prefix := testenv.RedisPrefix(t, raw)
			url := testenv.WithQuery(t, raw, redis.PrefixParam, prefix)
			if marked {
				openFilled(t, url)
			} else {
				st, err := redis.New(t.Context(), c, &redis.Options{Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				fillLayers(t, st)
			}
			before, size := testenv.RedisKeys(t, c, prefix), c.DBSize(t.Context()).Val()
			if hasMarker := slices.Contains(before, prefix+"{strata}layout"); hasMarker != marked {
				t.Fatalf("keys before: %q; the test wants the marker %v", before, marked)
			}
			st := openExisting(t, url)
			walkAndRead(t, st)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if after := testenv.RedisKeys(t, c, prefix); !slices.Equal(before, after) {
				t.Fatalf("keys after OpenExisting: %q, want %q", after, before)
			}
			if after := c.DBSize(t.Context()).Val(); after != size {
				t.Fatalf("DBSIZE %d after OpenExisting, was %d", after, size)
			}
			refusesWrites(t, url)
		})
	}
}

// OpenExisting of PostgreSQL reads every namespace and creates nothing: a missing schema stays
// missing, and a filled one keeps its relations, its migration record and its rows.
func TestOpenExisting_PostgresIsLeftAsItWas(t *testing.T) {
	raw := testenv.PostgresURL(t)
	conn, err := pgx.Connect(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	missing := testenv.UniqueName("strata_test_missing_")
	if _, err := backends.OpenExisting(t.Context(), testenv.WithQuery(t, raw, "schema", missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenExisting of a missing schema: %v, want fs.ErrNotExist", err)
	}
	var exists bool
	if err := conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, missing).Scan(&exists); err != nil || exists {
		t.Fatalf("the missing schema after OpenExisting: exists %v, %v", exists, err)
	}

	schema := testenv.PostgresSchema(t, raw)
	url := testenv.WithQuery(t, raw, "schema", schema)
	openFilled(t, url)
	state := func() string {
		var relations, migrations, rows string
		q := pgx.Identifier{schema}.Sanitize()
		err := conn.QueryRow(t.Context(), `SELECT
			(SELECT string_agg(relname || ':' || relkind::text, ',' ORDER BY relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1),
			(SELECT string_agg(version::text, ',' ORDER BY version) FROM `+q+`.index_storage_migrations),
			(SELECT md5(string_agg(namespace || '/' || key || '/' || id || '/' || encode(value, 'hex'), ',' ORDER BY namespace, key, id)) FROM `+q+`.index_storage)`,
			schema).Scan(&relations, &migrations, &rows)
		if err != nil {
			t.Fatal(err)
		}
		return relations + "\n" + migrations + "\n" + rows
	}
	before := state()
	st := openExisting(t, url)
	walkAndRead(t, st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if after := state(); after != before {
		t.Fatalf("after OpenExisting:\n%s\nwant\n%s", after, before)
	}
	refusesWrites(t, url)
}

// On a read-only file system OpenExisting reads a SQLite file and a multisqlite directory a writer
// closed, and Open, which would write, fails saying the file system is read-only rather than "no such
// file or directory".
func TestOpenExisting_ReadOnlyFileSystem(t *testing.T) {
	dir, seal := testenv.ReadOnlyMount(t)
	file, multi := "sqlite://"+filepath.Join(dir, "strata.db"), "multisqlite://"+filepath.Join(dir, "multi")
	openFilled(t, file)
	openFilled(t, multi)
	seal()
	before := testenv.FileDigests(t, dir)
	for _, url := range []string{file, multi} {
		st := openExisting(t, url)
		walkAndRead(t, st)
		st.Close()
	}
	for _, url := range []string{file, "sqlite://" + filepath.Join(dir, "new.db"), multi + "/new"} {
		st, err := backends.Open(t.Context(), url, nil)
		if err == nil {
			st.Close()
		}
		if !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "read-only file system") || strings.Contains(err.Error(), "no such file") {
			t.Errorf("Open(%s) on a read-only file system: %v, want EROFS and no \"no such file\"", url, err)
		}
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("the read-only file system changed: %v", after)
	}
}
