package archive

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/compress/zstd"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// Chunk format, version 1. A chunk holds 1–4096 contiguous entries of one oplog, at most 4 MiB of
// payload, and is stored under the index of its last entry.
//
//	offset  field
//	0       version           1 byte, = 1
//	1       count             uvarint, 1..4096
//	        first index       uvarint, ≥ 1 (the entries are first … first+count−1)
//	        body              zstd: one frame, or several one after another (RFC 8878); decompressed
//	                          together, count times: uvarint length, payload bytes
//	len−4   checksum          CRC32-C (Castagnoli) of every byte before it, big-endian
//
// The checksum covers the header and the compressed body, so a flipped byte anywhere is caught before
// decompression. A chunk that fails it is an error, never skipped.
const chunkVersion = 1

// ErrCorruptChunk is returned for a chunk that fails its checksum or does not parse. It is an
// oplog.ErrIntegrity.
var ErrCorruptChunk = oplog.NewIntegrityError("corrupt oplog chunk")

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	// One encoder and decoder for the process: EncodeAll and DecodeAll are safe for concurrent use,
	// and building them is expensive.
	encoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	// The decoder bounds what a frame may decompress to by the capacity of the buffer it is handed
	// (maxBody), not by WithDecoderMaxMemory: that option also caps the window a frame may declare, and
	// a streaming encoder (klauspost's default level, libzstd's higher ones) declares 8 MiB or more
	// even for a few bytes of content, so a frame a foreign writer made correctly would be refused.
	// DecodeAll keeps its history in the output buffer, so a large declared window costs no memory;
	// windows above the library's default limit (512 MiB) are still refused.
	decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecodeAllCapLimit(true))
)

// maxBody is the most a chunk's body decompresses to: 4 MiB of payload plus a length prefix per
// entry. A corrupt or hostile frame that claims or produces more is refused.
const maxBody = oplog.MaxChunkBytes + oplog.MaxChunkEntries*binary.MaxVarintLen64

// smallBody is the least first guess at the size of a body whose frame states none.
const smallBody = 4 << 10

// EncodeChunk encodes contiguous entries as one chunk.
func EncodeChunk(entries []oplog.Entry) ([]byte, error) {
	if len(entries) == 0 || len(entries) > oplog.MaxChunkEntries {
		return nil, fmt.Errorf("%w: a chunk holds 1-%d entries, got %d", oplog.ErrInvalidEntries, oplog.MaxChunkEntries, len(entries))
	}
	if err := oplog.CheckEntries(entries); err != nil {
		return nil, err
	}
	if last := uint64(entries[len(entries)-1].Index); last > is.MaxID {
		// No index holds such an id, and no reader would accept the chunk.
		return nil, fmt.Errorf("%w: index %d is above the largest an oplog holds (%d)", oplog.ErrInvalidEntries, last, is.MaxID)
	}
	size := 0
	for _, e := range entries {
		size += len(e.Payload)
	}
	if size > oplog.MaxChunkBytes {
		return nil, fmt.Errorf("%w: %d bytes of payload, a chunk holds %d", oplog.ErrPayloadTooLarge, size, oplog.MaxChunkBytes)
	}
	body := make([]byte, 0, size+len(entries)*2)
	for _, e := range entries {
		body = binary.AppendUvarint(body, uint64(len(e.Payload)))
		body = append(body, e.Payload...)
	}
	out := []byte{chunkVersion}
	out = binary.AppendUvarint(out, uint64(len(entries)))
	out = binary.AppendUvarint(out, uint64(entries[0].Index))
	out = encoder.EncodeAll(body, out)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli)), nil
}

// DecodeChunk decodes a chunk. The payloads share one buffer owned by the caller.
func DecodeChunk(data []byte) ([]oplog.Entry, error) {
	count, first, body, err := parseHeader(data)
	if err != nil {
		return nil, err
	}
	raw, err := decodeBody(body)
	if err != nil {
		return nil, err
	}
	entries := make([]oplog.Entry, count)
	for i := range entries {
		n, size := binary.Uvarint(raw)
		if size <= 0 || n > uint64(len(raw)-size) {
			return nil, fmt.Errorf("%w: entry %d of %d is truncated", ErrCorruptChunk, i+1, count)
		}
		raw = raw[size:]
		entries[i] = oplog.Entry{Index: first + oplog.Index(i), Payload: raw[:n:n]}
		raw = raw[n:]
	}
	if len(raw) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last entry", ErrCorruptChunk, len(raw))
	}
	return entries, nil
}

// decodeBody decompresses a chunk's body, at most maxBody bytes over all its frames. A body is one zstd
// frame as strata writes it, or several one after another (with skippable frames among them), as RFC
// 8878 allows and as a foreign writer that flushes a frame per batch writes it: they decompress to one
// stream. The first try decodes into a buffer of a first guess: the first frame's content size where
// it states one (EncodeAll writes it: the whole body, when there is one frame), else a size guessed
// from the compressed length; a body that outgrows the guess (more frames, or a streaming encoder's
// frame, which states no size) is decoded again into a buffer of the whole bound, and what it held is
// copied out when it is much smaller, so that the entries the caller keeps do not pin 4 MiB each.
func decodeBody(body []byte) ([]byte, error) {
	guess := min(maxBody, max(smallBody, 16*len(body)))
	var hdr zstd.Header
	if err := hdr.Decode(body); err == nil && hdr.HasFCS {
		if hdr.FrameContentSize > maxBody {
			return nil, fmt.Errorf("%w: body: the frame states %d bytes of content, a chunk holds at most %d", ErrCorruptChunk, hdr.FrameContentSize, maxBody)
		}
		guess = int(hdr.FrameContentSize)
	}
	raw, err := decoder.DecodeAll(body, make([]byte, 0, guess))
	if err == nil {
		return raw, nil
	}
	if guess < maxBody {
		// Any failure is tried again with the whole bound: a body that outgrows the guess fails in
		// more ways than ErrDecoderSizeExceeded (a block larger than what is left), and a corrupt one
		// fails the second try too.
		raw, err = decoder.DecodeAll(body, make([]byte, 0, maxBody))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrCorruptChunk, err)
	}
	if len(raw) < cap(raw)/2 {
		raw = bytes.Clone(raw)
	}
	return raw, nil
}

// ChunkSpan returns the first and last index of a chunk after checking its checksum, without
// decompressing it.
func ChunkSpan(data []byte) (first, last oplog.Index, err error) {
	count, first, _, err := parseHeader(data)
	if err != nil {
		return 0, 0, err
	}
	return first, first + oplog.Index(count) - 1, nil
}

func parseHeader(data []byte) (count int, first oplog.Index, body []byte, err error) {
	if len(data) < 4+3 {
		return 0, 0, nil, fmt.Errorf("%w: %d bytes is too short", ErrCorruptChunk, len(data))
	}
	payload, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(payload, castagnoli) != sum {
		return 0, 0, nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptChunk)
	}
	if payload[0] != chunkVersion {
		return 0, 0, nil, fmt.Errorf("%w: unknown version %d", ErrCorruptChunk, payload[0])
	}
	rest := payload[1:]
	n, size := binary.Uvarint(rest)
	if size <= 0 || n == 0 || n > oplog.MaxChunkEntries {
		return 0, 0, nil, fmt.Errorf("%w: bad entry count", ErrCorruptChunk)
	}
	rest = rest[size:]
	f, size := binary.Uvarint(rest)
	// The last index, first+n−1, is at most MaxID: written so that neither side can overflow.
	if size <= 0 || f == 0 || f-1 > is.MaxID-n {
		return 0, 0, nil, fmt.Errorf("%w: bad first index", ErrCorruptChunk)
	}
	return int(n), oplog.Index(f), rest[size:], nil
}

// splitChunks cuts contiguous entries into chunk-sized runs: at most MaxChunkEntries entries and
// MaxChunkBytes of payload each.
func splitChunks(entries []oplog.Entry) [][]oplog.Entry {
	var chunks [][]oplog.Entry
	start, size := 0, 0
	for i, e := range entries {
		if i > start && (i-start == oplog.MaxChunkEntries || size+len(e.Payload) > oplog.MaxChunkBytes) {
			chunks = append(chunks, entries[start:i])
			start, size = i, 0
		}
		size += len(e.Payload)
	}
	if start < len(entries) {
		chunks = append(chunks, entries[start:])
	}
	return chunks
}
