package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// batchFixture is one namespace's indexes for the batch tests: each key and its entries.
var batchFixture = []struct {
	key     string
	entries []is.Entry
}{
	{"missing", nil},
	{"one", []is.Entry{{ID: 5, Value: []byte("five")}}},
	{"hundred", entriesFrom(1, 100)},
	{"at-max", []is.Entry{{ID: 1, Value: []byte("a")}, {ID: 2, Value: nil}, {ID: is.MaxID, Value: []byte("max")}}},
	{"sparse", []is.Entry{{ID: 10, Value: []byte("x")}, {ID: 20, Value: []byte("y")}, {ID: 30, Value: []byte("z")}}},
	{"KEY/with%odd_chars*[x]", entriesFrom(7, 9)},
}

func fill(t *testing.T, st is.Storage, ns string, key string, entries []is.Entry) {
	t.Helper()
	if len(entries) == 0 {
		return
	}
	if err := st.AppendMany(t.Context(), ns, key, entries); err != nil {
		t.Fatalf("AppendMany(%s, %q): %v", ns, key, err)
	}
}

// ClosestLastMany hands back, key by key and in request order, what ClosestLast hands back for that
// key: missing keys, ids at and above MaxID, ids between entries, and a key of many entries.
func TestClosestLastMany_EqualsClosestLastPerKey(t *testing.T) {
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
	ctx := t.Context()
	for _, f := range batchFixture {
		fill(t, st, testNS, f.key, f.entries)
	}
	fill(t, st, testNS, "many", entriesFrom(1, 12_001))
	keys := []string{"many"}
	for _, f := range batchFixture {
		keys = append(keys, f.key)
	}
	ids := []uint64{0, 1, 2, 5, 6, 15, 30, 31, 100, 101, 6_000, 12_001, is.MaxID - 1, is.MaxID, is.MaxID + 1, math.MaxUint64}

	check := func(reqs []is.KeyID) {
		t.Helper()
		got, err := st.ClosestLastMany(ctx, testNS, reqs)
		if err != nil {
			t.Fatalf("ClosestLastMany(%v): %v", reqs, err)
		}
		if len(got) != len(reqs) {
			t.Fatalf("ClosestLastMany: %d results for %d keys", len(got), len(reqs))
		}
		for i, r := range reqs {
			var want is.ClosestLastResult
			want.Entry, want.Found, want.Last, want.Exists, want.Err = st.ClosestLast(ctx, testNS, r.Key, r.ID)
			if want.Err != nil {
				t.Fatalf("ClosestLast(%q, %d): %v", r.Key, r.ID, want.Err)
			}
			g := got[i]
			if g.Err != nil || g.Found != want.Found || g.Exists != want.Exists || g.Last != want.Last ||
				g.Entry.ID != want.Entry.ID || string(g.Entry.Value) != string(want.Entry.Value) ||
				(g.Found && g.Entry.Value == nil) {
				t.Errorf("key %q id %d: batch %+v, per key %+v", r.Key, r.ID, g, want)
			}
		}
	}
	// Every key with the same id, in both orders, then every key with its own id.
	for _, id := range ids {
		var reqs []is.KeyID
		for _, k := range keys {
			reqs = append(reqs, is.KeyID{Key: k, ID: id})
		}
		check(reqs)
		slices.Reverse(reqs)
		check(reqs)
	}
	var mixed []is.KeyID
	for i, k := range keys {
		mixed = append(mixed, is.KeyID{Key: k, ID: ids[(i*5)%len(ids)]})
	}
	check(mixed)

	got, err := st.ClosestLastMany(ctx, testNS, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("ClosestLastMany of no keys: %v, %v; want no results and no error", got, err)
	}
}

// DropPrefixMany drops, key by key, what DropPrefix drops of the same data, leaves what it leaves, and
// counts the same: missing keys, upTo 0, MaxID and above, a key of more entries than one statement
// deletes, and more entries in all than one round takes.
func TestDropPrefixMany_EqualsDropPrefixPerKey(t *testing.T) {
	trace := &statements{}
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)), func(c *pgxpool.Config) { c.ConnConfig.Tracer = trace })
	ctx := t.Context()
	const batchNS, perKeyNS = "test/batch", "test/perkey"
	type drop struct {
		key     string
		entries []is.Entry
		upTo    uint64
	}
	var drops []drop
	for _, f := range batchFixture {
		for j, upTo := range []uint64{0, 1, 5, 20, 50, 100, is.MaxID - 1, is.MaxID, math.MaxUint64} {
			drops = append(drops, drop{fmt.Sprintf("%s#%d", f.key, j), f.entries, upTo})
		}
	}
	drops = append(drops,
		drop{"many-partly", entriesFrom(1, 12_001), 11_000}, // more than one statement's worth: dropped on its own
		drop{"many-all", entriesFrom(1, 6_000), is.MaxID},
	)
	// Five keys of 4,500 each: more than one round's bound in all, so the last ones take a second round.
	for i := range 5 {
		drops = append(drops, drop{fmt.Sprintf("round-%d", i), entriesFrom(1, 4_500), 4_000 + uint64(i)*200})
	}
	for _, d := range drops {
		fill(t, st, batchNS, d.key, d.entries)
		fill(t, st, perKeyNS, d.key, d.entries)
	}
	reqs := make([]is.KeyID, len(drops))
	for i, d := range drops {
		reqs[i] = is.KeyID{Key: d.key, ID: d.upTo}
	}
	trace.take()
	got, err := st.DropPrefixMany(ctx, batchNS, reqs)
	if err != nil {
		t.Fatalf("DropPrefixMany: %v", err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("DropPrefixMany: %d results for %d keys", len(got), len(reqs))
	}
	// The bounds took effect: two rounds (round-4 waits for the second), and the two keys of more
	// than 5,000 entries each in a transaction of its own (BEGIN, its lock, its first batch). The first
	// round counts its keys' entries (upTo MaxID says nothing of them); the second, round-4 alone, whose
	// upTo bounds it within one statement, drops with no count (sqlDropManyWithin).
	var rounds []string
	own := 0
	for _, sent := range trace.take() {
		switch {
		case len(sent) == 2 && strings.Contains(sent[1], "chosen"):
			rounds = append(rounds, "counted")
		case len(sent) == 2 && strings.Contains(sent[1], "DELETE"):
			rounds = append(rounds, "within")
		case len(sent) == 3 && sent[0] == "begin":
			own++
		}
	}
	if !slices.Equal(rounds, []string{"counted", "within"}) || own != 2 {
		t.Errorf("the batch ran rounds %v and %d drops of their own, want [counted within] and 2", rounds, own)
	}
	for i, d := range drops {
		want, err := st.DropPrefix(ctx, perKeyNS, d.key, d.upTo)
		if err != nil {
			t.Fatalf("DropPrefix(%q, %d): %v", d.key, d.upTo, err)
		}
		if got[i].Err != nil || got[i].Dropped != want {
			t.Errorf("key %q upTo %d: batch dropped %d (%v), DropPrefix %d", d.key, d.upTo, got[i].Dropped, got[i].Err, want)
		}
		batchLeft, perKeyLeft := readAll(t, st, batchNS, d.key), readAll(t, st, perKeyNS, d.key)
		if !slices.EqualFunc(batchLeft, perKeyLeft, func(a, b is.Entry) bool { return a.ID == b.ID && string(a.Value) == string(b.Value) }) {
			t.Errorf("key %q upTo %d: batch left %d entries, DropPrefix %d", d.key, d.upTo, len(batchLeft), len(perKeyLeft))
		}
		exists, err := st.Exists(ctx, batchNS, d.key)
		if err != nil || exists != (len(perKeyLeft) > 0) {
			t.Errorf("key %q upTo %d: Exists after the batch %v (%v), want %v", d.key, d.upTo, exists, err, len(perKeyLeft) > 0)
		}
	}

	got, err = st.DropPrefixMany(ctx, batchNS, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("DropPrefixMany of no keys: %v, %v; want no results and no error", got, err)
	}
}

func readAll(t *testing.T, st is.Storage, ns, key string) []is.Entry {
	t.Helper()
	entries, err := st.Read(t.Context(), ns, key, 0, is.MaxID)
	if err != nil {
		t.Fatalf("Read(%s, %q): %v", ns, key, err)
	}
	return entries
}

// statements records the statements a pool sends, one round trip at a time: a query alone, or a batch
// of queries (pings left out).
type statements struct {
	mu      sync.Mutex
	sent    [][]string // each round trip's statements
	current []string   // the batch being sent
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !strings.HasPrefix(data.SQL, "-- ping") {
		s.mu.Lock()
		s.sent = append(s.sent, []string{data.SQL})
		s.mu.Unlock()
	}
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.mu.Lock()
	s.current = []string{}
	s.mu.Unlock()
	return ctx
}

func (s *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	s.mu.Lock()
	s.current = append(s.current, data.SQL)
	s.mu.Unlock()
}

func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	s.mu.Lock()
	s.sent = append(s.sent, s.current)
	s.current = nil
	s.mu.Unlock()
}

// take returns the round trips recorded so far and forgets them.
func (s *statements) take() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent := s.sent
	s.sent = nil
	return sent
}

// A batch is one round trip: ClosestLastMany one statement, DropPrefixMany one pipeline of its locks
// and its delete (one implicit transaction, one commit), however many keys, through one slot of the
// Store's limit.
func TestBatch_OneRoundTripForTheWholeBatch(t *testing.T) {
	trace := &statements{}
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)), func(c *pgxpool.Config) { c.ConnConfig.Tracer = trace })
	ctx := t.Context()
	var reqs []is.KeyID
	for i := range 128 {
		key := fmt.Sprintf("agent-%03d", i)
		fill(t, st, testNS, key, entriesFrom(1, uint64(1+i%7)))
		reqs = append(reqs, is.KeyID{Key: key, ID: 1})
	}
	before := st.LimiterStats()
	trace.take()

	if _, err := st.ClosestLastMany(ctx, testNS, reqs); err != nil {
		t.Fatal(err)
	}
	if sent := trace.take(); len(sent) != 1 || len(sent[0]) != 1 {
		t.Fatalf("ClosestLastMany of %d keys sent %d round trips %q, want one statement", len(reqs), len(sent), sent)
	}

	for i := range reqs {
		reqs[i].ID = 3
	}
	got, err := st.DropPrefixMany(ctx, testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sent := trace.take()
	if len(sent) != 1 || len(sent[0]) != 2 || !strings.Contains(sent[0][0], "pg_advisory_xact_lock") || !strings.Contains(sent[0][1], "DELETE") {
		t.Fatalf("DropPrefixMany of %d keys sent %d round trips %q, want one: the locks and one DELETE", len(reqs), len(sent), sent)
	}
	for i, r := range got {
		if want := min(uint64(1+i%7), 3); r.Err != nil || r.Dropped != want {
			t.Errorf("key %q: dropped %d (%v), want %d", reqs[i].Key, r.Dropped, r.Err, want)
		}
	}
	if after := st.LimiterStats(); after.Acquired-before.Acquired != 2 {
		t.Fatalf("the two batches took %d slots of the limit, want 2", after.Acquired-before.Acquired)
	}
}

// A batch drop racing Appends above its upTo on the same keys loses none of them, and counts each
// entry ≤ upTo exactly once over the rounds.
func TestDropPrefixMany_RacingAppendsAboveUpToLoseNothing(t *testing.T) {
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
	ctx := t.Context()
	const keys, rounds = 8, 40
	last := make([]atomic.Uint64, keys) // the last id each appender's Append returned for
	stop := make(chan struct{})
	var wg sync.WaitGroup
	appendErr := make(chan error, keys)
	for k := range keys {
		wg.Go(func() {
			for id := uint64(1); ; id++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := st.Append(ctx, testNS, fmt.Sprint("k", k), id, fmt.Appendf(nil, "v%d", id)); err != nil {
					appendErr <- fmt.Errorf("Append(k%d, %d): %w", k, id, err)
					return
				}
				last[k].Store(id)
			}
		})
	}
	dropped := make([]uint64, keys)
	upTo := make([]uint64, keys)
	for range rounds {
		reqs := make([]is.KeyID, keys)
		for k := range keys {
			upTo[k] = last[k].Load() // appended before the drop starts: every later Append is above it
			reqs[k] = is.KeyID{Key: fmt.Sprint("k", k), ID: upTo[k]}
		}
		got, err := st.DropPrefixMany(ctx, testNS, reqs)
		if err != nil {
			t.Fatalf("DropPrefixMany: %v", err)
		}
		for k, r := range got {
			if r.Err != nil {
				t.Fatalf("key k%d: %v", k, r.Err)
			}
			dropped[k] += r.Dropped
		}
	}
	close(stop)
	wg.Wait()
	close(appendErr)
	for err := range appendErr {
		t.Fatal(err)
	}
	for k := range keys {
		if dropped[k] != upTo[k] {
			t.Errorf("key k%d: the drops counted %d entries, want %d (ids 1..%d)", k, dropped[k], upTo[k], upTo[k])
		}
		left := readAll(t, st, testNS, fmt.Sprint("k", k))
		want := span(upTo[k]+1, last[k].Load())
		ids := make([]uint64, len(left))
		for i, e := range left {
			ids[i] = e.ID
			if string(e.Value) != fmt.Sprintf("v%d", e.ID) {
				t.Errorf("key k%d id %d holds %q", k, e.ID, e.Value)
			}
		}
		if !slices.Equal(ids, want) {
			t.Errorf("key k%d: holds %d entries after the drops, want ids %d..%d", k, len(ids), upTo[k]+1, last[k].Load())
		}
	}
}

// Two batches of the same keys in opposite orders, racing, never deadlock (40P01 would fail one of them
// as transient): each takes the locks in one global order. Of the two, each entry is counted once.
func TestDropPrefixMany_OppositeOrdersNeverDeadlock(t *testing.T) {
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
	ctx := t.Context()
	// Enough keys that the two batches' locks overlap in time: without the order, most rounds deadlock.
	const keys, rounds, perKey = 1000, 20, 3
	forward := make([]is.KeyID, keys)
	names := make([]string, keys)
	for k := range keys {
		names[k] = fmt.Sprintf("k%04d", k)
		forward[k] = is.KeyID{Key: names[k], ID: is.MaxID}
	}
	backward := slices.Clone(forward)
	slices.Reverse(backward)
	for round := range rounds {
		// Every key gets perKey entries, in one statement.
		if _, err := st.Pool().Exec(ctx, `INSERT INTO `+st.Table()+` (namespace, key, id, value)
			SELECT $1, k, i, '\x00'::bytea FROM unnest($2::text[]) AS k, generate_series($3::bigint, $4::bigint) AS i`,
			testNS, names, round*perKey+1, (round+1)*perKey); err != nil {
			t.Fatal(err)
		}
		var results [2][]is.DropResult
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for side, reqs := range [2][]is.KeyID{forward, backward} {
			wg.Go(func() {
				<-start
				results[side], errs[side] = st.DropPrefixMany(ctx, testNS, reqs)
			})
		}
		close(start)
		wg.Wait()
		for side, err := range errs {
			if err != nil {
				t.Fatalf("round %d: batch %d: %v", round, side, err)
			}
		}
		for k := range keys {
			f, b := results[0][k], results[1][keys-1-k]
			if f.Err != nil || b.Err != nil || f.Dropped+b.Dropped != perKey {
				t.Fatalf("round %d key %q: the batches dropped %d (%v) and %d (%v), want %d in all",
					round, forward[k].Key, f.Dropped, f.Err, b.Dropped, b.Err, perKey)
			}
		}
	}
}

// A batch drop takes the very lock Append takes, and reads what to delete only once it holds it: an
// Append that commits while the drop waits for the lock, and that a reader has seen, is dropped too
// (DESIGN §10). A drop whose DELETE took its snapshot before the lock would leave that entry behind,
// though it is ≤ upTo and was read before the drop returned.
func TestDropPrefixMany_DropsAnAppendCommittedWhileItWaitedForTheLock(t *testing.T) {
	url := testenv.PostgresURL(t)
	st := newStore(t, testenv.PostgresSchema(t, url))
	ctx := t.Context()
	fill(t, st, testNS, "k", entriesFrom(1, 5))
	fill(t, st, testNS, "other", entriesFrom(1, 2))

	// Another session plays an Append in progress: it holds k's lock, then inserts id 6.
	appender, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer appender.Close(ctx)
	lockName := st.Schema() + "." + testNS + ":k"
	if _, err := appender.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended($1, 0))", lockName); err != nil {
		t.Fatal(err)
	}
	var pid uint32
	if err := appender.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}

	type result struct {
		got []is.DropResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := st.DropPrefixMany(ctx, testNS, []is.KeyID{{Key: "other", ID: 10}, {Key: "k", ID: 10}})
		done <- result{got, err}
	}()
	waitBlockedOrDone(t, st, pid, done)

	if _, err := appender.Exec(ctx, "INSERT INTO "+st.Table()+" (namespace, key, id, value) VALUES ($1, 'k', 6, 'v6')", testNS); err != nil {
		t.Fatal(err)
	}
	if got := readIDs(t, st, "k"); !slices.Equal(got, span(1, 6)) {
		t.Fatalf("a reader sees %v while the drop waits, want 1..6", got)
	}
	if _, err := appender.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended($1, 0))", lockName); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.got[0].Dropped != 2 || r.got[1].Dropped != 6 || r.got[0].Err != nil || r.got[1].Err != nil {
		t.Fatalf("DropPrefixMany: %+v, %v; want 2 and 6 dropped", r.got, r.err)
	}
	if ok, err := st.Exists(ctx, testNS, "k"); err != nil || ok {
		t.Fatalf("k after the drop: exists %v (%v), want it gone with id 6", ok, err)
	}
}

// waitBlockedOrDone returns once some session waits for a lock pid holds, and fails the test if the
// operation reports on done first (it did not wait for the lock).
func waitBlockedOrDone[T any](t *testing.T, st *postgres.Store, pid uint32, done chan T) {
	t.Helper()
	for {
		select {
		case r := <-done:
			t.Fatalf("the operation finished without waiting for the lock: %+v", r)
		default:
		}
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

func requireCallError(t *testing.T, name string, err, want error, op is.Operation, ns string) {
	t.Helper()
	var opErr *is.OpError
	if !errors.Is(err, want) || !errors.As(err, &opErr) || opErr.Op != op || opErr.Namespace != ns || opErr.Key != "" {
		t.Errorf("%s: %s: %v; want %v as an OpError of %s on %q with no key", name, op, err, want, op, ns)
	}
}

// A Store opened read-only refuses a batch drop, as it refuses DropPrefix.
func TestDropPrefixMany_ReadOnlyStoreRefuses(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, url)
	st := newStore(t, schema)
	fill(t, st, testNS, "k", entriesFrom(1, 3))
	ro, err := postgres.OpenExisting(t.Context(), url+"&schema="+schema)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, err = ro.DropPrefixMany(t.Context(), testNS, []is.KeyID{{Key: "k", ID: 3}})
	requireCallError(t, "read-only", err, is.ErrInvalidArgument, is.OpDropPrefixMany, testNS)
	if got := readIDs(t, st, "k"); !slices.Equal(got, span(1, 3)) {
		t.Fatalf("k after a read-only drop: %v, want 1..3", got)
	}
}
