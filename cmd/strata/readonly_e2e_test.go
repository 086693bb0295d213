package main

import (
	"bytes"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/redis"
	"github.com/stratalog/strata/backends/sqlite"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/oplog"
)

// The read-only commands, strata scan and strata inspect, run as an operator runs them, leave the
// stores they read as they found them. Each test fills a store through the library, closes it, and
// compares the store before and after the commands.

// roCommand runs the binary with args and returns its exit code, stdout and stderr.
func roCommand(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := 0
	if err := cmd.Run(); err != nil {
		exitErr, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = exitErr.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// roConfig writes a config naming storage, and a blob directory under dir, which it makes.
func roConfig(t *testing.T, dir, storage string) string {
	t.Helper()
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "strata.toml")
	cfg := fmt.Sprintf("[storage]\nurl = %q\n[schedule]\nurl = \"memory://\"\n[blob]\nurl = %q\n[http]\nlisten = \"127.0.0.1:0\"\n",
		storage, "fs://"+blobs)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// roFill stores three agents of four entries each in compressed level 1 (ephemeral), through st.
func roFill(t *testing.T, st is.Storage, blobDir string) []oplog.AgentID {
	t.Helper()
	blobs, err := fsblob.New(t.Context(), blobDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := archive.DefaultStack(st, blobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var agents []oplog.AgentID
	for i := range 3 {
		a := oplog.AgentID{Component: "shop", Name: fmt.Sprintf("cart-%d", i)}
		var batch []oplog.Entry
		for j := 1; j <= 4; j++ {
			batch = append(batch, oplog.Entry{Index: oplog.Index(j), Payload: fmt.Appendf(nil, "%s#%d", a.Key(), j)})
		}
		if err := stack.Append(t.Context(), a, oplog.Ephemeral, batch); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	return agents
}

// roCommands runs strata scan and strata inspect of each agent and checks they list what roFill
// stored.
func roCommands(t *testing.T, config string, agents []oplog.AgentID) {
	t.Helper()
	code, out, errOut := roCommand(t, "scan", "--config", config)
	for _, a := range agents {
		if code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(a.Key())+`\s+4$`).MatchString(out) {
			t.Fatalf("strata scan: exit %d, %s\n%s", code, out, errOut)
		}
	}
	for _, a := range agents {
		code, out, errOut := roCommand(t, "inspect", "--config", config, a.Key())
		if code != 0 || !regexp.MustCompile(`compressed-1\s+1\s+4\s+4`).MatchString(out) {
			t.Fatalf("strata inspect %s: exit %d, %s\n%s", a, code, out, errOut)
		}
	}
}

// strata scan and inspect over a SQLite file leave its directory byte for byte as it was, the file in
// its journal mode and at its schema version, with no -wal, -shm or other file created: a file strata
// wrote and closed (WAL mode), and one a foreign tool turned back to a rollback journal at schema
// version 1 (an open for writing would switch it to WAL and migrate it).
func TestBinary_ReadOnlyCommandsLeaveASQLiteFileAsItWas(t *testing.T) {
	for _, c := range []struct {
		name, mode string
		stmts      []string
	}{
		{"written by strata", "wal", nil},
		{"rollback journal at version 1", "rollback", []string{`PRAGMA journal_mode = DELETE`, `PRAGMA user_version = 1`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "strata.db")
			st, err := sqlite.New(t.Context(), path, nil)
			if err != nil {
				t.Fatal(err)
			}
			config := roConfig(t, dir, "sqlite://"+path)
			agents := roFill(t, st, filepath.Join(dir, "blobs"))
			st.Close()
			execSQLite(t, path, c.stmts...)
			before := testenv.FileDigests(t, dir)
			if mode := testenv.JournalMode(t, path); mode != c.mode {
				t.Fatalf("journal mode %s before the commands, want %s", mode, c.mode)
			}
			roCommands(t, config, agents)
			if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
				t.Fatalf("after strata scan and inspect: %v\nwant %v", after, before)
			}
			if mode := testenv.JournalMode(t, path); mode != c.mode {
				t.Fatalf("journal mode %s after strata scan and inspect, want %s", mode, c.mode)
			}
		})
	}
}

// execSQLite runs statements on the SQLite file at path through a connection of its own, as a foreign
// tool does, and closes it.
func execSQLite(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range stmts {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// strata scan and inspect, and verify, compact, erase and gc, over a SQLite database of someone else's
// (a rollback journal, no index_storage) fail saying what is missing, and leave it byte for byte as it
// was, in its own journal mode: no index_storage created, no switch to WAL.
func TestBinary_ReadOnlyCommandsLeaveAForeignSQLiteDatabaseAsItWas(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "shop.db")
	execSQLite(t, path, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total)`, `INSERT INTO orders (total) VALUES (42)`)
	config := roConfig(t, dir, "sqlite://"+path)
	before := testenv.FileDigests(t, dir)
	for _, args := range [][]string{{"scan", "--config", config}, {"inspect", "--config", config, "shop:cart"},
		{"verify", "--config", config}, {"compact", "--config", config}, {"erase", "--config", config, "shop:cart"},
		{"gc", "--config", config}} {
		code, out, errOut := roCommand(t, args...)
		if code == 0 || !strings.Contains(errOut, "index_storage") {
			t.Fatalf("strata %s over a foreign database: exit %d, %s\n%s", args[0], code, out, errOut)
		}
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("after strata scan and inspect: %v\nwant %v", after, before)
	}
	if mode := testenv.JournalMode(t, path); mode != "rollback" {
		t.Fatalf("journal mode %s after strata scan and inspect, want rollback (DELETE)", mode)
	}
}

// strata scan and inspect over Redis write no key: the prefix, filled by a writer that never opened
// it (so without the layout marker), keeps its keys, and the test's database its size.
func TestBinary_ReadOnlyCommandsWriteNoRedisKey(t *testing.T) {
	raw := testenv.RedisURL(t)
	prefix := testenv.RedisPrefix(t, raw)
	opts, err := goredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	dir := t.TempDir()
	config := roConfig(t, dir, testenv.WithQuery(t, raw, redis.PrefixParam, prefix))
	st, err := redis.New(t.Context(), c, &redis.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	agents := roFill(t, st, filepath.Join(dir, "blobs"))
	keys := func() []string { return testenv.RedisKeys(t, c, prefix) }
	before, size := keys(), c.DBSize(t.Context()).Val()
	roCommands(t, config, agents)
	if after := keys(); !slices.Equal(before, after) {
		t.Fatalf("keys under the prefix after strata scan and inspect: %q\nwant %q", after, before)
	}
	if after := c.DBSize(t.Context()).Val(); after != size {
		t.Fatalf("DBSIZE %d after strata scan and inspect, was %d", after, size)
	}
}

// On a read-only file system strata scan and inspect read a SQLite file, and strata run, which would
// write, fails saying the file system is read-only, not "no such file or directory".
func TestBinary_ReadOnlyFileSystem(t *testing.T) {
	dir, seal := testenv.ReadOnlyMount(t)
	path := filepath.Join(dir, "strata.db")
	st, err := sqlite.New(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	config := roConfig(t, dir, "sqlite://"+path)
	agents := roFill(t, st, filepath.Join(dir, "blobs"))
	st.Close()
	seal()
	before := testenv.FileDigests(t, dir)
	roCommands(t, config, agents)
	code, _, errOut := roCommand(t, "run", "--config", config)
	if code == 0 || !strings.Contains(errOut, "read-only file system") || strings.Contains(errOut, "no such file") {
		t.Fatalf("strata run on a read-only file system: exit %d\n%s", code, errOut)
	}
	if after := testenv.FileDigests(t, dir); !maps.Equal(before, after) {
		t.Fatalf("the read-only file system changed: %v", after)
	}
}
