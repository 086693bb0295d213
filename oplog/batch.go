package oplog

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// ReadRequest is one agent's part of a BatchLayer's ReadMany.
type ReadRequest struct {
	Agent    AgentID
	From, To Index
}

// ReadResult is one agent's part of ReadMany: what LastReader's ReadLast returns for it.
type ReadResult struct {
	Entries []Entry
	Last    Index
	Exists  bool
	Err     error // this agent's part failed; the other agents' stand
}

// DropRequest is one agent's part of a BatchLayer's DropPrefixMany.
type DropRequest struct {
	Agent AgentID
	UpTo  Index
}

// DropResult is one agent's part of DropPrefixMany: what DropPrefix returns for it.
type DropResult struct {
	Dropped uint64
	Err     error
}

// BatchLayer is implemented by a layer that reads and drops many oplogs of one mode in one storage call
// each (indexedstorage's BatchReader and BatchDropper, where its storage has them). A batch drain reads
// and drops through it; a layer without it is read and dropped one oplog at a time.
type BatchLayer interface {
	// ReadMany reads each request's oplog as ReadLast does, except that it may stop after the first
	// stored unit (a chunk) from From on: at least one entry when the range holds one, contiguous,
	// never past To, and the layer's last index read with it. Results are in the order of reqs; an
	// oplog that cannot be read fails its part only.
	ReadMany(ctx context.Context, mode Mode, reqs []ReadRequest) ([]ReadResult, error)
	// DropPrefixMany is DropPrefix of each request's oplog, each part with DropPrefix's rules. Results
	// are in the order of reqs.
	DropPrefixMany(ctx context.Context, mode Mode, reqs []DropRequest) ([]DropResult, error)
}

// AppendRequest is one agent's part of a BatchAppender's AppendBatch: entries to append to its oplog.
type AppendRequest struct {
	Agent   AgentID
	Entries []Entry
}

// ErrHeldAlready is an AppendBatch part refused for an overlap where the layer holds exactly those
// entries already, byte for byte (another drain of the agent wrote them first): nothing was appended
// and readers see each index once. A hop counts them compared, not moved; Append reports it as nil.
var ErrHeldAlready = errors.New("the layer holds exactly these entries already")

// BatchAppender is implemented by a layer that writes many oplogs' entries of one mode in one go: the
// packed blob layer writes a batch's chunks as one segment. A batch drain appends to a target through
// it; a target without it is appended to one oplog at a time.
type BatchAppender interface {
	// AppendBatch is Append of each request's entries, each part with Append's rules (ErrConflict for
	// an overlap, all or nothing on its oplog). The result has one error a request, in the order of
	// reqs (nil: appended; ErrHeldAlready: the layer held them already); the call's own error means no
	// part is known to have taken effect or not.
	AppendBatch(ctx context.Context, mode Mode, reqs []AppendRequest) ([]error, error)
}

// LastResult is one agent's part of a BatchLastReader's LastIndexMany: what LastIndex returns for it.
type LastResult struct {
	Last   Index
	Exists bool
	Err    error
}

// BatchLastReader is implemented by a layer that reads the last index of many oplogs of one mode in one
// storage call. A batch drain into the bottom layer reads the target's last indices (step 2) this way.
type BatchLastReader interface {
	// LastIndexMany is LastIndex of each agent, in the order of agents; an agent whose oplog cannot
	// be read fails its part only.
	LastIndexMany(ctx context.Context, mode Mode, agents []AgentID) ([]LastResult, error)
}

// BatchWorkers is how many agents of a batch drain write to the layers below at once: the reads and
// the drops of a batch are one call each, the appends one per agent.
const BatchWorkers = 8

// readMany is l's ReadMany where l is a BatchLayer, else ReadLast of each request (BatchWorkers at
// once), each with ChunkLimit.
func readMany(ctx context.Context, l Layer, mode Mode, reqs []ReadRequest) ([]ReadResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if b, ok := l.(BatchLayer); ok {
		return b.ReadMany(ctx, mode, reqs)
	}
	out := make([]ReadResult, len(reqs))
	each(ctx, len(reqs), func(ctx context.Context, i int) {
		r := reqs[i]
		out[i].Entries, out[i].Last, out[i].Exists, out[i].Err = readLast(ctx, l, r.Agent, mode, r.From, r.To, ChunkLimit)
	})
	return out, nil
}

// dropMany is l's DropPrefixMany where l is a BatchLayer, else DropPrefix of each request.
func dropMany(ctx context.Context, l Layer, mode Mode, reqs []DropRequest) ([]DropResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if b, ok := l.(BatchLayer); ok {
		return b.DropPrefixMany(ctx, mode, reqs)
	}
	out := make([]DropResult, len(reqs))
	each(ctx, len(reqs), func(ctx context.Context, i int) {
		out[i].Dropped, out[i].Err = l.DropPrefix(ctx, reqs[i].Agent, mode, reqs[i].UpTo)
	})
	return out, nil
}

// targetLasts reads, in one call, the target's last index of every active hop out of layer i whose
// batch holds entries and whose append does not check it (hop.appendChecks), where the target is the
// bottom layer and a BatchLastReader, and hands each to its hop for step 2 (hop.targetLast). A failure
// of the call is each hop's error.
func (s *Stack) targetLasts(ctx context.Context, mode Mode, i int, hops []*hop, active []int, batches [][]Entry, failed []bool, errs []error) {
	target, ok := s.layers[i+1].(BatchLastReader)
	if !ok || i+1 != len(s.layers)-1 {
		return
	}
	var ks []int
	var agents []AgentID
	for _, k := range active {
		if !failed[k] && len(batches[k]) > 0 && !hops[k].appendChecks {
			ks = append(ks, k)
			agents = append(agents, hops[k].agent)
		}
	}
	if len(agents) == 0 {
		return
	}
	res, err := target.LastIndexMany(ctx, mode, agents)
	if err == nil && len(res) != len(agents) {
		err = fmt.Errorf("%s: last index of %d oplogs: %d results", s.layers[i+1].Name(), len(agents), len(res))
	}
	for j, k := range ks {
		switch {
		case err != nil:
			errs[k] = err
		case res[j].Err != nil:
			errs[k] = res[j].Err
		default:
			hops[k].targetLast = &res[j].Last
		}
	}
}

// appendMany is l's AppendBatch where l is a BatchAppender, else Append of each request (BatchWorkers at
// once). A failure of the call as a whole is every request's.
func appendMany(ctx context.Context, l Layer, mode Mode, reqs []AppendRequest) []error {
	out := make([]error, len(reqs))
	if len(reqs) == 0 {
		return out
	}
	if b, ok := l.(BatchAppender); ok {
		errs, err := b.AppendBatch(ctx, mode, reqs)
		if err == nil && len(errs) != len(reqs) {
			err = fmt.Errorf("%s: append batch: %d results for %d oplogs", l.Name(), len(errs), len(reqs))
		}
		if err != nil {
			for i := range out {
				out[i] = err
			}
			return out
		}
		return errs
	}
	each(ctx, len(reqs), func(ctx context.Context, i int) {
		out[i] = l.Append(ctx, reqs[i].Agent, mode, reqs[i].Entries)
	})
	return out
}

// each runs fn(i) for i in [0, n), BatchWorkers at once.
func each(ctx context.Context, n int, fn func(ctx context.Context, i int)) {
	var g errgroup.Group
	g.SetLimit(BatchWorkers)
	for i := range n {
		g.Go(func() error { fn(ctx, i); return nil })
	}
	_ = g.Wait() // fn returns no error: each part keeps its own
}

// Seen is one agent of a batch drain and the last index the sweep's gate saw in the drained layer.
// Index 0 is a gate that passed the agent without reading its index (its storage's stamps vouched that
// the index did not change between two sightings, is.Page.Stamps): the first read takes the layer's
// last index as it finds it, with nothing to re-check, as Drain's does.
type Seen struct {
	Agent AgentID
	Index Index
}

// bound is how far a drain of s reads the layer: up to the index the gate saw, or to the end.
func (s Seen) bound() Index {
	if s.Index == 0 {
		return readToEnd
	}
	return s.Index
}

// movedOn reports whether the layer's last index, read by a drain's first read, is no longer the one
// the gate saw (never, where the gate read none).
func (s Seen) movedOn(last Index) bool { return s.Index != 0 && last != s.Index }

// DrainResult is one agent's part of a batch drain: what DrainSeen (or Drain) returns for it.
type DrainResult struct {
	Drained
	Err error
}

// DrainSeenMany is DrainSeen of many agents of one mode from one layer, in batches: each round reads
// the next chunk of every agent still under way in one call of the layer (BatchLayer), writes each
// below, and drops them from the layer in one call; then the layers below, down to the bottom, the
// same way. Per agent, everything DrainSeen promises holds: its first read re-checks the gate (an agent
// whose last index is no longer the one seen moves nothing and fails with MovedOnError; one the layer
// no longer holds is no hop), ErrIndexReused fails that agent only, nothing is dropped that was not
// read back from below or written there, an agent with more chunks goes on in the next round, and a
// failure or a crash between any two calls converges on a re-run with nothing lost or doubled. An
// agent's failure is its result's Err; the others go on. Results are in the order of seen.
//
// The call fails as a whole only for a layer that a mode's oplog does not use (nothing is read). An
// agent that cannot be addressed, or that appears twice, fails its own part.
func (s *Stack) DrainSeenMany(ctx context.Context, mode Mode, layer int, seen []Seen) ([]DrainResult, error) {
	if !s.built() {
		return nil, ErrStackNotBuilt
	}
	if _, err := ParseMode(string(mode)); err != nil {
		return nil, err
	}
	if _, top := s.layersOf(mode); layer < top || layer >= len(s.layers)-1 {
		return nil, fmt.Errorf("drain: layer %d is not a layer above the bottom that a %s oplog uses", layer, mode)
	}
	out := make([]DrainResult, len(seen))
	s.drainLayers(ctx, mode, layer, seen, s.admit(mode, seen, out), out, true)
	return out, nil
}

// DrainMany is Drain of many agents of one mode, in batches: layer by layer from the top of the mode's
// oplog down, each layer's hops batched as in DrainSeenMany, each agent's entries moved as far as the
// layer holds them when the drain reaches it. An executor drains the agents it tears down this way;
// the durable route drains its locked agents this way. Entries written above a layer after the drain
// passed it stay there (under the executor's lock nothing writes meanwhile). An agent's failure is its
// result's Err; the others go on. Results are in the order of agents.
func (s *Stack) DrainMany(ctx context.Context, mode Mode, agents []AgentID) ([]DrainResult, error) {
	if !s.built() {
		return nil, ErrStackNotBuilt
	}
	if _, err := ParseMode(string(mode)); err != nil {
		return nil, err
	}
	seen := make([]Seen, len(agents))
	for i, a := range agents {
		seen[i].Agent = a
	}
	out := make([]DrainResult, len(agents))
	_, top := s.layersOf(mode)
	s.drainLayers(ctx, mode, top, seen, s.admit(mode, seen, out), out, false)
	return out, nil
}

// admit returns the positions of seen that can be drained, failing in out the agents that cannot be
// addressed and every later copy of an agent already in the batch.
func (s *Stack) admit(mode Mode, seen []Seen, out []DrainResult) []int {
	live := make([]int, 0, len(seen))
	first := make(map[AgentID]int, len(seen))
	for i, sn := range seen {
		if err := checkOplog(sn.Agent, mode); err != nil {
			out[i].Err = err
			continue
		}
		if j, dup := first[sn.Agent]; dup {
			out[i].Err = fmt.Errorf("drain %s: the agent is in the batch twice (also at %d)", sn.Agent, j)
			continue
		}
		first[sn.Agent] = i
		live = append(live, i)
	}
	return live
}

// drainLayers drains the agents at positions live from layer down to the bottom, one batched hop per
// layer. checkSeen: the first layer's read must find seen's index as its last (DrainSeen), else what
// the read finds is drained (Drain). Where the drain passed more than one layer, each agent is then
// stepped as Drain steps it until no layer above the bottom holds its entries, within the step cap: a
// layer below that kept entries after its hop (a racing writer, a layer that drops less than it says)
// is met there, not handed on as drained.
func (s *Stack) drainLayers(ctx context.Context, mode Mode, layer int, seen []Seen, live []int, out []DrainResult, checkSeen bool) {
	bottom := len(s.layers) - 1
	for i := layer; i < bottom && len(live) > 0; i++ {
		steps := s.drainLayer(ctx, mode, i, live, seen, out, checkSeen && i == layer)
		next := live[:0]
		for k, at := range live {
			out[at].Moved += steps[k].Moved
			out[at].Bytes += steps[k].Bytes
			// An agent the checked layer no longer held is no hop, as in DrainSeen: a teardown
			// drain won, and took it down.
			noHop := checkSeen && i == layer && steps[k].Source == ""
			if out[at].Err == nil && !noHop {
				out[at].finish(steps[k], i)
				next = append(next, at)
			}
		}
		live = next
	}
	if bottom-layer < 2 {
		return
	}
	each(ctx, len(live), func(ctx context.Context, k int) {
		at := live[k]
		out[at].Drained, out[at].Err = s.steps(ctx, seen[at].Agent, mode, out[at].Drained, s.MaxHops()-(bottom-layer))
	})
}

// cut reports whether err is the end of ctx (or a cancellation or deadline the store met) rather than a
// failure of its own.
func cut(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// readToEnd is the upper bound of a read that takes whatever the layer holds.
const readToEnd = Index(1<<63 - 1)

// drainLayer is one batched hop of the agents at positions live out of layer i, and returns each
// one's Step (in the order of live); an agent's failure is set in out. Every round makes the hops'
// step 1 in one read of the layer, steps 2 and 3 agent by agent (BatchWorkers at once), step 4 in one
// call of the target where it is a BatchAppender, and step 5 in one drop of the layer. checkSeen: the
// first read must find seen's index as the layer's last.
func (s *Stack) drainLayer(ctx context.Context, mode Mode, i int, live []int, seen []Seen, out []DrainResult, checkSeen bool) []Step {
	src := s.layers[i]
	hops := make([]*hop, len(live)) // nil: no hop (the layer holds nothing of the agent, or it failed before one)
	failed := make([]bool, len(live))
	fail := func(k int, err error) {
		failed[k] = true
		if h := hops[k]; h != nil {
			err = fmt.Errorf("archive %s from %s to %s: %w", h.agent, h.step.Source, h.step.Target, err)
		} else {
			err = fmt.Errorf("archive %s from %s: %w", seen[live[k]].Agent, src.Name(), err)
		}
		out[live[k]].Err = err
	}

	// The first read, with each agent's last index: the gate's re-check where checkSeen.
	reqs := make([]ReadRequest, len(live))
	for k, at := range live {
		reqs[k] = ReadRequest{Agent: seen[at].Agent, From: 1, To: readToEnd}
		if checkSeen {
			reqs[k].To = seen[at].bound()
		}
	}
	started := s.now()
	first, err := readMany(ctx, src, mode, reqs)
	for k, at := range live {
		var r ReadResult
		if err == nil {
			r = first[k]
		}
		switch {
		case err != nil:
			fail(k, err)
		case r.Err != nil && !cut(ctx, r.Err):
			fail(k, &UnreadableError{Layer: src.Name(), Err: r.Err})
		case r.Err != nil:
			fail(k, r.Err) // the drain's context ended the read: the cut's failure, not the key's
		case !r.Exists: // a concurrent drain moved everything: no hop
		case checkSeen && seen[at].movedOn(r.Last):
			failed[k] = true
			out[at].Err = &MovedOnError{Layer: src.Name(), Seen: seen[at].Index, Last: r.Last}
		default:
			// Where the layer read its last index apart from the entries, entries past it are a
			// writer's since: not this hop's.
			entries := r.Entries
			for len(entries) > 0 && entries[len(entries)-1].Index > r.Last {
				entries = entries[:len(entries)-1]
			}
			if entries == nil {
				entries = []Entry{}
			}
			hops[k] = newHop(seen[at].Agent, mode, src, s.layers[i+1:], r.Last, entries)
			hops[k].tombs, hops[k].started = s.tombs, started
		}
	}

	for {
		var active []int
		for k, h := range hops {
			if h != nil && !failed[k] && !h.done() {
				active = append(active, k)
			}
		}
		if len(active) == 0 {
			break
		}
		// Step 1, for the hops whose batch is not the first read's.
		batches := make([][]Entry, len(hops))
		var readers []int
		var rreqs []ReadRequest
		for _, k := range active {
			if h := hops[k]; h.first != nil {
				batches[k], h.first = h.first, nil
			} else {
				readers = append(readers, k)
				rreqs = append(rreqs, ReadRequest{Agent: h.agent, From: h.next, To: h.last})
			}
		}
		res, err := readMany(ctx, src, mode, rreqs)
		for j, k := range readers {
			switch {
			case err != nil:
				fail(k, err)
			case res[j].Err != nil:
				fail(k, res[j].Err)
			default:
				batches[k] = res[j].Entries
			}
		}
		// Steps 2 and 3, agent by agent; the target's last indices in one call where the target is
		// the bottom (no hop moves anything on from there, so the source need not be looked at first)
		// and a BatchLastReader.
		upTo := make([]Index, len(hops))
		errs := make([]error, len(hops))
		aboves := make([][]Entry, len(hops))
		s.targetLasts(ctx, mode, i, hops, active, batches, failed, errs)
		each(ctx, len(active), func(ctx context.Context, j int) {
			if k := active[j]; !failed[k] && errs[k] == nil {
				aboves[k], errs[k] = hops[k].prepare(ctx, batches[k]) // each k is one worker's
			}
		})
		// Step 4, in one call of the target where it takes batches (one segment for the round).
		var writers []int
		var areqs []AppendRequest
		for _, k := range active {
			if !failed[k] && errs[k] == nil && len(aboves[k]) > 0 {
				writers = append(writers, k)
				areqs = append(areqs, AppendRequest{Agent: hops[k].agent, Entries: aboves[k]})
			}
		}
		appendErrs := make([]error, len(hops))
		for j, err := range appendMany(ctx, s.layers[i+1], mode, areqs) {
			appendErrs[writers[j]] = err
		}
		for _, k := range active {
			if !failed[k] && errs[k] == nil {
				upTo[k], errs[k] = hops[k].settle(aboves[k], appendErrs[k])
			}
		}
		// Step 5, in one call.
		var droppers []int
		var dreqs []DropRequest
		for _, k := range active {
			switch {
			case errs[k] != nil:
				fail(k, errs[k])
			case !failed[k] && upTo[k] > 0:
				droppers = append(droppers, k)
				dreqs = append(dreqs, DropRequest{Agent: hops[k].agent, UpTo: upTo[k]})
			}
		}
		dres, err := dropMany(ctx, src, mode, dreqs)
		for j, k := range droppers {
			switch {
			case err != nil:
				fail(k, err)
			case dres[j].Err != nil:
				fail(k, dres[j].Err)
			default:
				hops[k].dropped(upTo[k], dres[j].Dropped)
			}
		}
		// An erasure's side of the drops (hop.afterDrop): a call only where a drop found the source
		// emptied after an append.
		each(ctx, len(droppers), func(ctx context.Context, j int) {
			if k := droppers[j]; !failed[k] {
				errs[k] = hops[k].afterDrop(ctx)
			}
		})
		for _, k := range droppers {
			if errs[k] != nil && !failed[k] {
				fail(k, errs[k])
			}
		}
	}
	steps := make([]Step, len(live))
	for k, h := range hops {
		if h != nil {
			steps[k] = h.step
		}
	}
	return steps
}
