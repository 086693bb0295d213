package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// UnescapeSegment is EscapeSegment's inverse, for a segment EscapeSegment can have made: bytes of
// [A-Za-z0-9_-] as they are and %XX (upper-case hex) for every other byte, nothing else. ok is false
// for anything else, a bounded segment (PathSegment's hashed form, which holds a '.') included: its
// string cannot be recovered from it.
func UnescapeSegment(seg string) (s string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if segmentByte(c) {
			b.WriteByte(c)
			continue
		}
		if c != '%' || i+2 >= len(seg) {
			return "", false
		}
		v, err := strconv.ParseUint(seg[i+1:i+3], 16, 8)
		if err != nil || segmentByte(byte(v)) || seg[i+1:i+3] != strings.ToUpper(seg[i+1:i+3]) {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// ParseChunkPath parses a blob path of the chunk layout, "{mode}/{L}/{bucket}/{component}/{name}/{last
// index}": the agent whose chunk it is, when its segments can be unescaped (not PathSegment's bounded
// form of a long string) and name an agent of that bucket, and the chunk's last index. dir is the
// agent's directory, the path less its last segment. ok is false for a path of another shape.
func ParseChunkPath(path string) (agent oplog.AgentID, known bool, mode oplog.Mode, level int, dir string, last oplog.Index, ok bool) {
	parts := strings.Split(path, "/")
	if len(parts) != 6 {
		return agent, false, "", 0, "", 0, false
	}
	m, err := oplog.ParseMode(parts[0])
	l, lerr := strconv.Atoi(parts[1])
	n, nerr := strconv.ParseUint(parts[5], 10, 64)
	bucket, berr := strconv.ParseUint(parts[2], 16, 32)
	if err != nil || lerr != nil || l < 0 || parts[1] != strconv.Itoa(l) || nerr != nil || n == 0 || n > is.MaxID ||
		len(parts[5]) != 20 || berr != nil || len(parts[2]) != 4 || bucket >= oplog.Buckets {
		return agent, false, "", 0, "", 0, false
	}
	dir = strings.Join(parts[:5], "/") + "/"
	component, cok := UnescapeSegment(parts[3])
	name, nok := UnescapeSegment(parts[4])
	if cok && nok {
		a := oplog.AgentID{Component: component, Name: name}
		if a.Validate() == nil && a.Bucket() == int(bucket) {
			agent, known = a, true
		}
	}
	return agent, known, m, l, dir, oplog.Index(n), true
}

// MigrateOptions configures MigrateChunks; the zero value is the defaults.
type MigrateOptions struct {
	// Batch is how many agents share a segment (the sweep's page size, 128, when < 1).
	Batch int
	// Agents names agents whose chunk directories cannot be parsed back into their keys (a component
	// or name longer than a path segment holds, stored in PathSegment's bounded form): each is
	// migrated when its directory is found.
	Agents []oplog.AgentID
}

// MigrateReport is what MigrateChunks did.
type MigrateReport struct {
	Agents  int   `json:"agents"`  // agents moved whole into the packed layout, their chunk blobs removed
	Entries int64 `json:"entries"` // entries appended to the packed layout
	// Unknown lists the chunk directories whose agent could not be told from the path and was not
	// named in MigrateOptions.Agents: left in the chunk layout.
	Unknown []string `json:"unknown"`
	// Failed lists the agents left (wholly or partly) in the chunk layout, each with why.
	Failed []string `json:"failed"`
	// Foreign counts the blobs under the level that are neither chunks nor segments: left alone.
	Foreign int `json:"foreign"`
}

// MigrateChunks packs blob level level of mode from the chunk layout into the packed layout over the
// same blob store, its index in st: every agent's chunks are read (Blob.Read: overlaps resolved, each
// index once), appended to the packed layer in batches of opts.Batch agents (one segment a round of a
// batch), and once the packed layout holds all of an agent's indices, compared equal, its chunk blobs
// are deleted. Crash-safe at every call: the order is the archive's (segment, rows, then the removal
// from the layout moved out of), a re-run compares what both layouts hold and goes on, and an agent
// whose indices differ between them (ErrIndexReused) is reported and keeps its chunks. It must not run
// while a packed sidecar archives the same level: an agent archived into the packed layout first holds
// rows above its chunks, which the index then refuses (reported as failed; migrate before switching).
func MigrateChunks(ctx context.Context, st is.Storage, blobs BlobStore, mode oplog.Mode, level int, opts MigrateOptions) (MigrateReport, error) {
	var rep MigrateReport
	chunks, err := NewBlob(blobs, level)
	if err != nil {
		return rep, err
	}
	packed, err := NewPacked(st, blobs, level, nil)
	if err != nil {
		return rep, err
	}
	prefix := fmt.Sprintf("%s/%d/", mode, level)
	paths, err := blobs.List(ctx, prefix)
	if err != nil {
		return rep, fmt.Errorf("migrate %s: list: %w", prefix, err)
	}
	named := make(map[string]oplog.AgentID, len(opts.Agents))
	for _, a := range opts.Agents {
		named[chunks.Dir(a, mode)] = a
	}
	var agents []oplog.AgentID
	seen := map[string]bool{}
	for _, p := range paths {
		if strings.HasPrefix(p, prefix+"segments/") {
			continue
		}
		agent, known, _, _, dir, _, ok := ParseChunkPath(p)
		if !ok {
			rep.Foreign++
			continue
		}
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if a, ok := named[dir]; ok {
			agent, known = a, true
		}
		if !known || chunks.Dir(agent, mode) != dir {
			rep.Unknown = append(rep.Unknown, dir)
			continue
		}
		agents = append(agents, agent)
	}
	batch := opts.Batch
	if batch < 1 {
		batch = 128
	}
	for len(agents) > 0 {
		n := min(batch, len(agents))
		if err := migrateBatch(ctx, chunks, packed, mode, agents[:n], &rep); err != nil {
			return rep, err
		}
		agents = agents[n:]
	}
	return rep, nil
}

// migrateBatch migrates agents together: their overlap with the packed layout checked, then rounds of
// a chunk each appended in one AppendBatch, then each agent's chunk blobs removed. An agent's failure
// is reported and the rest go on; the context's end stops the batch.
func migrateBatch(ctx context.Context, chunks *Blob, packed *Packed, mode oplog.Mode, agents []oplog.AgentID, rep *MigrateReport) error {
	next := make([]oplog.Index, len(agents)) // read the chunk layout from here (0: the agent failed)
	fail := func(k int, err error) {
		rep.Failed = append(rep.Failed, fmt.Sprintf("%s: %v", agents[k], err))
		next[k] = 0
	}
	for k, a := range agents {
		last, _, err := packed.LastIndex(ctx, a, mode)
		if err == nil {
			err = sameEntries(ctx, chunks, packed, a, mode, last)
		}
		if err != nil {
			fail(k, err)
			continue
		}
		next[k] = last + 1
	}
	done := make([]bool, len(agents))
	for {
		var ks []int
		var reqs []oplog.AppendRequest
		for k, a := range agents {
			if next[k] == 0 || done[k] {
				continue
			}
			entries, err := chunks.Read(ctx, a, mode, next[k], readToEnd, oplog.ChunkLimit)
			switch {
			case err != nil:
				fail(k, err)
			case len(entries) == 0:
				done[k] = true
			case entries[0].Index != next[k]:
				fail(k, fmt.Errorf("the chunk layout holds no index %d: its chunks have a gap", next[k]))
			default:
				ks = append(ks, k)
				reqs = append(reqs, oplog.AppendRequest{Agent: a, Entries: entries})
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(reqs) == 0 {
			break
		}
		errs, err := packed.AppendBatch(ctx, mode, reqs)
		if err != nil {
			return err
		}
		for j, k := range ks {
			if errs[j] != nil && !errors.Is(errs[j], oplog.ErrHeldAlready) { // held: a migration run before wrote them
				fail(k, errs[j])
				continue
			}
			rep.Entries += int64(len(reqs[j].Entries))
			next[k] = reqs[j].Entries[len(reqs[j].Entries)-1].Index + 1
		}
	}
	for k, a := range agents {
		if next[k] == 0 {
			continue
		}
		if err := chunks.Delete(ctx, a, mode); err != nil {
			fail(k, err)
			continue
		}
		rep.Agents++
	}
	return ctx.Err()
}

// readToEnd is the upper bound of a read that takes whatever the layer holds.
const readToEnd = oplog.Index(1<<63 - 1)

// sameEntries checks that every entry the chunk layout holds at or below upTo is in the packed layout
// with the same payload (a run before this one appended it and stopped before removing the chunks).
func sameEntries(ctx context.Context, chunks *Blob, packed *Packed, agent oplog.AgentID, mode oplog.Mode, upTo oplog.Index) error {
	for from := oplog.Index(1); from <= upTo; {
		have, err := chunks.Read(ctx, agent, mode, from, upTo, oplog.ChunkLimit)
		if err != nil || len(have) == 0 {
			return err
		}
		lo, hi := have[0].Index, have[len(have)-1].Index
		want, err := packed.Read(ctx, agent, mode, lo, hi, oplog.ReadLimit{Entries: len(have), Bytes: 1 << 62})
		if err != nil {
			return err
		}
		if len(want) != len(have) || want[0].Index != lo {
			return fmt.Errorf("%w: the chunk layout holds %d..%d, the packed layout %d of those indices", oplog.ErrIndexReused, lo, hi, len(want))
		}
		for i := range have {
			if !bytes.Equal(have[i].Payload, want[i].Payload) {
				return fmt.Errorf("%w: index %d differs between the chunk and the packed layout", oplog.ErrIndexReused, have[i].Index)
			}
		}
		from = hi + 1
	}
	return nil
}
