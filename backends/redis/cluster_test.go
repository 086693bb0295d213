package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/backends/redis"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/testenv"
)

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string // master: the id of its master, for a replica
	isMaster, failed bool
	slots            []int
}

func nodeClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterNodes reads CLUSTER NODES from the node at addr.
func clusterNodes(t *testing.T, addr string) []clusterNode {
	t.Helper()
	out, err := nodeClient(t, addr).ClusterNodes(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLUSTER NODES from %s: %v", addr, err)
	}
	var nodes []clusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0], master: f[3],
			isMaster: strings.Contains(f[2], "master"), failed: strings.Contains(f[2], "fail")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot migrating or importing
			}
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			for s := a; s <= b; s++ {
				n.slots = append(n.slots, s)
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

func seedAddr(t *testing.T) string {
	return testenv.RedisClusterNodes(t, testenv.RedisClusterURL(t))[0]
}

// waitHealthy waits until every node of the cluster says cluster_state:ok, each master has a replica
// and all nodes agree on who is master of which slots. It is a wait, not an assertion: it gives up
// after a minute only so that a broken cluster fails the test instead of hanging it.
func waitHealthy(t *testing.T) []clusterNode {
	t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		nodes := clusterNodes(t, seedAddr(t))
		ok := true
		var view string
		for i, n := range nodes {
			c := nodeClient(t, n.addr)
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || n.failed {
				ok = false
				break
			}
			if !n.isMaster {
				// A replica that is still syncing cannot take a manual failover.
				repl, err := c.Info(ctx, "replication").Result()
				if err != nil || !strings.Contains(repl, "master_link_status:up") {
					ok = false
					break
				}
			}
			v := masterView(clusterNodes(t, n.addr))
			if i == 0 {
				view = v
			} else if v != view {
				ok = false
				break
			}
		}
		if ok {
			for _, n := range nodes {
				if n.isMaster && len(n.slots) > 0 && !slices.ContainsFunc(nodes, func(r clusterNode) bool { return r.master == n.id }) {
					ok = false
				}
			}
		}
		if ok {
			return nodes
		}
		if attempt > 600 {
			out, _ := exec.Command("redis-cli", "--cluster", "check", seedAddr(t)).CombinedOutput()
			t.Fatalf("the cluster did not become healthy:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// masterView is who is master of which slots, as one node sees it.
func masterView(nodes []clusterNode) string {
	var parts []string
	for _, n := range nodes {
		if n.isMaster {
			parts = append(parts, fmt.Sprintf("%s:%d", n.id, len(n.slots)))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// fillBuckets writes n agents' indexes over random buckets and returns their keys, sorted.
func fillBuckets(t *testing.T, st *redis.Store, n int) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 3))
	keys := make([]string, 0, n)
	for i := range n {
		k := fmt.Sprintf("%sc:agent-%d", is.BucketPrefix(rng.IntN(is.Buckets)), i)
		if err := st.AppendMany(t.Context(), ns, k, []is.Entry{{ID: 1, Value: []byte("a")}, {ID: 2, Value: []byte("b")}}); err != nil {
			t.Fatalf("AppendMany(%q): %v", k, err)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// walker is one paged ScanStable walk of the whole namespace, a page at a time.
type walker struct {
	t     *testing.T
	st    *redis.Store
	count int
	from  is.Resume
	got   []string
	pages int
	done  bool
}

func (w *walker) page() {
	w.t.Helper()
	page, err := w.st.ScanStable(w.t.Context(), ns, is.AllKeys, w.from, w.count)
	for attempt := 0; err != nil && is.IsTransient(err) && attempt < 50; attempt++ {
		// What go-redis did not retry to the end (a slot moving, a failover) is transient: the
		// caller (the sweep) retries the page, and so does this test.
		time.Sleep(50 * time.Millisecond)
		page, err = w.st.ScanStable(w.t.Context(), ns, is.AllKeys, w.from, w.count)
	}
	if err != nil {
		w.t.Fatalf("page %d of the walk: %v", w.pages, err)
	}
	w.pages++
	for _, k := range page.Keys {
		if len(w.got) > 0 && k <= w.got[len(w.got)-1] {
			w.t.Fatalf("the walk handed back %q after %q", k, w.got[len(w.got)-1])
		}
		w.got = append(w.got, k)
	}
	w.done, w.from = page.Done, page.Next
}

// missed returns the keys of want the walk did not hand back.
func (w *walker) missed(want []string) []string {
	var out []string
	for _, k := range want {
		if _, found := slices.BinarySearch(w.got, k); !found {
			out = append(out, k)
		}
	}
	return out
}

// slotOf is CLUSTER KEYSLOT.
func slotOf(t *testing.T, c *goredis.ClusterClient, key string) int {
	t.Helper()
	s, err := c.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(s)
}

// migration moves one slot from one master to another in the steps Redis Cluster's own resharding
// takes (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE of the slot's keys in two halves, SETSLOT
// NODE on every master), one step per call to step.
type migration struct {
	t        *testing.T
	slot     int
	from, to clusterNode
	masters  []clusterNode
	next     int
}

const migrationSteps = 5

func (m *migration) step() {
	t := m.t
	t.Helper()
	ctx := context.Background()
	src, dst := nodeClient(t, m.from.addr), nodeClient(t, m.to.addr)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("slot %d %s: %v", m.slot, what, err)
		}
	}
	migrate := func(keys []string) {
		if len(keys) == 0 {
			return
		}
		host, port, _ := strings.Cut(m.to.addr, ":")
		args := []any{"MIGRATE", host, port, "", 0, 10000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must("MIGRATE", src.Do(ctx, args...).Err())
	}
	switch m.next {
	case 0:
		must("SETSLOT IMPORTING", dst.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.from.id).Err())
	case 1:
		must("SETSLOT MIGRATING", src.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.to.id).Err())
	case 2, 3:
		keys, err := src.ClusterGetKeysInSlot(ctx, m.slot, 100000).Result()
		must("GETKEYSINSLOT", err)
		if m.next == 2 {
			keys = keys[:len(keys)/2]
		}
		migrate(keys)
	case 4:
		must("SETSLOT NODE (target)", dst.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.to.id).Err())
		must("SETSLOT NODE (source)", src.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.to.id).Err())
		for _, n := range m.masters {
			if n.id != m.from.id && n.id != m.to.id {
				must("SETSLOT NODE", nodeClient(t, n.addr).Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.to.id).Err())
			}
		}
	}
	m.next++
}

func masters(nodes []clusterNode) []clusterNode {
	return slices.DeleteFunc(slices.Clone(nodes), func(n clusterNode) bool { return !n.isMaster })
}

// A walk during a slot migration misses no key present throughout: its pages read index sets while
// their slots move, key by key, from one master to another (ASK while a slot is half moved, MOVED
// after), with one migration step between consecutive pages, and appends to the walked indexes
// between pages too. The slots go back afterwards.
func TestCluster_WalkDuringReshardMissesNoKey(t *testing.T) {
	testenv.RedisClusterExclusive(t)
	st := newClusterStore(t)
	nodes := waitHealthy(t)
	keys := fillBuckets(t, st, 2000)
	cc := st.Client().(*goredis.ClusterClient)

	// The slots of the first master that hold index sets of these keys, to move to the second.
	ms := masters(nodes)
	from, to := ms[0], ms[1]
	owned := map[int]bool{}
	for _, s := range from.slots {
		owned[s] = true
	}
	var slots []int
	for _, k := range keys {
		if s := slotOf(t, cc, st.IndexSetKey(ns, k)); owned[s] && !slices.Contains(slots, s) && len(slots) < 30 {
			slots = append(slots, s)
		}
	}
	var steps []*migration
	for _, s := range slots {
		steps = append(steps, &migration{t: t, slot: s, from: from, to: to, masters: ms})
	}
	t.Cleanup(func() {
		// Move every slot back, whatever step the test stopped at.
		for _, m := range steps {
			for m.next < migrationSteps {
				m.step()
			}
			back := &migration{t: t, slot: m.slot, from: m.to, to: m.from, masters: ms}
			for back.next < migrationSteps {
				back.step()
			}
		}
		waitHealthy(t)
	})

	w := &walker{t: t, st: st, count: 7}
	rng := rand.New(rand.NewPCG(11, 11))
	stepsDone, transientAppends := 0, 0
	for !w.done {
		w.page()
		if stepsDone < len(steps)*migrationSteps {
			steps[stepsDone/migrationSteps].step()
			stepsDone++
		}
		// An append to a walked index between pages: a script over two keys of a moving slot.
		k := keys[rng.IntN(len(keys))]
		if err := st.Append(t.Context(), ns, k, uint64(3+w.pages), nil); err != nil {
			if !is.IsTransient(err) {
				t.Fatalf("Append(%q) during the migration: %v", k, err)
			}
			transientAppends++
		}
	}
	if stepsDone < len(steps)*migrationSteps {
		t.Fatalf("the walk ended after %d pages, before the migration (%d steps of %d)", w.pages, stepsDone, len(steps)*migrationSteps)
	}
	if missed := w.missed(keys); len(missed) > 0 {
		t.Fatalf("the walk across the migration of %d slots missed %d of %d keys, first %q", len(slots), len(missed), len(keys), missed[0])
	}
	if len(w.got) != len(keys) {
		t.Fatalf("the walk handed back %d keys, %d were written", len(w.got), len(keys))
	}
	t.Logf("moved %d slots (%d migration steps) during a walk of %d pages: %d keys, 0 missed; %d appends between pages were transient",
		len(slots), stepsDone, w.pages, len(w.got), transientAppends)
}

// The same with redis-cli --cluster reshard moving 300 slots while whole walks run one after another:
// each walk, from the one that starts before the reshard to the one that starts after it ended, hands
// back every key.
func TestCluster_WalksDuringRedisCliReshardMissNoKey(t *testing.T) {
	testenv.SkipUnlessLong(t, "walks while redis-cli reshards the cluster")
	testenv.RedisClusterExclusive(t)
	st := newClusterStore(t)
	nodes := waitHealthy(t)
	keys := fillBuckets(t, st, 2000)
	ms := masters(nodes)
	reshard := func(from, to clusterNode, slots int) *exec.Cmd {
		return exec.Command("redis-cli", "--cluster", "reshard", seedAddr(t),
			"--cluster-from", from.id, "--cluster-to", to.id, "--cluster-slots", strconv.Itoa(slots),
			"--cluster-yes", "--cluster-pipeline", "10")
	}
	walkAll := func() *walker {
		w := &walker{t: t, st: st, count: 50}
		for !w.done {
			w.page()
		}
		if missed := w.missed(keys); len(missed) > 0 || len(w.got) != len(keys) {
			t.Fatalf("a walk during the reshard handed back %d keys and missed %d of %d (first %q)", len(w.got), len(missed), len(keys), missed)
		}
		return w
	}
	from, to := ms[2], ms[0]
	before := map[int]bool{}
	for _, sl := range to.slots {
		before[sl] = true
	}
	t.Cleanup(func() {
		// Move back exactly the slots that moved, so the cluster ends as it began.
		now := clusterNodes(t, seedAddr(t))
		i := slices.IndexFunc(now, func(n clusterNode) bool { return n.id == to.id })
		for _, sl := range now[i].slots {
			if !before[sl] {
				back := &migration{t: t, slot: sl, from: to, to: from, masters: ms}
				for back.next < migrationSteps {
					back.step()
				}
			}
		}
		waitHealthy(t)
	})
	cmd := reshard(from, to, 300)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	walks, pages := 0, 0
	var err error
loop:
	for {
		w := walkAll()
		walks++
		pages += w.pages
		select {
		case err = <-exited:
			break loop
		default:
		}
	}
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out.String())
	}
	w := walkAll() // started after the reshard ended
	waitHealthy(t)
	t.Logf("redis-cli reshard of 300 slots %s → %s: %d whole walks (%d pages) ran during it, each %d keys, 0 missed; the walk after: %d keys",
		from.addr, to.addr, walks, pages, len(keys), len(w.got))
}

// A walk across a manual failover (CLUSTER FAILOVER on a replica) misses no key: the walk is paused
// half-way until the replica is master and every node agrees, then finishes; whole walks also run
// while the failover is under way. The old master takes its role back afterwards.
func TestCluster_WalkDuringFailoverMissesNoKey(t *testing.T) {
	testenv.SkipUnlessLong(t, "a walk while a master fails over")
	testenv.RedisClusterExclusive(t)
	st := newClusterStore(t)
	nodes := waitHealthy(t)
	keys := fillBuckets(t, st, 2000)
	master := masters(nodes)[1]
	i := slices.IndexFunc(nodes, func(n clusterNode) bool { return n.master == master.id })
	replica := nodes[i]

	failover := func(to clusterNode) {
		t.Helper()
		if err := nodeClient(t, to.addr).Do(context.Background(), "CLUSTER", "FAILOVER").Err(); err != nil {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", to.addr, err)
		}
	}
	isMaster := func(n clusterNode) bool {
		role, err := nodeClient(t, n.addr).Do(context.Background(), "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}
	t.Cleanup(func() {
		for attempt := 0; !isMaster(master) && attempt < 600; attempt++ {
			if attempt%50 == 0 {
				waitHealthy(t)
				failover(master)
			}
			time.Sleep(100 * time.Millisecond)
		}
		waitHealthy(t)
	})

	w := &walker{t: t, st: st, count: 7}
	for w.pages < 50 && !w.done {
		w.page()
	}
	if w.done {
		t.Fatal("the walk ended before the failover")
	}
	failover(replica)
	// Whole walks while the failover is under way (the first starts as it begins), until the replica
	// is master.
	walks := 0
	for attempt := 0; walks == 0 || !isMaster(replica); attempt++ {
		if attempt > 600 {
			t.Fatalf("%s did not become master", replica.addr)
		}
		if attempt > 0 && attempt%100 == 0 {
			// A manual failover that timed out (the replica behind the master's offset) leaves the
			// roles as they were: ask again.
			failover(replica)
		}
		o := &walker{t: t, st: st, count: 100}
		for !o.done {
			o.page()
		}
		if missed := o.missed(keys); len(missed) > 0 {
			t.Fatalf("a walk during the failover missed %d keys, first %q", len(missed), missed[0])
		}
		walks++
	}
	waitHealthy(t)
	for !w.done {
		w.page()
	}
	if missed := w.missed(keys); len(missed) > 0 || len(w.got) != len(keys) {
		t.Fatalf("the walk across the failover of %s handed back %d keys, missed %d of %d", master.addr, len(w.got), len(missed), len(keys))
	}
	// Writes and reads go to the new master.
	for _, k := range keys[:20] {
		if err := st.Append(t.Context(), ns, k, 3, nil); err != nil {
			t.Fatalf("Append after the failover: %v", err)
		}
	}
	t.Logf("failover %s → %s: the walk (%d pages) handed back %d keys, 0 missed; %d whole walks during the failover, 0 missed",
		master.addr, replica.addr, w.pages, len(w.got), walks)
}

// A plain redis:// URL that reaches a cluster node is refused at Open, naming the cluster URL form.
func TestOpen_PlainURLOnAClusterNodeIsRefused(t *testing.T) {
	addr := seedAddr(t)
	st, err := redis.Open(t.Context(), "redis://"+addr+"/0?prefix=p:")
	if !errors.Is(err, is.ErrInvalidArgument) || !strings.Contains(err.Error(), "redis+cluster://") {
		t.Fatalf("Open(redis://%s): %v, want ErrInvalidArgument naming redis+cluster://", addr, err)
	}
	if st != nil {
		t.Fatal("Open returned a Store with its error")
	}
}

func TestOpen_ClusterURLs(t *testing.T) {
	for _, raw := range []string{
		"redis+cluster:///?prefix=p",
		"redis+cluster://127.0.0.1:7000/1",
		"redis+cluster://127.0.0.1:7000,,127.0.0.1:7001/",
		"redis+cluster://127.0.0.1:7000/?addr=127.0.0.1:7001",
		"redis+cluster://127.0.0.1:7000/?bogus=1",
		"redis+cluster://127.0.0.1:7000/?prefix=a{b}",
		"redis://127.0.0.1:6379/0?prefix=%7B",
		"redis://127.0.0.1:6379/0?wait_replicas=-1",
		"redis://127.0.0.1:6379/0?wait_replicas=x",
		"redis://127.0.0.1:6379/0?wait_timeout=1s",
		"redis://127.0.0.1:6379/0?wait_replicas=1&wait_timeout=0",
		"redis://127.0.0.1:6379/0?wait_replicas=1&wait_timeout=soon",
		"redis+cluster://u:s3cret@127.0.0.1:7000/?bogus=1",
	} {
		st, err := redis.Open(t.Context(), raw)
		if !errors.Is(err, is.ErrInvalidArgument) {
			t.Errorf("Open(%q): %v, want ErrInvalidArgument", raw, err)
		}
		if st != nil {
			st.Close()
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) shows the password: %v", raw, err)
		}
	}
	raw := testenv.RedisClusterURL(t)
	st, err := redis.Open(t.Context(), testenv.WithQuery(t, testenv.WithQuery(t, raw, redis.PrefixParam, testenv.RedisClusterPrefix(t, raw)), "pool_size", "3"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cc, ok := st.Client().(*goredis.ClusterClient)
	if !ok || !st.IsCluster() {
		t.Fatalf("client %T", st.Client())
	}
	if opts := cc.Options(); opts.PoolSize != 3 || len(opts.Addrs) != len(testenv.RedisClusterNodes(t, raw)) {
		t.Fatalf("go-redis got pool size %d and nodes %v", opts.PoolSize, opts.Addrs)
	}
}

// waitingClusterStores opens two stores on one prefix of the test cluster, one waiting for 1 replica
// and one for 2, each for at most 200 ms.
func waitingClusterStores(t *testing.T) (one, two *redis.Store) {
	t.Helper()
	raw := testenv.RedisClusterURL(t)
	prefix := testenv.RedisClusterPrefix(t, raw)
	open := func(n int) *redis.Store {
		u := testenv.WithQuery(t, testenv.WithQuery(t, testenv.WithQuery(t, raw, redis.PrefixParam, prefix),
			redis.WaitReplicasParam, strconv.Itoa(n)), redis.WaitTimeoutParam, "200ms")
		st, err := redis.Open(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	return open(1), open(2)
}

// wait_replicas makes each write wait for that many replicas: on the cluster (one replica a master)
// 1 is met, 2 is not and the write, which is done, reports ErrTransient.
func TestWaitReplicas(t *testing.T) {
	ctx := t.Context()
	one, two := waitingClusterStores(t)
	if w := one.Wait(); w.Replicas != 1 || w.Timeout != 200*time.Millisecond {
		t.Fatalf("Wait %+v", w)
	}
	for i := range 20 {
		k := is.BucketPrefix(i*800) + "c:a"
		if err := one.AppendMany(ctx, ns, k, []is.Entry{{ID: 1}, {ID: 2}}); err != nil {
			t.Fatalf("AppendMany waiting for 1 replica: %v", err)
		}
		if n, err := one.DropPrefix(ctx, ns, k, 1); err != nil || n != 1 {
			t.Fatalf("DropPrefix waiting for 1 replica: %d %v", n, err)
		}
	}
	k := is.BucketPrefix(77) + "c:b"
	if err := two.Append(ctx, ns, k, 1, nil); !is.IsTransient(err) || !strings.Contains(err.Error(), "1 of 2 replicas") {
		t.Fatalf("Append waiting for 2 replicas of 1: %v, want ErrTransient", err)
	}
	if id, ok, err := one.LastID(ctx, ns, k); err != nil || !ok || id != 1 {
		t.Fatalf("the write that timed out waiting is there: %d %v %v", id, ok, err)
	}
	if err := two.Delete(ctx, ns, k); !is.IsTransient(err) {
		t.Fatalf("Delete waiting for 2 replicas of 1: %v", err)
	}
	if ok, err := one.Exists(ctx, ns, k); err != nil || ok {
		t.Fatalf("deleted index: exists %v %v", ok, err)
	}
}

// A server that refuses INFO (an ACL without it) is opened: the cluster check is skipped, not failed.
func TestOpen_ServerThatRefusesInfoOpens(t *testing.T) {
	raw := testenv.RedisURL(t)
	opts, err := goredis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(opts)
	defer admin.Close()
	ctx := t.Context()
	user := testenv.UniqueName("strata-test-noinfo-")
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	u := strings.Replace(raw, "redis://", "redis://"+user+":pw@", 1)
	st, err := redis.Open(ctx, testenv.WithQuery(t, u, redis.PrefixParam, testenv.RedisPrefix(t, raw)))
	if err != nil {
		t.Fatalf("Open as a user without INFO: %v", err)
	}
	defer st.Close()
	if err := st.Client().Info(ctx, "cluster").Err(); err == nil {
		t.Fatal("the user may run INFO: the test tests nothing")
	}
	if err := st.Append(ctx, ns, "k", 1, nil); err != nil {
		t.Fatal(err)
	}
}
