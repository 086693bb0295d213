package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
)

// foreignMistakes are rows a foreign writer may try to add with types the contract forbids: each
// would strand data (a blob key never equals any text key; a text or real id is no int64 and sorts
// above every integer; id 0 or below is no id) or quietly change what was meant (an integer key).
var foreignMistakes = []struct {
	name, insert string
}{
	{"IntegerKey", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 5, 1, x'00')`},
	{"RealKey", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 1.5, 1, x'00')`},
	{"BlobKey", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', x'6b', 1, x'00')`},
	{"IntegerNamespace", `INSERT INTO index_storage (namespace, key, id, value) VALUES (7, 'k', 1, x'00')`},
	{"BlobNamespace", `INSERT INTO index_storage (namespace, key, id, value) VALUES (x'6e73', 'k', 1, x'00')`},
	{"TextID", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', 'seven', x'00')`},
	{"NumericTextID", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', '7', x'00')`},
	{"RealID", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', 2.5, x'00')`},
	{"WholeRealID", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', 3.0, x'00')`},
	{"BlobID", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', x'01', x'00')`},
	{"ZeroID", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', 0, x'00')`},
	{"NegativeID", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', -4, x'00')`},
	{"NullKey", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', NULL, 1, x'00')`},
	{"NullValue", `INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', 1, NULL)`},
}

// A foreign writer on the file (here a plain connection of its own, as another program's would be)
// that gets a type wrong has its INSERT refused by the engine, with a constraint error, and nothing is
// stored.
func TestSchema_RefusesWhatTheContractForbids(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.db")
	st := openFile(t, path, sqlite.Options{})
	if err := st.Append(t.Context(), "ns", "k", 1, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	foreign := rawDB(t, path)
	for _, m := range foreignMistakes {
		t.Run(m.name, func(t *testing.T) {
			_, err := foreign.ExecContext(t.Context(), m.insert)
			var se sqlite3.Error
			if !errors.As(err, &se) || se.Code != sqlite3.ErrConstraint {
				t.Fatalf("%s: %v, want the engine to refuse it with a constraint error", m.insert, err)
			}
		})
	}
	var n int
	if err := foreign.QueryRow(`SELECT COUNT(*) FROM index_storage`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after the refused inserts: %d, %v; want only the store's own", n, err)
	}
	// What the contract allows still goes in from outside, and reads back through the store.
	if _, err := foreign.Exec(`INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'k', 9223372036854775807, x'')`); err != nil {
		t.Fatalf("a valid foreign row: %v", err)
	}
	if e, ok, err := st.Last(t.Context(), "ns", "k"); err != nil || !ok || e.ID != is.MaxID {
		t.Fatalf("Last after a valid foreign row: %+v, %v, %v", e, ok, err)
	}
}

// schemaV1 is the table as schema version 1 made it, byte for byte: files written by earlier builds
// hold it.
const schemaV1 = `CREATE TABLE IF NOT EXISTS index_storage (
		namespace TEXT    NOT NULL,
		key       TEXT    NOT NULL,
		id        INTEGER NOT NULL,
		value     BLOB    NOT NULL,
		PRIMARY KEY (namespace, key, id)
	) WITHOUT ROWID`

// oldFile makes a file as an earlier build left it: the version 1 table, user_version 1, in WAL mode,
// holding rows (statements run on its own connection, closed before it returns).
func oldFile(t *testing.T, stmts ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.db")
	db := rawDB(t, path)
	for _, stmt := range append([]string{`PRAGMA journal_mode = WAL`, schemaV1, `PRAGMA user_version = 1`}, stmts...) {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// An old file is upgraded in place: every row is kept, byte for byte, and the checks hold afterwards.
func TestMigration_UpgradesAnOldFileKeepingEveryRow(t *testing.T) {
	path := oldFile(t,
		// 3 indexes over 2 namespaces, values empty, binary and text-looking, ids up to MaxID; a key
		// with the bytes LIKE and GLOB treat specially, and a non-ASCII one.
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500)
		 INSERT INTO index_storage (namespace, key, id, value) SELECT 'ns', 'agent:%_*?[\', i, randomblob(i % 50) FROM n`,
		`INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'agent:日本', 1, x''), ('ns', 'agent:日本', 9223372036854775807, x'00ff')`,
		`INSERT INTO index_storage (namespace, key, id, value) VALUES ('other/ns', 'k', 42, x'0102')`,
		// A scheduled-rows table may share the file; the upgrade leaves it alone.
		`CREATE TABLE scheduled_actions_migrations (version INTEGER PRIMARY KEY)`,
	)
	before := dumpRows(t, path)
	if len(before) != 503 {
		t.Fatalf("the old file holds %d rows, want 503", len(before))
	}
	st := openFile(t, path, sqlite.Options{})
	if got, err := st.Length(t.Context(), "ns", `agent:%_*?[\`); err != nil || got != 500 {
		t.Fatalf("Length after the upgrade: %d, %v", got, err)
	}
	if e, ok, err := st.Last(t.Context(), "ns", "agent:日本"); err != nil || !ok || e.ID != is.MaxID || string(e.Value) != "\x00\xff" {
		t.Fatalf("Last after the upgrade: %+v, %v, %v", e, ok, err)
	}
	if err := st.Append(t.Context(), "other/ns", "k", 41, nil); !errors.Is(err, is.ErrConflict) {
		t.Fatalf("Append below the last id after the upgrade: %v, want ErrConflict", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if after := dumpRows(t, path); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("rows changed by the upgrade: %d before, %d after", len(before), len(after))
	}
	db := rawDB(t, path)
	var version int
	var ddl string
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != sqlite.SchemaVersion {
		t.Fatalf("user_version after the upgrade: %d, %v", version, err)
	}
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'index_storage'`).Scan(&ddl); err != nil || !strings.Contains(ddl, "typeof(id) = 'integer'") {
		t.Fatalf("index_storage after the upgrade: %q, %v", ddl, err)
	}
	for _, m := range foreignMistakes {
		if _, err := db.Exec(m.insert); err == nil {
			t.Fatalf("%s after the upgrade: %s went in", m.name, m.insert)
		}
	}
	var tables int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'`).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("tables after the upgrade: %d, %v; want index_storage and the schedule's", tables, err)
	}
}

// An old file holding rows the new schema refuses is not upgraded: Open fails naming the problem and
// a row, and the file is left exactly as it was (nothing dropped); once the rows are repaired, it
// upgrades.
func TestMigration_RefusesAnOldFileWithRowsTheSchemaForbids(t *testing.T) {
	path := oldFile(t,
		`INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'good', 1, x'01'), ('ns', 'good', 2, x'02')`,
		`INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'poisoned', 'seven', x'00')`,
		`INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', x'626c6f62', 1, x'00')`,
		`INSERT INTO index_storage (namespace, key, id, value) VALUES ('ns', 'zero', 0, x'00')`,
	)
	before := dumpRows(t, path)
	_, err := sqlite.New(t.Context(), path, nil)
	if !errors.Is(err, sqlite.ErrRowsBreakSchema) || is.IsTransient(err) {
		t.Fatalf("Open of an old file with forbidden rows: %v, want ErrRowsBreakSchema", err)
	}
	for _, want := range []string{"migration 2", "3 rows", "Nothing was changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the error %q does not say %q", err, want)
		}
	}
	if after := dumpRows(t, path); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("the refused upgrade changed the rows:\n%q\nwant\n%q", after, before)
	}
	db := rawDB(t, path)
	var version int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != 1 {
		t.Fatalf("user_version after the refused upgrade: %d, %v; want 1", version, err)
	}
	// The repair docs/storage-format.md gives: find them with the same test, fix or delete them.
	if _, err := db.Exec(`DELETE FROM index_storage WHERE typeof(namespace) <> 'text' OR typeof(key) <> 'text' OR typeof(id) <> 'integer' OR id <= 0`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st := openFile(t, path, sqlite.Options{})
	if n, err := st.Length(t.Context(), "ns", "good"); err != nil || n != 2 {
		t.Fatalf("after the repair: Length %d, %v", n, err)
	}
}

// A file whose table was made by hand from the version 1 DDL, with no version, upgrades too.
func TestMigration_UpgradesAHandMadeTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "by-hand.db")
	db := rawDB(t, path)
	if _, err := db.Exec(`CREATE TABLE index_storage (namespace TEXT NOT NULL, key TEXT NOT NULL, id INTEGER NOT NULL,
		value BLOB NOT NULL, PRIMARY KEY (namespace, key, id)) WITHOUT ROWID`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO index_storage VALUES ('ns', 'k', 1, x'61'), ('ns', 'k', 2, x'62')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st := openFile(t, path, sqlite.Options{MustExist: true})
	if n, err := st.Length(t.Context(), "ns", "k"); err != nil || n != 2 {
		t.Fatalf("Length after upgrading a hand-made table: %d, %v", n, err)
	}
	if _, err := st.DB().Exec(`INSERT INTO index_storage VALUES ('ns', 'k', 'three', x'63')`); err == nil {
		t.Fatal("a hand-made table, upgraded, still takes a text id")
	}
}

// rawDB opens path with a connection pool of its own, as another program would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// dumpRows lists every row of index_storage with its types, in primary key order.
func dumpRows(t *testing.T, path string) []string {
	t.Helper()
	db := rawDB(t, path)
	defer db.Close()
	rows, err := db.Query(`SELECT quote(namespace) || ' ' || quote(key) || ' ' || quote(id) || ' ' || quote(value) FROM index_storage ORDER BY namespace, key, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The SQLite DDL docs/storage-format.md gives, run by hand on a new file, is what this build makes:
// Open takes the file as it is (no rebuild: the table keeps its rows and its text), and the checks
// refuse every mistake.
func TestSchema_TheDocumentedDDLIsTheSchema(t *testing.T) {
	doc, err := os.ReadFile("../../docs/storage-format.md")
	if err != nil {
		t.Fatal(err)
	}
	var ddl string
	for _, block := range strings.Split(string(doc), "```sql\n")[1:] {
		if body, _, _ := strings.Cut(block, "```"); strings.HasPrefix(body, "-- sqlite: index_storage\n") {
			ddl = body
		}
	}
	if ddl == "" {
		t.Fatal("docs/storage-format.md has no block starting -- sqlite: index_storage")
	}
	path := filepath.Join(t.TempDir(), "by-hand.db")
	db := rawDB(t, path)
	if _, err := db.Exec(ddl); err != nil {
		t.Fatalf("the documented DDL: %v", err)
	}
	if _, err := db.Exec(`INSERT INTO index_storage VALUES ('ns', 'k', 1, x'61')`); err != nil {
		t.Fatal(err)
	}
	var before string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'index_storage'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st := openFile(t, path, sqlite.Options{MustExist: true})
	if n, err := st.Length(t.Context(), "ns", "k"); err != nil || n != 1 {
		t.Fatalf("Length on the documented DDL: %d, %v", n, err)
	}
	st.Close()
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	openFile(t, fresh, sqlite.Options{}).Close()
	var made string
	if err := rawDB(t, fresh).QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'index_storage'`).Scan(&made); err != nil {
		t.Fatal(err)
	}
	if squash(made) != squash(strings.Replace(before, "CREATE TABLE index_storage", "CREATE TABLE index_storage_v2", 1)) &&
		squash(made) != squash(before) {
		t.Fatalf("the documented DDL\n%s\nis not what a migration makes:\n%s", before, made)
	}
	for _, m := range foreignMistakes {
		if _, err := rawDB(t, path).Exec(m.insert); err == nil {
			t.Fatalf("%s: the documented DDL takes %s", m.name, m.insert)
		}
	}
}

// squash drops whitespace and the table name's quoting SQLite adds on a rename.
func squash(s string) string {
	s = strings.ReplaceAll(s, `"index_storage"`, "index_storage")
	s = strings.ReplaceAll(s, "index_storage_v2", "index_storage")
	return strings.Join(strings.Fields(s), "")
}
