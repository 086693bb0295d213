package archive

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/compress/zstd"

	"github.com/stratalog/strata/oplog"
)

// Chunk format, version 1. A chunk holds 1–4096 contiguous entries of one oplog, at most 4 MiB of
// payload, and is stored under the index of its last entry.
//
//	offset  field
//	0       version           1 byte, = 1
//	1       count             uvarint, 1..4096
//	        first index       uvarint, ≥ 1 (the entries are first … first+count−1)
//	        body              a zstd frame; decompressed, count times: uvarint length, payload bytes
//	len−4   checksum          CRC32-C (Castagnoli) of every byte before it, big-endian
//
// The checksum covers the header and the compressed body, so a flipped byte anywhere is caught before
// decompression. A chunk that fails it is an error, never skipped.
const chunkVersion = 1

// ErrCorruptChunk is returned for a chunk that fails its checksum or does not parse.
var ErrCorruptChunk = errors.New("corrupt oplog chunk")

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	// One encoder and decoder for the process: EncodeAll and DecodeAll are safe for concurrent use,
	// and building them is expensive.
	encoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	// A chunk decompresses to at most 4 MiB of payload plus its length prefixes; the cap refuses a
	// corrupt or hostile frame that claims more.
	decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(oplog.MaxChunkBytes+oplog.MaxChunkEntries*binary.MaxVarintLen64+1<<16))
)

// EncodeChunk encodes contiguous entries as one chunk.
func EncodeChunk(entries []oplog.Entry) ([]byte, error) {
	if len(entries) == 0 || len(entries) > oplog.MaxChunkEntries {
		return nil, fmt.Errorf("%w: a chunk holds 1-%d entries, got %d", oplog.ErrInvalidEntries, oplog.MaxChunkEntries, len(entries))
	}
	if err := oplog.CheckEntries(entries); err != nil {
		return nil, err
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
	raw, err := decoder.DecodeAll(body, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrCorruptChunk, err)
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
	if size <= 0 || f == 0 || f > uint64(1<<63-1)-n {
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
