package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// The batch operations (is.BatchReader, is.BatchDropper, is.BatchAppender) run the per-key scripts'
// Lua functions over many indexes in one script, and send the scripts of a batch in one pipeline:
//
//   - On a cluster (or a ring) the keys are grouped by their tag (ns|T, so by hash slot): one script a
//     tag, and go-redis sends each node's scripts to it in parallel, in one round trip each.
//   - On one node a script may touch keys of any slot, so the batch is one script (one command).
//   - Either way one script visits at most maxScriptKeys indexes: a script blocks the server while it
//     runs and holds every value it read in Lua's memory until it returns, so a batch of thousands of
//     large chunks goes as several scripts (still in the one pipeline).
//
// Each key's part is its per-key script's function, called under Lua's pcall: a key whose call fails
// (WRONGTYPE from a key another program replaced) returns an error reply in its place, and the script
// goes on with the next key. Every rule of the per-key scripts holds per key, because it is their code.

var (
	_ is.BatchReader   = (*Store)(nil)
	_ is.BatchDropper  = (*Store)(nil)
	_ is.BatchAppender = (*Store)(nil)
)

// maxScriptKeys is the most indexes one batch script visits.
const maxScriptKeys = 256

// failedLua turns what pcall caught (an error table from redis.call, or a Lua error's string) into an
// error reply, one element of a batch script's reply.
const failedLua = `
local function failed(e)
  if type(e) == 'table' and e.err then e = e.err end
  return redis.error_reply(tostring(e))
end
`

// closestLastManyScript is closest_last of each index. KEYS: the indexes; ARGV[i]: KEYS[i]'s bound.
// Its reply has one element a key: closestLastScript's reply, or an error reply.
var closestLastManyScript = goredis.NewScript(closestLastLua + failedLua + `
local out = {}
for i = 1, #KEYS do
  local ok, r = pcall(closest_last, KEYS[i], ARGV[i])
  if ok then out[i] = r else out[i] = failed(r) end
end
return out
`)

// dropPrefixManyScript is drop_prefix of each index. KEYS: an index and its index set, for each
// index; ARGV: that index's bound and key, in the same order. Its reply has one element an index:
// the number dropped, or an error reply.
var dropPrefixManyScript = goredis.NewScript(dropPrefixLua + failedLua + `
local out = {}
for i = 1, #KEYS / 2 do
  local ok, r = pcall(drop_prefix, KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1], ARGV[2 * i])
  if ok then out[i] = r else out[i] = failed(r) end
end
return out
`)

// appendKeysScript is append_entries of each index. KEYS: an index and its index set, for each index;
// ARGV, for each index in the same order: how many arguments of its follow (n), then its bound (the
// 8 bytes of is.KeyEntries.Bound: the first id, or Below), its key and its score/member pairs, as
// appendScript's ARGV. Its reply has one element an index: the number of
// entries appended, or an error reply (a conflict, as appendScript's).
var appendKeysScript = goredis.NewScript(appendLua + failedLua + `
local out = {}
local at = 1
for i = 1, #KEYS / 2 do
  local n = tonumber(ARGV[at])
  local ok, r = pcall(append_entries, KEYS[2 * i - 1], KEYS[2 * i], ARGV[at + 1], ARGV[at + 2], ARGV, at + 3, at + n)
  if ok then out[i] = r else out[i] = failed(r) end
  at = at + n + 1
end
return out
`)

// ClosestLastMany is one pipeline of scripts: one script on one node, one a hash slot on a cluster
// (is.BatchReader).
func (s *Store) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	const op = is.OpClosestLastMany
	if err := s.beginBatch(op, ns, reqs); err != nil {
		return nil, err
	}
	groups := s.batchGroups(reqs, nil, func(g *batchGroup, r is.KeyID) {
		bound := "+" // no id is above MaxID, so nothing is closest: ZRANGEBYLEX + + is empty
		if r.ID <= is.MaxID {
			bound = inclusive(max(r.ID, 1))
		}
		g.keys = append(g.keys, s.RedisKey(ns, r.Key))
		g.args = append(g.args, bound)
	})
	out := make([]is.ClosestLastResult, len(reqs))
	err := s.runBatch(ctx, closestLastManyScript, groups, false,
		func(i int, v any) error {
			vals, ok := v.([]any)
			if !ok {
				return fmt.Errorf("script returned %T for the index (another writer uses this key?)", v)
			}
			r, err := decodeClosestLast(vals)
			out[i] = r
			return err
		},
		func(i int, err error) { out[i] = is.ClosestLastResult{Err: fail(op, ns, reqs[i].Key, err)} })
	if err != nil {
		return nil, fail(op, ns, "", err)
	}
	return out, nil
}

// DropPrefixMany is one pipeline of scripts: one script on one node, one a hash slot on a cluster
// (is.BatchDropper). With WaitReplicas set, each node's pipeline ends with WAIT, as DropPrefix's
// script does; a key whose drop was done but not acknowledged in time fails with ErrTransient.
func (s *Store) DropPrefixMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	const op = is.OpDropPrefixMany
	if err := s.beginBatch(op, ns, reqs); err != nil {
		return nil, err
	}
	// An upTo of 0 drops nothing and touches nothing, as DropPrefix: ids start at 1.
	skip := func(r is.KeyID) bool { return r.ID == 0 }
	groups := s.batchGroups(reqs, skip, func(g *batchGroup, r is.KeyID) {
		data, set := s.keys(ns, r.Key)
		g.keys = append(g.keys, data, set)
		g.args = append(g.args, exclusive(min(r.ID, is.MaxID)+1), r.Key)
	})
	if len(groups) > 0 && s.readOnly {
		return nil, fail(op, ns, "", fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument))
	}
	out := make([]is.DropResult, len(reqs))
	err := s.runBatch(ctx, dropPrefixManyScript, groups, true,
		func(i int, v any) error {
			n, ok := v.(int64)
			if !ok || n < 0 {
				return fmt.Errorf("script returned %v (%T) for the index's drop", v, v)
			}
			out[i].Dropped = uint64(n)
			return nil
		},
		func(i int, err error) { out[i] = is.DropResult{Err: fail(op, ns, reqs[i].Key, err)} })
	if err != nil {
		return nil, fail(op, ns, "", err)
	}
	return out, nil
}

// AppendKeys is one pipeline of scripts: one script on one node, one a hash slot on a cluster
// (is.BatchAppender). Each key's part is AppendMany's script, run as a function under pcall: all or
// nothing on its index, a conflict (naming the index's last id) or a key of the wrong type failing
// that key alone. With WaitReplicas set, each node's pipeline ends with WAIT, as DropPrefixMany's.
func (s *Store) AppendKeys(ctx context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	const op = is.OpAppendKeys
	if err := is.ValidateAppendKeys(ns, reqs); err != nil {
		return nil, fail(op, ns, "", err)
	}
	if s.closed.Load() {
		return nil, fail(op, ns, "", is.ErrClosed)
	}
	// AppendMany of nothing touches nothing.
	skip := func(r is.KeyEntries) bool { return len(r.Entries) == 0 }
	groups := groupBatch(s.sharded, reqs, func(r is.KeyEntries) string { return r.Key }, skip, func(g *batchGroup, r is.KeyEntries) {
		data, set := s.keys(ns, r.Key)
		g.keys = append(g.keys, data, set)
		g.args = append(g.args, 2+2*len(r.Entries), binary.BigEndian.AppendUint64(nil, r.Bound()))
		g.args = appendMembers(g.args, r.Key, r.Entries)
	})
	if len(groups) > 0 && s.readOnly {
		return nil, fail(op, ns, "", fmt.Errorf("%w: the store was opened read-only", is.ErrInvalidArgument))
	}
	out := make([]error, len(reqs))
	err := s.runBatch(ctx, appendKeysScript, groups, true,
		func(i int, v any) error {
			if n, ok := v.(int64); !ok || n != int64(len(reqs[i].Entries)) {
				return fmt.Errorf("script returned %v (%T) for the index's append of %d entries", v, v, len(reqs[i].Entries))
			}
			return nil
		},
		func(i int, err error) { out[i] = fail(op, ns, reqs[i].Key, appendFailure(err, reqs[i].Bound())) })
	if err != nil {
		return nil, fail(op, ns, "", err)
	}
	return out, nil
}

// beginBatch validates a batch's arguments and checks the Store is open; its error names no key.
func (s *Store) beginBatch(op is.Operation, ns string, reqs []is.KeyID) error {
	if err := is.ValidateBatchKeys(ns, reqs); err != nil {
		return fail(op, ns, "", err)
	}
	if s.closed.Load() {
		return fail(op, ns, "", is.ErrClosed)
	}
	return nil
}

// batchGroup is one script of a batch: the parts it runs (indexes into the batch), its KEYS and ARGV,
// and what became of it.
type batchGroup struct {
	parts []int
	keys  []string
	args  []any
	cmd   *goredis.Cmd // nil if it was not sent (err says why)
	err   error        // not sent: the group failed as a whole
	// waitErr: the script ran, but WAIT failed or fewer replicas than asked acknowledged it in time.
	waitErr error
}

// failed is the group's failure as a whole, nil if its script ran.
func (g *batchGroup) failed() error {
	if g.cmd == nil {
		return g.err
	}
	return g.cmd.Err()
}

// batchGroups groups the batch's keys into scripts, in the order of reqs: on a sharded client one
// group a tag (the keys of a tag share one hash slot), else one group; either way at most
// maxScriptKeys keys a group. A key skip reports is in no group. add appends a key's KEYS and ARGV to
// its group.
func (s *Store) batchGroups(reqs []is.KeyID, skip func(is.KeyID) bool, add func(*batchGroup, is.KeyID)) []*batchGroup {
	return groupBatch(s.sharded, reqs, func(r is.KeyID) string { return r.Key }, skip, add)
}

// groupBatch is batchGroups over the parts of any batch, key naming each part's key; sharded groups by
// tag.
func groupBatch[R any](sharded bool, reqs []R, key func(R) string, skip func(R) bool, add func(*batchGroup, R)) []*batchGroup {
	var groups []*batchGroup
	open := map[string]*batchGroup{}
	for i, r := range reqs {
		if skip != nil && skip(r) {
			continue
		}
		tag := ""
		if sharded {
			tag = tagID(key(r))
		}
		g := open[tag]
		if g == nil || len(g.parts) == maxScriptKeys {
			g = &batchGroup{}
			open[tag] = g
			groups = append(groups, g)
		}
		g.parts = append(g.parts, i)
		add(g, r)
	}
	return groups
}

// runBatch runs script over each group, and hands each part's reply to ok, or its failure to bad (a
// failure of ok's too). A group that failed as a whole (its node unreachable) fails each of its parts;
// the other groups' parts stand. If every group failed as a whole, no part is known: runBatch hands
// nothing and returns the first group's error. A write (write) waits for replicas where configured.
func (s *Store) runBatch(ctx context.Context, script *goredis.Script, groups []*batchGroup, write bool,
	ok func(i int, v any) error, bad func(i int, err error)) error {
	if len(groups) == 0 {
		return nil
	}
	wait := write && s.wait.Replicas > 0
	s.sendBatch(ctx, script, groups, wait, false)
	// A node that lost its script cache (a restart, a failover, SCRIPT FLUSH) answers NOSCRIPT and ran
	// nothing: those groups go again with the script's text, as Script.Run falls back to EVAL.
	var again []*batchGroup
	for _, g := range groups {
		if isNoScript(g.failed()) {
			again = append(again, g)
		}
	}
	if len(again) > 0 {
		s.sendBatch(ctx, script, again, wait, true)
	}

	var first error
	whole := 0
	for _, g := range groups {
		if err := g.failed(); err != nil {
			whole++
			if first == nil {
				first = err
			}
		}
	}
	if whole == len(groups) {
		return first
	}
	for _, g := range groups {
		vals, err := g.cmd.Slice()
		if err == nil && len(vals) != len(g.parts) {
			err = fmt.Errorf("script returned %d replies for %d indexes", len(vals), len(g.parts))
		}
		if err != nil {
			for _, i := range g.parts {
				bad(i, err)
			}
			continue
		}
		for j, i := range g.parts {
			if e, isErr := vals[j].(error); isErr {
				bad(i, e)
			} else if err := ok(i, vals[j]); err != nil {
				bad(i, err)
			} else if g.waitErr != nil {
				bad(i, g.waitErr)
			}
		}
	}
	return nil
}

// sendBatch sends the groups' scripts in one pipeline (EVALSHA, or EVAL if eval) and waits for the
// replies. With wait, WAIT follows each node's scripts on the connection that sent them.
func (s *Store) sendBatch(ctx context.Context, script *goredis.Script, groups []*batchGroup, wait, eval bool) {
	queue := func(pipe goredis.Pipeliner, gs []*batchGroup) {
		for _, g := range gs {
			g.err, g.waitErr = nil, nil
			if eval {
				g.cmd = script.Eval(ctx, pipe, g.keys, g.args...)
			} else {
				g.cmd = script.EvalSha(ctx, pipe, g.keys, g.args...)
			}
		}
	}
	if !wait {
		pipe := s.client.Pipeline()
		queue(pipe, groups)
		_, _ = pipe.Exec(ctx) // each command holds its own reply or error
		return
	}
	// WAIT counts the replicas that acknowledged every write of its own connection, so each master's
	// groups go in one pipeline of that master's client (one connection), WAIT last.
	waitOn := func(pipe goredis.Pipeliner, gs []*batchGroup) {
		queue(pipe, gs)
		cmd := pipe.Do(ctx, "WAIT", s.wait.Replicas, s.wait.Timeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		err := s.waited(cmd)
		for _, g := range gs {
			g.waitErr = err
		}
	}
	cc, ok := s.client.(*goredis.ClusterClient)
	if !ok {
		waitOn(s.client.Pipeline(), groups)
		return
	}
	byNode := map[*goredis.Client][]*batchGroup{}
	for _, g := range groups {
		node, err := cc.MasterForKey(ctx, g.keys[0])
		if err != nil {
			g.cmd, g.err = nil, err
			continue
		}
		byNode[node] = append(byNode[node], g)
	}
	var wg sync.WaitGroup
	for node, gs := range byNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waitOn(node.Pipeline(), gs)
		}()
	}
	wg.Wait()
}

// isNoScript reports whether err says the server does not have the script: nothing ran.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}
