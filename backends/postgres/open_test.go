package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/sweeper"
)

// withParams appends query parameters to a URL that may or may not have a query already.
func withParams(url string, params ...string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + strings.Join(params, "&")
}

func openLimiter(t *testing.T, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Open takes schema and max_concurrent_ops out of the URL and hands every other parameter to pgx: were
// either of ours sent to the server as a run-time parameter, the server would refuse the connection.
func TestOpen_ReadsItsParametersAndPassesTheRestToPgx(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, url)
	lim := openLimiter(t, withParams(url, "schema="+schema, "max_concurrent_ops=3", "search_path=", "application_name=strata-open-test"))
	if got := lim.LimiterStats().Limit; got != 3 {
		t.Fatalf("limit %d, want max_concurrent_ops=3", got)
	}
	if lim.Schema() != schema {
		t.Fatalf("store in schema %q, want schema %q", lim.Schema(), schema)
	}
	ctx := t.Context()
	if err := lim.Append(ctx, testNS, "k", 1, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if ok, err := lim.Exists(ctx, testNS, "k"); err != nil || !ok {
		t.Fatalf("Exists: %v, %v", ok, err)
	}
	var app, searchPath string
	if err := lim.Pool().QueryRow(ctx, "SELECT current_setting('application_name'), current_setting('search_path')").Scan(&app, &searchPath); err != nil {
		t.Fatal(err)
	}
	if app != "strata-open-test" || (searchPath != "" && searchPath != `""`) {
		t.Fatalf("run-time parameters application_name=%q search_path=%q: pgx did not get the other parameters", app, searchPath)
	}
}

func TestOpen_DefaultConcurrencyIsPoolSizeLessTwo(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, url)
	for _, c := range []struct {
		params []string
		want   int
	}{
		{[]string{"pool_max_conns=7"}, 5},
		{[]string{"pool_max_conns=2"}, 1},
		{[]string{"pool_max_conns=1"}, 1},
		{nil, postgres.DefaultPoolConns(0) - 2},
	} {
		lim := openLimiter(t, withParams(url, append(c.params, "schema="+schema)...))
		if got := lim.LimiterStats().Limit; got != c.want {
			t.Errorf("Open with %v: limit %d, want %d", c.params, got, c.want)
		}
	}
}

// The default max_concurrent_ops is never below the sweep's max_concurrency: the sweep's archives and
// the executor share the slots.
func TestOpen_DefaultConcurrencyIsAtLeastTheSweeps(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, url)
	if got := postgres.DefaultPoolConns(0) - 2; got < sweeper.DefaultMaxConcurrency {
		t.Fatalf("default max_concurrent_ops %d is below the sweep's default max_concurrency %d", got, sweeper.DefaultMaxConcurrency)
	}
	for _, c := range []struct {
		params  []string
		minOps  int
		atLeast int
		exactly int // 0: any limit ≥ atLeast
	}{
		{nil, 64, 64, 64},
		{nil, 4, 14, 0},
		{[]string{"pool_max_conns=7"}, 64, 64, 64},
		{[]string{"pool_max_conns=40"}, 8, 38, 38},
		{[]string{"max_concurrent_ops=3"}, 64, 3, 3}, // what the URL sets explicitly stands
	} {
		st, err := postgres.New(t.Context(), withParams(url, append(c.params, "schema="+schema)...), &postgres.Options{MinConcurrentOps: c.minOps})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if got := st.LimiterStats().Limit; got < c.atLeast || (c.exactly > 0 && got != c.exactly) {
			t.Errorf("%v, max_concurrency %d: limit %d, want at least %d (exactly %d)", c.params, c.minOps, got, c.atLeast, c.exactly)
		}
	}
	if _, err := postgres.New(t.Context(), url+"&pool_max_conns=many", &postgres.Options{MinConcurrentOps: 4}); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("pool_max_conns=many: %v, want ErrInvalidArgument", err)
	}
}

func TestOpen_RejectsBadParametersNamingThem(t *testing.T) {
	// Nothing listens on port 1: a URL that got past parsing would fail to connect, not as invalid.
	const base = "postgres://postgres@127.0.0.1:1/test?sslmode=disable"
	cases := []struct {
		url, names string
	}{
		{base + "&max_concurrent_ops=abc", "max_concurrent_ops"},
		{base + "&max_concurrent_ops=0", "max_concurrent_ops"},
		{base + "&max_concurrent_ops=-3", "max_concurrent_ops"},
		{base + "&max_concurrent_ops=2.5", "max_concurrent_ops"},
		{base + "&max_concurrent_ops=", "max_concurrent_ops"},
		{base + "&max_concurrent_ops=2&max_concurrent_ops=3", "max_concurrent_ops"},
		{base + "&schema=", "schema"},
		{base + "&schema=has%20space", "schema"},
		{base + "&schema=1digit", "schema"},
		{base + "&schema=a%22b", "schema"},
		{base + "&schema=semi%3Bcolon", "schema"},
		{base + "&schema=semi;colon", "URL query"},
		{base + "&schema=" + strings.Repeat("s", 64), "schema"},
		{base + "&schema=a&schema=b", "schema"},
		{"mysql://127.0.0.1/test", "postgres://"},
		{"host=127.0.0.1 dbname=test", "postgres://"},
	}
	for _, c := range cases {
		st, err := postgres.Open(t.Context(), c.url)
		if err == nil {
			st.Close()
			t.Errorf("Open(%q) succeeded", c.url)
			continue
		}
		if !errors.Is(err, is.ErrInvalidArgument) || !strings.Contains(err.Error(), c.names) {
			t.Errorf("Open(%q): %v; want ErrInvalidArgument naming %s", c.url, err, c.names)
		}
	}
	for _, schema := range []string{"has space", "x.y", `q"uote`} {
		_, err := postgres.New(t.Context(), base, &postgres.Options{Schema: schema})
		if !errors.Is(err, is.ErrInvalidArgument) || !strings.Contains(err.Error(), "schema") {
			t.Errorf("New with schema %q: %v; want ErrInvalidArgument naming the schema", schema, err)
		}
	}
}

// gate sits under the limiter and over the real store: it counts the Appends inside it, and holds
// each until the test opens the gate.
type gate struct {
	is.Storage
	entered chan struct{}
	open    chan struct{}

	mu                 sync.Mutex
	inside, mostAtOnce int
}

func (g *gate) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	g.mu.Lock()
	g.inside++
	g.mostAtOnce = max(g.mostAtOnce, g.inside)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inside--
		g.mu.Unlock()
	}()
	g.entered <- struct{}{}
	<-g.open
	return g.Storage.Append(ctx, ns, key, id, value)
}

func TestLimit_BoundsConcurrentOperationsOnTheStore(t *testing.T) {
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
	const limit, queued = 3, 5
	g := &gate{Storage: st, entered: make(chan struct{}, limit+queued), open: make(chan struct{})}
	lim := is.Limit(g, limit)
	ctx := t.Context()

	errs := make([]error, limit+queued)
	var wg sync.WaitGroup
	for i := range limit + queued {
		wg.Go(func() { errs[i] = lim.Append(ctx, testNS, fmt.Sprint("k", i), 1, nil) })
	}
	for range limit {
		<-g.entered
	}
	// The first `limit` calls are inside and held; the rest must be queued in the limiter, not inside.
	for lim.Stats().Waiting < queued {
		if ctx.Err() != nil {
			t.Fatalf("only %d calls queued: %+v", lim.Stats().Waiting, lim.Stats())
		}
		runtime.Gosched()
	}
	g.mu.Lock()
	inside := g.inside
	g.mu.Unlock()
	if inside != limit {
		t.Fatalf("%d calls inside the store with %d queued, want %d", inside, queued, limit)
	}
	close(g.open)
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		if ok, err := st.Exists(ctx, testNS, fmt.Sprint("k", i)); err != nil || !ok {
			t.Fatalf("k%d after its Append: %v, %v", i, ok, err)
		}
	}
	stats := lim.Stats()
	if g.mostAtOnce != limit || stats.MaxInFlight != limit {
		t.Fatalf("at most %d calls inside the store at once (limiter says %d), want exactly %d", g.mostAtOnce, stats.MaxInFlight, limit)
	}
	if stats.Acquired != limit+queued || stats.WaitTotal <= 0 || stats.Waiting != 0 || stats.InFlight != 0 {
		t.Fatalf("limiter stats %+v: want %d slots handed out, time spent waiting, none left waiting", stats, limit+queued)
	}
}
