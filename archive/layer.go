// Package archive holds the archive layers of the oplog: the compressed layer (chunks in indexed
// storage, level ≥ 1) and the blob layer (chunks as blobs, a target only), the chunk format they share,
// and the blob store contract.
package archive

import (
	"context"
	"fmt"

	"github.com/stratalog/strata/oplog"
)

// nextChunk returns the stored chunk with the smallest last index ≥ from: its last index and bytes, or
// ok false when there is none.
type nextChunk func(ctx context.Context, from oplog.Index) (last oplog.Index, data []byte, ok bool, err error)

// readChunks implements Layer.Read over chunks stored under their last index. Overlapping chunks (two
// archivers raced) are tolerated: each index is returned once. The result is contiguous: after the
// first chunk, a chunk that starts above the cursor ends the read, since the indices in between are
// missing here (a concurrent step dropped them after moving them below); the caller reads on from the
// end of the run. Memory is the result plus one decoded chunk.
func readChunks(ctx context.Context, layer string, agent oplog.AgentID, from, to oplog.Index, limit oplog.ReadLimit, next nextChunk) ([]oplog.Entry, error) {
	var out []oplog.Entry
	size := 0
	for cursor := max(from, 1); cursor <= to && !limit.Full(len(out), size); {
		last, data, ok, err := next(ctx, cursor)
		if err != nil || !ok {
			return out, err
		}
		entries, err := DecodeChunk(data)
		if err == nil && entries[len(entries)-1].Index != last {
			err = fmt.Errorf("%w: holds up to %d", ErrCorruptChunk, entries[len(entries)-1].Index)
		}
		if err != nil {
			return out, fmt.Errorf("%s: agent %s, chunk stored under index %d: %w", layer, agent, last, err)
		}
		if len(out) > 0 && entries[0].Index > cursor {
			return out, nil
		}
		for _, e := range entries {
			if e.Index < cursor {
				continue
			}
			if e.Index > to || limit.Full(len(out), size) {
				return out, nil
			}
			out = append(out, e)
			size += len(e.Payload)
		}
		cursor = last + 1
	}
	return out, nil
}

// encodeChunks cuts entries into chunks and encodes each, returning them with their last indices.
func encodeChunks(entries []oplog.Entry) ([]encodedChunk, error) {
	if err := oplog.CheckEntries(entries); err != nil {
		return nil, err
	}
	var out []encodedChunk
	for _, c := range splitChunks(entries) {
		data, err := EncodeChunk(c)
		if err != nil {
			return nil, err
		}
		out = append(out, encodedChunk{last: c[len(c)-1].Index, data: data})
	}
	return out, nil
}

type encodedChunk struct {
	last oplog.Index
	data []byte
}
