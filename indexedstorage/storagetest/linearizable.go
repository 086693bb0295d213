package storagetest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anishathalye/porcupine"

	is "github.com/stratalog/strata/indexedstorage"
)

// The linearizability check runs random concurrent histories (several clients, every per-index
// operation of the contract, a few keys) against the backend and asks porcupine whether each history
// could have happened one operation at a time, each taking effect at some instant between its call and
// its return. A backend whose Delete or DropPrefix is not atomic against a concurrent Append (a reader
// sees the appended id, yet the delete that returned afterwards left it behind) fails here, and so does
// one whose conflict check is a read followed by a write.
//
// Every operation touches one index, so histories are checked per key. Values are derived from the key
// and id, so the model is the ids alone; every value read is checked where it is read.
//
// A batch (is.ClosestLastMany, is.DropPrefixMany, is.AppendKeys: DESIGN §13) is not atomic across
// keys; each key's part is linearizable on its own. So a batch is recorded as its per-key operations,
// each with the batch's call and return: a part of a batch read is a ClosestLast where the backend
// claims one instant for it (an is.BatchReader, or an is.ClosestLastReader under the fallback), else a
// LastID and a Closest, the fallback's two calls; a part of a batch append is an AppendMany.

const (
	linClients = 4
	linKeys    = 2
	linOps     = 30 // per client per history
)

// linOpKind names an operation of the contract.
type linOpKind int

const (
	linExists linOpKind = iota
	linAppend
	linAppendMany
	linLength
	linRead
	linFirst
	linLast
	linLastID
	linClosest
	linClosestLast // only where the backend is an is.ClosestLastReader: the method claims one instant
	linDropPrefix
	linDelete
)

var linOpNames = [...]string{"Exists", "Append", "AppendMany", "Length", "Read", "First", "Last", "LastID", "Closest", "ClosestLast", "DropPrefix", "Delete"}

type linInput struct {
	key   string
	kind  linOpKind
	batch int      // the number of keys of the batch this is a part of; 0 for a call of its own
	ids   []uint64 // Append: one; AppendMany: several
	below uint64   // an AppendKeys part's Below (0: none)
	a, b  uint64   // Read: from, to; Closest: id; DropPrefix: upTo
}

type linOutput struct {
	conflict bool     // Append and AppendMany: ErrConflict
	ok       bool     // Exists; First, Last, Closest, ClosestLast: found
	n        uint64   // Length; DropPrefix: dropped; First, Last, Closest, ClosestLast: the id found
	last     uint64   // ClosestLast: the last id (0: none)
	ids      []uint64 // Read
}

// linState is an index's ids, ascending; never modified once built.
type linState []uint64

func linStep(state, input, output any) (bool, any) {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	last := uint64(0)
	if len(s) > 0 {
		last = s[len(s)-1]
	}
	switch in.kind {
	case linExists:
		return out.ok == (len(s) > 0), s
	case linAppend, linAppendMany:
		if bound := cmp.Or(in.below, in.ids[0]); bound <= last { // is.KeyEntries.Bound
			return out.conflict, s
		}
		if out.conflict {
			return false, s
		}
		return true, append(slices.Clip(s), in.ids...)
	case linLength:
		return out.n == uint64(len(s)), s
	case linRead:
		var want []uint64
		for _, id := range s {
			if id >= in.a && id <= in.b {
				want = append(want, id)
			}
		}
		return slices.Equal(want, out.ids), s
	case linFirst:
		if len(s) == 0 {
			return !out.ok, s
		}
		return out.ok && out.n == s[0], s
	case linLast, linLastID:
		if len(s) == 0 {
			return !out.ok, s
		}
		return out.ok && out.n == last, s
	case linClosest, linClosestLast:
		if in.kind == linClosestLast && out.last != last {
			return false, s
		}
		i, _ := slices.BinarySearch(s, in.a)
		if i == len(s) {
			return !out.ok, s
		}
		return out.ok && out.n == s[i], s
	case linDropPrefix:
		i, _ := slices.BinarySearch(s, in.a+1)
		if in.a == ^uint64(0) {
			i = len(s)
		}
		return out.n == uint64(i), s[i:]
	case linDelete:
		return true, linState(nil)
	}
	return false, s
}

var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(linInput).key
			if _, seen := byKey[k]; !seen {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return linState(nil) },
	Step: linStep,
	Equal: func(a, b any) bool {
		return slices.Equal(a.(linState), b.(linState))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		args := ""
		switch in.kind {
		case linAppend, linAppendMany:
			args = fmt.Sprint(in.ids)
			if in.below > 0 {
				args += fmt.Sprintf(" below %d", in.below)
			}
		case linRead:
			args = fmt.Sprintf("%d..%d", in.a, in.b)
		case linClosest, linClosestLast, linDropPrefix:
			args = fmt.Sprint(in.a)
		}
		res := ""
		switch in.kind {
		case linAppend, linAppendMany:
			res = "ok"
			if out.conflict {
				res = "conflict"
			}
		case linExists:
			res = fmt.Sprint(out.ok)
		case linLength, linDropPrefix:
			res = fmt.Sprint(out.n)
		case linRead:
			res = fmt.Sprint(out.ids)
		case linFirst, linLast, linLastID, linClosest:
			res = "none"
			if out.ok {
				res = fmt.Sprint(out.n)
			}
		case linClosestLast:
			res = "none"
			if out.ok {
				res = fmt.Sprint(out.n)
			}
			res += fmt.Sprintf(", last %d", out.last)
		case linDelete:
			res = "ok"
		}
		name := linOpNames[in.kind]
		if in.batch > 0 {
			name += fmt.Sprintf(" (a part of a batch of %d)", in.batch)
		}
		return fmt.Sprintf("%s %s(%s) → %s", in.key, name, args, res)
	},
	DescribeState: func(state any) string { return fmt.Sprint([]uint64(state.(linState))) },
}

// linClient is one client of a history: its random choices and the id counter all clients share, so
// that most appends go above the index's last id and some race for the same one.
type linClient struct {
	rng         *rand.Rand
	keys        []string
	nextID      *atomic.Uint64
	closestLast bool // the backend is an is.ClosestLastReader
	// belows: the backend is an is.BatchAppender, whose parts' Below is checked in one step with
	// the append. The per-key fallback's is a read before it (documented so), not linearizable: its
	// Below is checked by the model only.
	belows bool
}

func (c *linClient) input() linInput {
	in := linInput{key: c.keys[c.rng.IntN(len(c.keys))]}
	top := c.nextID.Load()
	id := func() uint64 { return 1 + c.rng.Uint64N(top+2) }
	switch r := c.rng.IntN(100); {
	case r < 25:
		in.kind = linAppend
		// Mostly a fresh id; sometimes the last one handed out, to race another client for it.
		if c.rng.IntN(4) == 0 {
			in.ids = []uint64{max(top, 1)}
		} else {
			in.ids = []uint64{c.nextID.Add(1)}
		}
	case r < 35:
		in.kind = linAppendMany
		first := c.nextID.Add(3) - 2
		in.ids = []uint64{first, first + 1 + c.rng.Uint64N(2)}
	case r < 42:
		in.kind = linExists
	case r < 49:
		in.kind = linLength
	case r < 62:
		in.kind = linRead
		in.a, in.b = id(), ^uint64(0)
		if c.rng.IntN(2) == 0 {
			in.a = 0
		}
		if c.rng.IntN(3) == 0 {
			in.b = in.a + c.rng.Uint64N(4)
		}
	case r < 67:
		in.kind = linFirst
	case r < 72:
		in.kind = linLast
		if c.rng.IntN(2) == 0 {
			in.kind = linLastID
		}
	case r < 77:
		in.kind = linClosest
		if c.closestLast && c.rng.IntN(2) == 0 {
			in.kind = linClosestLast
		}
		in.a = id()
	case r < 92:
		in.kind = linDropPrefix
		in.a = id()
		if c.rng.IntN(5) == 0 {
			in.a = ^uint64(0)
		}
	default:
		in.kind = linDelete
	}
	return in
}

// batch is a batch call of the client's: a read or a drop of one key or all, in a random order, each
// key with its own id or bound.
func (c *linClient) batch() (read bool, reqs []is.KeyID) {
	read = c.rng.IntN(2) == 0
	keys := slices.Clone(c.keys)
	c.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	keys = keys[:1+c.rng.IntN(len(keys))]
	top := c.nextID.Load()
	for _, k := range keys {
		id := 1 + c.rng.Uint64N(top+2)
		if !read && c.rng.IntN(5) == 0 {
			id = ^uint64(0)
		}
		reqs = append(reqs, is.KeyID{Key: k, ID: id})
	}
	return read, reqs
}

// appendBatch is a batch append of the client's: one key or all, in a random order, each key's part
// like an AppendMany's (fresh ids, or now and then from the last id handed out, to race for it), now
// and then with a Below under its first id.
func (c *linClient) appendBatch() []is.KeyEntries {
	keys := slices.Clone(c.keys)
	c.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	keys = keys[:1+c.rng.IntN(len(keys))]
	reqs := make([]is.KeyEntries, len(keys))
	for i, k := range keys {
		first := c.nextID.Add(3) - 2
		if c.rng.IntN(4) == 0 {
			first = max(c.nextID.Load()-3, 1)
		}
		reqs[i] = is.KeyEntries{Key: k, Entries: entries(k, first, first+1+c.rng.Uint64N(2))}
		if c.belows && first > 2 && c.rng.IntN(3) == 0 {
			// Below the first id: an append of another client's just before this one's ids makes it
			// a conflict the ids alone would not be.
			reqs[i].Below = first - 2
		}
	}
	return reqs
}

// linRunAppendBatch runs one batch append against st and returns its parts as AppendMany operations,
// or an error that fails the check: the call's, or a part's other than a conflict.
func (f *fixture) linRunAppendBatch(st is.Storage, reqs []is.KeyEntries) ([]linInput, []linOutput, error) {
	errs, err := is.AppendKeys(f.ctx, st, ns, reqs)
	if err == nil && len(errs) != len(reqs) {
		err = fmt.Errorf("%d results for %d keys", len(errs), len(reqs))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("AppendKeys(%d keys): %w", len(reqs), err)
	}
	ins := make([]linInput, len(reqs))
	outs := make([]linOutput, len(reqs))
	for i, r := range reqs {
		if errs[i] != nil && !errors.Is(errs[i], is.ErrConflict) {
			return nil, nil, fmt.Errorf("AppendKeys, key %q: %w", r.Key, errs[i])
		}
		ids := make([]uint64, len(r.Entries))
		for j, e := range r.Entries {
			ids[j] = e.ID
		}
		ins[i] = linInput{key: r.Key, kind: linAppendMany, ids: ids, below: r.Below, batch: len(reqs)}
		outs[i] = linOutput{conflict: errs[i] != nil}
	}
	return ins, outs, nil
}

// linRunBatch runs one batch against st and returns its parts as per-key operations (oneInstant: a
// read's part is a ClosestLast, else a LastID and a Closest), or an error that fails the check: the
// call's or a part's, or a value that is not the one written.
func (f *fixture) linRunBatch(st is.Storage, read, oneInstant bool, reqs []is.KeyID) ([]linInput, []linOutput, error) {
	var ins []linInput
	var outs []linOutput
	n := len(reqs)
	if !read {
		res, err := is.DropPrefixMany(f.ctx, st, ns, reqs)
		if err == nil && len(res) != n {
			err = fmt.Errorf("%d results for %d keys", len(res), n)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("DropPrefixMany(%v): %w", reqs, err)
		}
		for i, r := range res {
			if r.Err != nil {
				return nil, nil, fmt.Errorf("DropPrefixMany, key %q: %w", reqs[i].Key, r.Err)
			}
			ins = append(ins, linInput{key: reqs[i].Key, kind: linDropPrefix, a: reqs[i].ID, batch: n})
			outs = append(outs, linOutput{n: r.Dropped})
		}
		return ins, outs, nil
	}
	res, err := is.ClosestLastMany(f.ctx, st, ns, reqs)
	if err == nil && len(res) != n {
		err = fmt.Errorf("%d results for %d keys", len(res), n)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ClosestLastMany(%v): %w", reqs, err)
	}
	for i, r := range res {
		k, id := reqs[i].Key, reqs[i].ID
		switch {
		case r.Err != nil:
			return nil, nil, fmt.Errorf("ClosestLastMany, key %q: %w", k, r.Err)
		case r.Exists != (r.Last != 0):
			return nil, nil, fmt.Errorf("ClosestLastMany, key %q: last id %d with exists %v", k, r.Last, r.Exists)
		case r.Found && !slices.Equal(r.Entry.Value, value(k, r.Entry.ID)):
			return nil, nil, fmt.Errorf("ClosestLastMany, key %q id %d: value %q, want %q", k, r.Entry.ID, r.Entry.Value, value(k, r.Entry.ID))
		}
		found := linOutput{ok: r.Found}
		if r.Found {
			found.n = r.Entry.ID
		}
		if oneInstant {
			found.last = r.Last
			ins = append(ins, linInput{key: k, kind: linClosestLast, a: id, batch: n})
			outs = append(outs, found)
			continue
		}
		ins = append(ins, linInput{key: k, kind: linLastID, batch: n}, linInput{key: k, kind: linClosest, a: id, batch: n})
		outs = append(outs, linOutput{ok: r.Exists, n: r.Last}, found)
	}
	return ins, outs, nil
}

// linRun runs one operation against st and returns its output, or an error that fails the check: any
// error but a conflict on an append, or a value that is not the one written.
func (f *fixture) linRun(st is.Storage, in linInput) (linOutput, error) {
	var out linOutput
	var err error
	var e is.Entry
	ctx := f.ctx
	switch in.kind {
	case linExists:
		out.ok, err = st.Exists(ctx, ns, in.key)
	case linAppend:
		err = st.Append(ctx, ns, in.key, in.ids[0], value(in.key, in.ids[0]))
	case linAppendMany:
		err = st.AppendMany(ctx, ns, in.key, entries(in.key, in.ids...))
	case linLength:
		out.n, err = st.Length(ctx, ns, in.key)
	case linRead:
		var got []is.Entry
		got, err = st.Read(ctx, ns, in.key, in.a, in.b)
		for _, g := range got {
			if !slices.Equal(g.Value, value(in.key, g.ID)) {
				return out, fmt.Errorf("Read(%q) id %d: value %q, want %q", in.key, g.ID, g.Value, value(in.key, g.ID))
			}
			out.ids = append(out.ids, g.ID)
		}
	case linFirst:
		e, out.ok, err = st.First(ctx, ns, in.key)
	case linLast:
		e, out.ok, err = st.Last(ctx, ns, in.key)
	case linLastID:
		out.n, out.ok, err = st.LastID(ctx, ns, in.key)
	case linClosest:
		e, out.ok, err = st.Closest(ctx, ns, in.key, in.a)
	case linClosestLast:
		var exists bool
		e, out.ok, out.last, exists, err = st.(is.ClosestLastReader).ClosestLast(ctx, ns, in.key, in.a)
		if err == nil && exists != (out.last != 0) {
			return out, fmt.Errorf("ClosestLast(%q): last id %d with exists %v", in.key, out.last, exists)
		}
	case linDropPrefix:
		out.n, err = st.DropPrefix(ctx, ns, in.key, in.a)
	case linDelete:
		err = st.Delete(ctx, ns, in.key)
	}
	if (in.kind == linAppend || in.kind == linAppendMany) && errors.Is(err, is.ErrConflict) {
		return linOutput{conflict: true}, nil
	}
	if err != nil {
		return out, fmt.Errorf("%s(%q): %w", linOpNames[in.kind], in.key, err)
	}
	if in.kind == linFirst || in.kind == linLast || in.kind == linClosest || in.kind == linClosestLast {
		if out.ok && !slices.Equal(e.Value, value(in.key, e.ID)) {
			return out, fmt.Errorf("%s(%q) id %d: value %q, want %q", linOpNames[in.kind], in.key, e.ID, e.Value, value(in.key, e.ID))
		}
		out.n = e.ID
	}
	return out, nil
}

// history runs one random concurrent history on fresh keys and returns its operations. Call and return
// times come from one atomic clock, so an operation that returned before another was called has the
// smaller times: the real-time order porcupine needs.
func (f *fixture) history(n int, seed uint64) ([]porcupine.Operation, error) {
	keys := make([]string, linKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("lin/%d/%d", n, i)
	}
	var clock atomic.Int64
	var nextID atomic.Uint64
	ops := make([][]porcupine.Operation, linClients)
	errs := make([]error, linClients)
	var wg sync.WaitGroup
	_, closestLast := f.st.(is.ClosestLastReader)
	_, batchReader := f.st.(is.BatchReader)
	_, batchAppender := f.st.(is.BatchAppender)
	for c := range linClients {
		client := &linClient{rng: rand.New(rand.NewPCG(seed, uint64(c))), keys: keys, nextID: &nextID, closestLast: closestLast, belows: batchAppender}
		wg.Go(func() {
			for range linOps {
				if client.rng.IntN(6) == 0 {
					var ins []linInput
					var outs []linOutput
					var err error
					var call, ret int64
					if client.rng.IntN(3) == 0 {
						reqs := client.appendBatch()
						call = clock.Add(1)
						ins, outs, err = f.linRunAppendBatch(f.st, reqs)
						ret = clock.Add(1)
					} else {
						read, reqs := client.batch()
						call = clock.Add(1)
						ins, outs, err = f.linRunBatch(f.st, read, closestLast || batchReader, reqs)
						ret = clock.Add(1)
					}
					if err != nil {
						errs[c] = err
						return
					}
					for i := range ins {
						ops[c] = append(ops[c], porcupine.Operation{ClientId: c, Input: ins[i], Call: call, Output: outs[i], Return: ret})
					}
					continue
				}
				in := client.input()
				call := clock.Add(1)
				out, err := f.linRun(f.st, in)
				ret := clock.Add(1)
				if err != nil {
					errs[c] = err
					return
				}
				ops[c] = append(ops[c], porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(ops...), nil
}

func testLinearizable(t *testing.T, h Harness) {
	f := newFixture(t, h)
	histories := h.LinearizableHistories
	if histories == 0 {
		histories = 200
	}
	histories = quick(histories)
	seed := modelSeed(t)
	for n := range histories {
		ops, err := f.history(n, seed+uint64(n))
		if err != nil {
			t.Fatalf("history %d: %v", n, err)
		}
		result, info := porcupine.CheckOperationsVerbose(linModel, ops, 0)
		if result == porcupine.Ok {
			continue
		}
		path := visualizationPath(t, n)
		if err := porcupine.VisualizePath(linModel, info, path); err != nil {
			t.Logf("writing the visualization: %v", err)
		}
		t.Fatalf("history %d of %d (%d clients, %d operations on %d keys) is not linearizable: %s; porcupine's visualization is %s",
			n+1, histories, linClients, len(ops), linKeys, describeHistory(ops), path)
	}
}

// visualizationPath is where a failing history's visualization goes: STRATA_ARTIFACTS if set (CI keeps
// it), else the system's temporary directory, which outlives the test.
func visualizationPath(t *testing.T, n int) string {
	dir := os.Getenv("STRATA_ARTIFACTS")
	if dir == "" {
		dir = os.TempDir()
	}
	_ = os.MkdirAll(dir, 0o755)
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return filepath.Join(dir, fmt.Sprintf("porcupine-%s-%d.html", name, n))
}

// describeHistory lists a history's operations in call order, for the failure message.
func describeHistory(ops []porcupine.Operation) string {
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	var b strings.Builder
	for _, op := range sorted {
		fmt.Fprintf(&b, "\n  [%d,%d] client %d: %s", op.Call, op.Return, op.ClientId, linModel.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}
