package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stratalog/strata/backends/postgres"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// A key whose first id is not above its last fails alone, in the middle of a batch: its index is
// untouched and its error names it and its last id, while the keys before and after it are appended.
func TestAppendKeys_ConflictInTheMiddleFailsThatKeyOnly(t *testing.T) {
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
	fill(t, st, testNS, "a", entriesFrom(1, 2))
	fill(t, st, testNS, "b", entriesFrom(1, 5))
	errs, err := st.AppendKeys(t.Context(), testNS, []is.KeyEntries{
		{Key: "a", Entries: entriesFrom(3, 4)},
		{Key: "b", Entries: entriesFrom(5, 7)},
		{Key: "c", Entries: entriesFrom(1, 1)},
		{Key: "empty", Entries: nil},
	})
	if err != nil || len(errs) != 4 {
		t.Fatalf("AppendKeys: %v, %v; want four parts", errs, err)
	}
	var opErr *is.OpError
	if !errors.Is(errs[1], is.ErrConflict) || !errors.As(errs[1], &opErr) || opErr.Op != is.OpAppendKeys || opErr.Key != "b" ||
		!strings.Contains(errs[1].Error(), "last id 5") {
		t.Fatalf("b's part: %v; want ErrConflict as an OpError of append_keys naming b and its last id 5", errs[1])
	}
	if errs[0] != nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("the other parts: %v, %v, %v; want nil", errs[0], errs[2], errs[3])
	}
	for key, want := range map[string][]uint64{"a": span(1, 4), "b": span(1, 5), "c": span(1, 1)} {
		if got := readIDs(t, st, key); !slices.Equal(got, want) {
			t.Errorf("%s after the batch: %v, want %v", key, got, want)
		}
	}
	if ok, err := st.Exists(t.Context(), testNS, "empty"); err != nil || ok {
		t.Errorf("a key with nothing to append exists %v (%v) after the batch", ok, err)
	}
}

// A batch append is one round trip: the locks and one INSERT in one pipeline (one implicit
// transaction, one commit), however many keys, through one slot of the Store's limit.
func TestAppendKeys_OneRoundTripForTheWholeBatch(t *testing.T) {
	trace := &statements{}
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)), func(c *pgxpool.Config) { c.ConnConfig.Tracer = trace })
	var reqs []is.KeyEntries
	for i := range 128 {
		key := fmt.Sprintf("agent-%03d", i)
		if i%3 == 0 {
			fill(t, st, testNS, key, entriesFrom(1, 2))
		}
		reqs = append(reqs, is.KeyEntries{Key: key, Entries: entriesFrom(3, uint64(3+i%5))})
	}
	reqs[7].Entries = entriesFrom(2, 2) // agent-007 is new: id 2 is above nothing, no conflict
	reqs[9].Entries = entriesFrom(2, 3) // agent-009 holds 1 and 2: a conflict
	before := st.LimiterStats()
	trace.take()
	errs, err := st.AppendKeys(t.Context(), testNS, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sent := trace.take()
	if len(sent) != 1 || len(sent[0]) != 2 || !strings.Contains(sent[0][0], "pg_advisory_xact_lock") || !strings.Contains(sent[0][1], "INSERT") {
		t.Fatalf("AppendKeys of %d keys sent %d round trips %q, want one: the locks and one INSERT", len(reqs), len(sent), sent)
	}
	if after := st.LimiterStats(); after.Acquired-before.Acquired != 1 {
		t.Fatalf("the batch took %d slots of the limit, want 1", after.Acquired-before.Acquired)
	}
	for i, r := range reqs {
		if conflict := i == 9; errors.Is(errs[i], is.ErrConflict) != conflict || (!conflict && errs[i] != nil) {
			t.Errorf("%s: %v, conflict expected %v", r.Key, errs[i], conflict)
		}
	}
	if got := readIDs(t, st, "agent-009"); !slices.Equal(got, span(1, 2)) {
		t.Errorf("agent-009 after its conflict: %v, want 1..2", got)
	}
	if got := readIDs(t, st, "agent-010"); !slices.Equal(got, span(3, 3+10%5)) {
		t.Errorf("agent-010 after the batch: %v, want 3..%d", got, 3+10%5)
	}
}

// Two batch appends of the same keys in opposite orders, racing, never deadlock (40P01 would fail one
// of them as transient): each takes the locks in one global order. Both append the same ids to every
// key, so of the two exactly one appends each key and the other conflicts.
func TestAppendKeys_OppositeOrdersNeverDeadlock(t *testing.T) {
	st := newStore(t, testenv.PostgresSchema(t, testenv.PostgresURL(t)))
	// Enough keys that the two batches' locks overlap in time: without the order, most rounds deadlock.
	const keys, rounds = 1000, 20
	for round := range rounds {
		ids := entriesFrom(uint64(2*round+1), uint64(2*round+2))
		forward := make([]is.KeyEntries, keys)
		for k := range keys {
			forward[k] = is.KeyEntries{Key: fmt.Sprintf("k%04d", k), Entries: ids}
		}
		backward := slices.Clone(forward)
		slices.Reverse(backward)
		var results [2][]error
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for side, reqs := range [2][]is.KeyEntries{forward, backward} {
			wg.Go(func() {
				<-start
				results[side], errs[side] = st.AppendKeys(t.Context(), testNS, reqs)
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
			if (f == nil) == (b == nil) || (f != nil && !errors.Is(f, is.ErrConflict)) || (b != nil && !errors.Is(b, is.ErrConflict)) {
				t.Fatalf("round %d key %q: the batches returned %v and %v, want one nil and one conflict", round, forward[k].Key, f, b)
			}
		}
	}
	if got := readIDs(t, st, "k0500"); !slices.Equal(got, span(1, 2*rounds)) {
		t.Fatalf("k0500 after the rounds: %v, want 1..%d", got, 2*rounds)
	}
}

// A Store opened read-only refuses a batch append, as it refuses AppendMany.
func TestAppendKeys_ReadOnlyStoreRefuses(t *testing.T) {
	url := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, url)
	st := newStore(t, schema)
	fill(t, st, testNS, "k", entriesFrom(1, 3))
	ro, err := postgres.OpenExisting(t.Context(), url+"&schema="+schema)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, err = ro.AppendKeys(t.Context(), testNS, []is.KeyEntries{{Key: "k", Entries: entriesFrom(4, 5)}})
	requireCallError(t, "read-only", err, is.ErrInvalidArgument, is.OpAppendKeys, testNS)
	if got := readIDs(t, st, "k"); !slices.Equal(got, span(1, 3)) {
		t.Fatalf("k after a read-only append: %v, want 1..3", got)
	}
}

// A batch append reads each key's last id only once it holds the key's lock: an Append that commits
// while the batch waits for the lock is seen, and the batch's part on that key is a conflict naming
// it, while the other keys are appended. A last id read before the lock would miss it, and the INSERT
// would fail the whole batch on the primary key.
func TestAppendKeys_SeesAnAppendCommittedWhileItWaitedForTheLock(t *testing.T) {
	url := testenv.PostgresURL(t)
	st := newStore(t, testenv.PostgresSchema(t, url))
	ctx := t.Context()
	fill(t, st, testNS, "k", entriesFrom(1, 5))

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
		errs []error
		err  error
	}
	done := make(chan result, 1)
	go func() {
		errs, err := st.AppendKeys(ctx, testNS, []is.KeyEntries{{Key: "other", Entries: entriesFrom(1, 2)}, {Key: "k", Entries: entriesFrom(6, 7)}})
		done <- result{errs, err}
	}()
	waitBlockedOrDone(t, st, pid, done)

	if _, err := appender.Exec(ctx, "INSERT INTO "+st.Table()+" (namespace, key, id, value) VALUES ($1, 'k', 6, 'v6')", testNS); err != nil {
		t.Fatal(err)
	}
	if _, err := appender.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended($1, 0))", lockName); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.errs) != 2 || r.errs[0] != nil || !errors.Is(r.errs[1], is.ErrConflict) || !strings.Contains(r.errs[1].Error(), "last id 6") {
		t.Fatalf("AppendKeys: %v, %v; want other appended and k a conflict naming its last id 6", r.errs, r.err)
	}
	if got := readIDs(t, st, "k"); !slices.Equal(got, span(1, 6)) {
		t.Fatalf("k after the batch: %v, want 1..6", got)
	}
	if got := readIDs(t, st, "other"); !slices.Equal(got, span(1, 2)) {
		t.Fatalf("other after the batch: %v, want 1..2", got)
	}
}
