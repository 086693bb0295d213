// Package testenv finds the services tests run against. Postgres and Redis tests read
// STRATA_TEST_POSTGRES_URL and STRATA_TEST_REDIS_URL: unset, the test is skipped with a message naming
// the variable, unless CI=true, where a missing service fails the test so a broken CI setup can never
// pass silently. A set URL must point at a loopback address; if its server does not answer, the helper
// starts the machine's own server once (the commands DEVELOPERS.md gives) before giving up.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stratalog/strata/indexedstorage/storagetest"
)

const (
	PostgresEnv = "STRATA_TEST_POSTGRES_URL"
	RedisEnv    = "STRATA_TEST_REDIS_URL"
)

// services names the server each variable points the tests at, for the skip announcement.
var services = map[string]string{PostgresEnv: "PostgreSQL", RedisEnv: "Redis", RedisClusterEnv: "a Redis Cluster",
	S3Env: "an S3-protocol server"}

// InCI reports whether CI=true, where a missing service is a failure rather than a skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// PostgresURL returns STRATA_TEST_POSTGRES_URL, skipping or failing the test when it is unset.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	return serviceURL(tb, PostgresEnv, "5432",
		"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start")
}

// RedisURL returns STRATA_TEST_REDIS_URL, skipping or failing the test when it is unset, with its
// database number replaced by one this test process holds alone (see claimRedisDB).
func RedisURL(tb testing.TB) string {
	tb.Helper()
	raw := serviceURL(tb, RedisEnv, "6379",
		`redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no`)
	redisDB.once.Do(func() { redisDB.url, redisDB.err = claimRedisDB(raw) })
	if redisDB.err != nil {
		tb.Fatalf("%s: %v", RedisEnv, redisDB.err)
	}
	return redisDB.url
}

var redisDB struct {
	once sync.Once
	url  string
	err  error
	lock *os.File // held open for the life of the process
}

// claimRedisDB gives this process a Redis database of its own among 1–15, held by an flock on a file
// in the temporary directory until the process exits. Key prefixes already isolate tests, but a SCAN
// costs time in proportion to every key in its database: without this, a package that writes 100,000
// keys would slow another package's walks, which go test runs at the same time, to a crawl. When all
// fifteen are taken, the process shares the configured database, prefixes still keeping it correct.
func claimRedisDB(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	for db := 1; db < 16; db++ {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("strata-test-redis-db-%d.lock", db)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return "", err
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			redisDB.lock = f
			u.Path = fmt.Sprintf("/%d", db)
			return u.String(), nil
		}
		f.Close()
	}
	return raw, nil
}

var (
	startOnce sync.Map // env name → *startResult
)

type startResult struct {
	once sync.Once
	err  error
}

func serviceURL(tb testing.TB, env, defaultPort, startCommand string) string {
	tb.Helper()
	raw := envURL(tb, env, "set it to run this test against a real server")
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("%s=%q is not a URL: %v", env, raw, err)
	}
	requireLoopback(tb, env, u, defaultPort, startCommand)
	return raw
}

// envURL returns the variable env, skipping the test when it is unset (hint says how to run it), or
// failing it when CI=true.
func envURL(tb testing.TB, env, hint string) string {
	tb.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		if InCI() {
			tb.Fatalf("%s is not set; CI=true requires it (.ci/run exports it after starting the service)", env)
		}
		announceSkip(env, fmt.Sprintf("skipped the tests that need %s: %s is not set (README, \"Two commands\", says how)", services[env], env))
		tb.Skipf("%s is not set; %s", env, hint)
	}
	return raw
}

// requireLoopback fails the test unless u's host (env's server) is a loopback address that answers on
// its port (defaultPort if none); if nothing answers and startCommand is set, it runs that once first.
func requireLoopback(tb testing.TB, env string, u *url.URL, defaultPort, startCommand string) {
	tb.Helper()
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = defaultPort
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		tb.Fatalf("%s points at %q: tests only ever talk to loopback addresses", env, host)
	}
	addr := net.JoinHostPort(host, port)
	r, _ := startOnce.LoadOrStore(env, &startResult{})
	res := r.(*startResult)
	res.once.Do(func() { res.err = ensureListening(addr, startCommand) })
	if res.err != nil {
		tb.Fatalf("%s: %v", env, res.err)
	}
}

// ensureListening dials addr and, if nothing answers, runs startCommand (if any) and waits for it to.
func ensureListening(addr, startCommand string) error {
	if err := dial(addr); err == nil {
		return nil
	} else if startCommand == "" {
		return fmt.Errorf("nothing answers at %s: %v", addr, err)
	}
	out, err := exec.Command("sh", "-c", startCommand).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nothing listens on %s and %q failed: %v: %s", addr, startCommand, err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := dial(addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("started with %q, but %s still does not answer: %v", startCommand, addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func dial(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// UniqueName returns prefix followed by random hex, for a test's own schema, database or key prefix.
func UniqueName(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return prefix + hex.EncodeToString(b[:])
}

// Context returns a context for cleanup work, which runs after the test's own context is cancelled.
func Context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// PositiveInt returns the environment variable name read as a positive integer, or def when it is
// unset; any other value fails the test, naming the variable.
func PositiveInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	raw := os.Getenv(name)
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, raw)
	}
	return n
}

// WithQuery returns the URL raw with its query parameter name set to value.
func WithQuery(tb testing.TB, raw, name, value string) string {
	tb.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// LongEnv turns on the long runs: STRATA_TEST_LONG=1 (test/long.sh sets it, and .ci/run runs that).
const LongEnv = storagetest.LongEnv

// Long reports whether this is the long run (STRATA_TEST_LONG=1 and not -short). The default, what
// `go test ./...` runs, is the quick mode: every package and every conformance check, with a tenth of
// the random cases and without the runs that cost minutes each. The conformance suite reads the same
// switch.
func Long() bool { return storagetest.Long() }

// SkipUnlessLong skips a test that costs minutes (a process crash loop, a black-holed store, a load run)
// outside the long run; test/long.sh runs them.
func SkipUnlessLong(tb testing.TB, what string) {
	tb.Helper()
	if !Long() {
		announceSkip(LongEnv, "the long runs (SIGKILL loops, black-holed stores, load runs, every-call crash windows "+
			"on every engine, full random rounds) are skipped: test/long.sh runs them (STRATA_TEST_LONG=1)")
		tb.Skipf("quick mode: skipping %s (%s=1 runs it; test/long.sh)", what, LongEnv)
	}
}

// In the quick mode, the temporary files of every test that imports this package (t.TempDir, the
// SQLite files, blob directories and Redis locks made under it) live on the memory file system
// /dev/shm where the machine has one and TMPDIR is not set: the quick mode checks contracts, none of
// which depends on what fsync costs on the machine's disk, and fsync is most of what multi-file SQLite
// costs there (20 s against 7 s for its package). SIGKILL, the crash the tests make, keeps what a
// process wrote either way; no test cuts power. The long run (STRATA_TEST_LONG=1) stays on the disk.
// Read at start-up, before flags are parsed, so the mode is read from the variable alone.
func init() {
	if v := os.Getenv(LongEnv); v == "1" || v == "true" || os.Getenv("TMPDIR") != "" {
		return
	}
	dir := "/dev/shm/strata-test"
	if err := os.MkdirAll(dir, 0o1777); err != nil {
		return
	}
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		f.Close()
		os.Remove(f.Name())
		os.Setenv("TMPDIR", dir)
	}
}
