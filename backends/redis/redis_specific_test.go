package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/test/backendtest"
)

const ns = "test/redis"

func ids(entries []is.Entry) []uint64 {
	out := make([]uint64, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}

// Float scores hold 53 bits; member bytes hold all 63. Neighbours above 2^53 would collapse onto one
// score, so reading them back distinct and in order shows the ids are stored exactly.
func TestIDsAbove2To53RoundTripExactlyAndInOrder(t *testing.T) {
	st, ctx := newStore(t), t.Context()
	const p53 = uint64(1) << 53
	want := []uint64{p53, p53 + 1, is.MaxID - 1, is.MaxID}
	for _, id := range want {
		if err := st.Append(ctx, ns, "big", id, []byte(fmt.Sprint(id))); err != nil {
			t.Fatalf("Append(%d): %v", id, err)
		}
	}
	all, err := st.Read(ctx, ns, "big", 0, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(all), want) {
		t.Fatalf("Read all: %v, want %v", ids(all), want)
	}
	for _, e := range all {
		if string(e.Value) != fmt.Sprint(e.ID) {
			t.Fatalf("id %d holds %q", e.ID, e.Value)
		}
	}
	for _, c := range []struct {
		from, to uint64
		want     []uint64
	}{
		{p53 + 1, p53 + 1, []uint64{p53 + 1}},
		{p53, p53, []uint64{p53}},
		{p53 + 2, is.MaxID - 2, nil},
		{is.MaxID - 1, is.MaxID, []uint64{is.MaxID - 1, is.MaxID}},
		{is.MaxID, math.MaxUint64, []uint64{is.MaxID}},
		{p53 - 1, p53, []uint64{p53}},
	} {
		got, err := st.Read(ctx, ns, "big", c.from, c.to)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), c.want) && len(got)+len(c.want) > 0 {
			t.Fatalf("Read(%d, %d): %v, want %v", c.from, c.to, ids(got), c.want)
		}
	}
	for _, c := range []struct {
		id, want uint64
		found    bool
	}{{p53 + 1, p53 + 1, true}, {p53 + 2, is.MaxID - 1, true}, {is.MaxID, is.MaxID, true}, {is.MaxID + 1, 0, false}} {
		e, ok, err := st.Closest(ctx, ns, "big", c.id)
		if err != nil || ok != c.found || e.ID != c.want {
			t.Fatalf("Closest(%d) = %d %v %v, want %d %v", c.id, e.ID, ok, err, c.want, c.found)
		}
	}
	for _, id := range []uint64{is.MaxID, p53 + 1, p53} {
		if err := st.Append(ctx, ns, "big", id, nil); !errors.Is(err, is.ErrConflict) {
			t.Fatalf("Append(%d) at or below MaxID: %v, want ErrConflict", id, err)
		}
	}
	if n, err := st.DropPrefix(ctx, ns, "big", p53); err != nil || n != 1 {
		t.Fatalf("DropPrefix(2^53) = %d, %v; want 1", n, err)
	}
	if n, err := st.DropPrefix(ctx, ns, "big", is.MaxID-1); err != nil || n != 2 {
		t.Fatalf("DropPrefix(MaxID-1) = %d, %v; want 2", n, err)
	}
	first, ok, err := st.First(ctx, ns, "big")
	if err != nil || !ok || first.ID != is.MaxID {
		t.Fatalf("First after drops: %d %v %v, want MaxID", first.ID, ok, err)
	}
	if n, err := st.DropPrefix(ctx, ns, "big", math.MaxUint64); err != nil || n != 1 {
		t.Fatalf("DropPrefix(max) = %d, %v; want 1", n, err)
	}
	if ok, err := st.Exists(ctx, ns, "big"); ok || err != nil {
		t.Fatalf("Exists after emptying: %v %v", ok, err)
	}
}

func TestAppendManyLargerThanLuaUnpackLimitIsWhole(t *testing.T) {
	st, ctx := newStore(t), t.Context()
	const n = 10_000 // 20,000 script arguments: several ZADD chunks in one script
	batch := make([]is.Entry, n)
	for i := range batch {
		batch[i] = is.Entry{ID: uint64(i + 1), Value: []byte{byte(i)}}
	}
	if err := st.AppendMany(ctx, ns, "k", batch); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Length(ctx, ns, "k"); err != nil || got != n {
		t.Fatalf("Length %d %v, want %d", got, err, n)
	}
	last, _, err := st.Last(ctx, ns, "k")
	if err != nil || last.ID != n || last.Value[0] != byte((n-1)&0xff) {
		t.Fatalf("Last %+v %v", last, err)
	}
	// A conflicting batch as large writes nothing.
	if err := st.AppendMany(ctx, ns, "k", batch); !errors.Is(err, is.ErrConflict) {
		t.Fatalf("repeated batch: %v, want ErrConflict", err)
	}
	if got, _ := st.Length(ctx, ns, "k"); got != n {
		t.Fatalf("Length after refused batch %d, want %d", got, n)
	}
}

func TestOpen_ConnectionRefusedIsTransient(t *testing.T) {
	st, err := redis.Open(t.Context(), "redis://"+backendtest.ClosedAddr(t)+"/0?max_retries=-1")
	if !errors.Is(err, is.ErrTransient) {
		t.Fatalf("Open against a closed port: %v, want ErrTransient", err)
	}
	if st != nil {
		t.Fatal("Open returned a Store with its error")
	}
}

func TestOpenRejectsBadURLs(t *testing.T) {
	for _, raw := range []string{
		"127.0.0.1:6379",
		"http://127.0.0.1:6379/0",
		"redis://127.0.0.1:6379/notadb",
		"redis://127.0.0.1:6379/0/1",
		"redis://127.0.0.1:6379/0?bogus=1",
		"redis://127.0.0.1:6379/0?pool_size=many",
		"redis://127.0.0.1:6379/0?prefix=a&prefix=b",
		"redis://127.0.0.1:6379/0?prefix=",
		"redis://127.0.0.1:6379/0?prefix=%zz",
		"redis://127.0.0.1:6379/0?prefix=a%00b",
		"redis://127.0.0.1:6379/0?prefix=%ff",
		"redis://127.0.0.1:6379/0?prefix=a%0Ab",
		"redis://127.0.0.1:6379/0?prefix=" + strings.Repeat("p", is.MaxKeyLen+1),
		"redis://user:s3cret@127.0.0.1:6379/0?bogus=1",
	} {
		st, err := redis.Open(t.Context(), raw)
		if !errors.Is(err, is.ErrInvalidArgument) {
			t.Errorf("Open(%q): %v, want ErrInvalidArgument", raw, err)
		}
		if st != nil {
			st.Close()
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q): the error shows the password: %v", raw, err)
		}
	}
}

func TestOpenTakesPrefixAndPassesOtherOptionsToGoRedis(t *testing.T) {
	raw := testenv.RedisURL(t)
	prefix := testenv.RedisPrefix(t, raw) + "a b/ü:"
	st, err := redis.Open(t.Context(), testenv.WithQuery(t, testenv.WithQuery(t, raw, redis.PrefixParam, prefix), "pool_size", "3"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.KeyPrefix() != prefix {
		t.Fatalf("KeyPrefix %q, want %q", st.KeyPrefix(), prefix)
	}
	if size := st.Client().(*goredis.Client).Options().PoolSize; size != 3 {
		t.Fatalf("pool_size reached go-redis as %d", size)
	}
	ctx := t.Context()
	if err := st.Append(ctx, ns, "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	if want := prefix + "{" + ns + "|u}:k"; st.RedisKey(ns, "k") != want {
		t.Fatalf("RedisKey %q, want %q", st.RedisKey(ns, "k"), want)
	}
	if n, err := st.Client().Exists(ctx, prefix+"{"+ns+"|u}:k").Result(); err != nil || n != 1 {
		t.Fatalf("Redis key %q: exists %d %v", prefix+"{"+ns+"|u}:k", n, err)
	}
}

func TestCloseClosesOnlyAnOwnedClient(t *testing.T) {
	raw := testenv.RedisURL(t)
	prefix := testenv.RedisPrefix(t, raw)
	ctx := t.Context()

	opened, err := redis.Open(ctx, testenv.WithQuery(t, raw, redis.PrefixParam, prefix))
	if err != nil {
		t.Fatal(err)
	}
	opened.Close()
	if err := opened.Client().Ping(ctx).Err(); !errors.Is(err, goredis.ErrClosed) {
		t.Fatalf("client of a closed Open Store: %v, want closed", err)
	}

	opts, err := goredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opts)
	defer client.Close()
	st := storeOn(t, client, prefix)
	st.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("New's client after Store.Close: %v", err)
	}
	if _, err := st.Exists(ctx, ns, "k"); !errors.Is(err, is.ErrClosed) {
		t.Fatalf("Exists after Close: %v", err)
	}
}

// Prefixes that look like glob patterns must match only themselves: unescaped, "p*:" would match
// every other prefix here, "p[1]:" would match "p1:", and "p?:" would match "p1:" and "px:".
func TestStoresWithDifferentPrefixesAreIsolated(t *testing.T) {
	raw := testenv.RedisURL(t)
	base := testenv.RedisPrefix(t, raw)
	opts, err := goredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opts)
	defer client.Close()
	ctx := t.Context()

	prefixes := []string{"p*:", "p[1]:", "p1:", "px:", "p?:", `p\:`}
	stores := map[string]*redis.Store{}
	for i, p := range prefixes {
		st := storeOn(t, client, base+p)
		stores[p] = st
		// Every store writes "shared" (with its own id) and a key of its own.
		if err := st.Append(ctx, ns, "shared", uint64(i+1), []byte(p)); err != nil {
			t.Fatal(err)
		}
		if err := st.Append(ctx, ns, "own-"+p, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range prefixes {
		st := stores[p]
		want := []string{"own-" + p, "shared"}
		for _, count := range []int{1, 3, 100} {
			if got := walk(t, st, "", count); !slices.Equal(got, want) {
				t.Fatalf("store %q, pages of %d: walk %q, want %q", p, count, got, want)
			}
		}
		if got := walk(t, st, "own-", 2); !slices.Equal(got, want[:1]) {
			t.Fatalf("store %q: walk under own-: %q", p, got)
		}
		if got := scanAll(t, st, 2); !slices.Equal(got, want) {
			t.Fatalf("store %q: Scan %q, want %q", p, got, want)
		}
		entries, err := st.Read(ctx, ns, "shared", 0, math.MaxUint64)
		if err != nil || len(entries) != 1 || entries[0].ID != uint64(i+1) || string(entries[0].Value) != p {
			t.Fatalf("store %q reads shared as %+v %v", p, entries, err)
		}
	}
	// Deleting through one store leaves the others' indexes alone.
	if err := stores["p*:"].Delete(ctx, ns, "shared"); err != nil {
		t.Fatal(err)
	}
	for _, p := range prefixes[1:] {
		if ok, err := stores[p].Exists(ctx, ns, "shared"); !ok || err != nil {
			t.Fatalf("store %q lost shared when p*: deleted its own: %v %v", p, ok, err)
		}
	}
}

// walk returns the distinct keys of a whole ScanStable walk, sorted.
func walk(t *testing.T, st *redis.Store, prefix string, count int) []string {
	t.Helper()
	var keys []string
	var from is.Resume
	for {
		page, err := st.ScanStable(t.Context(), ns, is.PrefixRange(prefix), from, count)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, page.Keys...)
		if page.Done {
			break
		}
		from = page.Next
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func scanAll(t *testing.T, st *redis.Store, count int) []string {
	t.Helper()
	var keys []string
	for cursor := uint64(0); ; {
		next, page, err := st.Scan(t.Context(), ns, "", cursor, count)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, page...)
		if next == 0 {
			break
		}
		cursor = next
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// On a cluster both walks read the index sets (Scan by position), so against a closed port they fail
// only as it does; a ring, whose SCAN reaches one shard, is refused Scan.
func TestScanOnClusterClientAndRing(t *testing.T) {
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{backendtest.ClosedAddr(t)}, MaxRetries: -1})
	defer client.Close()
	st := storeOn(t, client, "p:")
	ctx := context.Background()
	if _, _, err := st.Scan(ctx, ns, "", 0, 10); !errors.Is(err, is.ErrTransient) {
		t.Fatalf("Scan on a cluster client against a closed port: %v, want ErrTransient", err)
	}
	if _, err := st.ScanStable(ctx, ns, is.AllKeys, is.Resume{}, 10); !errors.Is(err, is.ErrTransient) {
		t.Fatalf("ScanStable on a cluster client against a closed port: %v, want ErrTransient", err)
	}
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": backendtest.ClosedAddr(t)}})
	defer ring.Close()
	if _, _, err := storeOn(t, ring, "p:").Scan(ctx, ns, "", 0, 10); !errors.Is(err, is.ErrInvalidArgument) {
		t.Fatalf("Scan on a ring: %v, want ErrInvalidArgument", err)
	}
}

// A key under the Store's prefix that strata did not write is reported, not decoded into garbage or
// a panic.
func TestForeignDataIsAnErrorNotAPanic(t *testing.T) {
	st, ctx := newStore(t), t.Context()
	if err := st.Client().ZAdd(ctx, st.RedisKey(ns, "short"), goredis.Z{Member: "abc"}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Read(ctx, ns, "short", 0, math.MaxUint64); err == nil {
		t.Fatal("Read of a 3-byte member succeeded")
	}
	if err := st.Client().Set(ctx, st.RedisKey(ns, "string"), "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, ns, "string", 1, nil); err == nil || errors.Is(err, is.ErrTransient) || errors.Is(err, is.ErrConflict) {
		t.Fatalf("Append onto a string key: %v, want a permanent error", err)
	}
	if _, err := st.Length(ctx, ns, "string"); err == nil {
		t.Fatal("Length of a string key succeeded")
	}
}

// A key of another type under the Store's prefix (the suite's Poison) fails with Redis's own WRONGTYPE
// reply carried in the error, so an operator sees what the engine said; that such an index fails
// permanently, names itself and does not stop a walk is the suite's poison check.
func TestWrongTypeKey_CarriesRedisReply(t *testing.T) {
	st, ctx := newStore(t), t.Context()
	if err := st.Append(ctx, ns, "wrong", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Client().Set(ctx, st.RedisKey(ns, "wrong"), "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for op, call := range map[is.Operation]func() error{
		is.OpLength:     func() error { _, err := st.Length(ctx, ns, "wrong"); return err },
		is.OpRead:       func() error { _, err := st.Read(ctx, ns, "wrong", 0, math.MaxUint64); return err },
		is.OpFirst:      func() error { _, _, err := st.First(ctx, ns, "wrong"); return err },
		is.OpLast:       func() error { _, _, err := st.Last(ctx, ns, "wrong"); return err },
		is.OpClosest:    func() error { _, _, err := st.Closest(ctx, ns, "wrong", 1); return err },
		is.OpDropPrefix: func() error { _, err := st.DropPrefix(ctx, ns, "wrong", 1); return err },
		is.OpAppend:     func() error { return st.Append(ctx, ns, "wrong", 1, nil) },
		is.OpClosestLastMany: func() error {
			r, err := st.ClosestLastMany(ctx, ns, []is.KeyID{{Key: "wrong", ID: 1}})
			if err != nil {
				return err
			}
			return r[0].Err
		},
		is.OpDropPrefixMany: func() error {
			r, err := st.DropPrefixMany(ctx, ns, []is.KeyID{{Key: "wrong", ID: 1}})
			if err != nil {
				return err
			}
			return r[0].Err
		},
		is.OpAppendKeys: func() error {
			r, err := st.AppendKeys(ctx, ns, []is.KeyEntries{{Key: "wrong", Entries: []is.Entry{{ID: 2}}}})
			if err != nil {
				return err
			}
			return r[0]
		},
	} {
		var reply goredis.Error
		if err := call(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !errors.As(err, &reply) {
			t.Fatalf("%s of a string key: %v, want Redis's WRONGTYPE carried", op, err)
		}
	}
}
