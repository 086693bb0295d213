package archive

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"
	"unicode/utf8"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

// Packed segment format, version 1 (DESIGN §13; docs/storage-format.md gives every byte). A segment is
// one blob holding the chunks of many agents, one after another, each exactly as the chunk format
// encodes it, then a footer that lists them and a fixed trailer, so that a segment describes itself:
//
//	body      chunk 1 … chunk n, contiguous from offset 0
//	footer    version      1 byte, = 1
//	          count        uvarint, 1..MaxSegmentChunks
//	          n times:     key length uvarint (1..indexedstorage.MaxKeyLen), key bytes (the agent's
//	                       stored key, UTF-8), first index uvarint, last index uvarint, offset uvarint,
//	                       length uvarint, CRC-32C of the chunk's bytes (4 bytes, big-endian)
//	trailer   footer length  4 bytes, big-endian
//	          footer CRC-32C 4 bytes, big-endian, of the footer's bytes
//	          magic          8 bytes, "strataS1"
//
// A reader of one chunk needs no footer: the blob index's row gives its offset, length and CRC (a
// ranged read). The footer is for whoever has only the segment: the collector (which rows to look
// for), verification, and a rebuild of the index.
const segmentVersion = 1

// SegmentMagic ends every packed segment.
const SegmentMagic = "strataS1"

// SegmentTrailerLen is the size of a segment's fixed trailer: a reader reads it first (the last 16
// bytes), then the footer it points to.
const SegmentTrailerLen = 16

// MaxSegmentChunks is the most chunks one segment lists: a batch is at most indexedstorage.MaxBatch
// agents and each round of it writes one chunk an agent.
const MaxSegmentChunks = is.MaxBatch

// maxFooterEntry bounds one footer entry: the key, four uvarints and the CRC.
const maxFooterEntry = binary.MaxVarintLen64 + is.MaxKeyLen + 4*binary.MaxVarintLen64 + 4

// MaxSegmentFooterLen is the longest footer a reader accepts: the version, the count and
// MaxSegmentChunks entries of the longest form. A trailer that claims more is corrupt.
const MaxSegmentFooterLen = 1 + binary.MaxVarintLen64 + MaxSegmentChunks*maxFooterEntry

// ErrCorruptSegment is returned for a segment whose trailer, footer or chunk fails its checks. It is
// an oplog.ErrIntegrity.
var ErrCorruptSegment = oplog.NewIntegrityError("corrupt packed segment")

// PackedChunk is one chunk of a segment as its footer lists it.
type PackedChunk struct {
	Key         string // the agent's stored key
	First, Last oplog.Index
	Offset      uint64 // from the segment's first byte
	Length      uint64
	CRC         uint32 // CRC-32C of the chunk's bytes
}

// SegmentChunk is a chunk to pack: the agent's stored key and the chunk as EncodeChunk made it.
type SegmentChunk struct {
	Key   string
	Chunk []byte
}

// EncodeSegment packs chunks into one segment and returns it with the footer's entries, in the
// order given. Each chunk must be a valid chunk (its checksum is checked, its span read from it).
func EncodeSegment(chunks []SegmentChunk) ([]byte, []PackedChunk, error) {
	if len(chunks) == 0 || len(chunks) > MaxSegmentChunks {
		return nil, nil, fmt.Errorf("%w: a segment holds 1-%d chunks, got %d", oplog.ErrInvalidEntries, MaxSegmentChunks, len(chunks))
	}
	size := 0
	for _, c := range chunks {
		size += len(c.Chunk)
	}
	out := make([]byte, 0, size+len(chunks)*48+SegmentTrailerLen)
	entries := make([]PackedChunk, len(chunks))
	for i, c := range chunks {
		if err := validSegmentKey(c.Key); err != nil {
			return nil, nil, fmt.Errorf("%w: chunk %d: %v", oplog.ErrInvalidEntries, i, err)
		}
		first, last, err := ChunkSpan(c.Chunk)
		if err != nil {
			return nil, nil, fmt.Errorf("chunk %d of %q: %w", i, c.Key, err)
		}
		entries[i] = PackedChunk{Key: c.Key, First: first, Last: last, Offset: uint64(len(out)),
			Length: uint64(len(c.Chunk)), CRC: crc32.Checksum(c.Chunk, castagnoli)}
		out = append(out, c.Chunk...)
	}
	footerAt := len(out)
	out = append(out, segmentVersion)
	out = binary.AppendUvarint(out, uint64(len(entries)))
	for _, e := range entries {
		out = binary.AppendUvarint(out, uint64(len(e.Key)))
		out = append(out, e.Key...)
		out = binary.AppendUvarint(out, uint64(e.First))
		out = binary.AppendUvarint(out, uint64(e.Last))
		out = binary.AppendUvarint(out, e.Offset)
		out = binary.AppendUvarint(out, e.Length)
		out = binary.BigEndian.AppendUint32(out, e.CRC)
	}
	footer := out[footerAt:]
	out = binary.BigEndian.AppendUint32(out, uint32(len(footer)))
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(footer, castagnoli))
	return append(out, SegmentMagic...), entries, nil
}

// validSegmentKey is what a footer's key must be: a stored key as indexed storage takes it.
func validSegmentKey(key string) error {
	switch {
	case key == "" || len(key) > is.MaxKeyLen:
		return fmt.Errorf("a key is 1-%d bytes, got %d", is.MaxKeyLen, len(key))
	case !utf8.ValidString(key):
		return fmt.Errorf("key %q is not UTF-8", key)
	case bytes.IndexByte([]byte(key), 0) >= 0:
		return fmt.Errorf("key %q holds NUL", key)
	}
	return nil
}

// ParseSegmentTrailer reads a segment's trailer (its last SegmentTrailerLen bytes) and returns where
// its footer starts and how long it is, for a segment of size bytes, and the footer's CRC.
func ParseSegmentTrailer(trailer []byte, size uint64) (footerAt, footerLen uint64, footerCRC uint32, err error) {
	if len(trailer) != SegmentTrailerLen || size < SegmentTrailerLen || string(trailer[8:]) != SegmentMagic {
		return 0, 0, 0, fmt.Errorf("%w: no segment trailer (magic %q missing)", ErrCorruptSegment, SegmentMagic)
	}
	footerLen = uint64(binary.BigEndian.Uint32(trailer))
	footerCRC = binary.BigEndian.Uint32(trailer[4:])
	if footerLen < 2 || footerLen > MaxSegmentFooterLen || footerLen > size-SegmentTrailerLen {
		return 0, 0, 0, fmt.Errorf("%w: a footer of %d bytes in a segment of %d", ErrCorruptSegment, footerLen, size)
	}
	return size - SegmentTrailerLen - footerLen, footerLen, footerCRC, nil
}

// DecodeSegmentFooter decodes a footer that starts at footerAt of its segment (the body's length)
// and checks it against its CRC from the trailer: every chunk of 1..MaxSegmentChunks listed once,
// contiguous from offset 0 to footerAt, each a valid key and span.
func DecodeSegmentFooter(footer []byte, footerAt uint64, footerCRC uint32) ([]PackedChunk, error) {
	if crc32.Checksum(footer, castagnoli) != footerCRC {
		return nil, fmt.Errorf("%w: footer checksum mismatch", ErrCorruptSegment)
	}
	r := footerReader{data: footer}
	if v := r.byte(); v != segmentVersion {
		return nil, fmt.Errorf("%w: footer version %d, this reader knows %d", ErrCorruptSegment, v, segmentVersion)
	}
	count := r.uvarint()
	if r.err == nil && (count == 0 || count > MaxSegmentChunks) {
		return nil, fmt.Errorf("%w: a footer of %d chunks", ErrCorruptSegment, count)
	}
	entries := make([]PackedChunk, 0, min(count, MaxSegmentChunks))
	next := uint64(0)
	for i := uint64(0); i < count && r.err == nil; i++ {
		var e PackedChunk
		e.Key = string(r.bytes(r.uvarint()))
		e.First, e.Last = oplog.Index(r.uvarint()), oplog.Index(r.uvarint())
		e.Offset, e.Length = r.uvarint(), r.uvarint()
		e.CRC = r.uint32()
		if r.err != nil {
			break
		}
		switch {
		case validSegmentKey(e.Key) != nil:
			return nil, fmt.Errorf("%w: chunk %d: %v", ErrCorruptSegment, i, validSegmentKey(e.Key))
		case e.First < 1 || e.Last < e.First || uint64(e.Last) > is.MaxID || uint64(e.Last-e.First) >= oplog.MaxChunkEntries:
			return nil, fmt.Errorf("%w: chunk %d of %q spans %d..%d", ErrCorruptSegment, i, e.Key, e.First, e.Last)
		case e.Offset != next || e.Length == 0 || e.Length > footerAt-e.Offset:
			return nil, fmt.Errorf("%w: chunk %d of %q at %d+%d, the body is %d bytes and this chunk starts at %d",
				ErrCorruptSegment, i, e.Key, e.Offset, e.Length, footerAt, next)
		}
		next = e.Offset + e.Length
		entries = append(entries, e)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: footer: %v", ErrCorruptSegment, r.err)
	}
	if len(r.data) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the footer's last chunk", ErrCorruptSegment, len(r.data))
	}
	if next != footerAt {
		return nil, fmt.Errorf("%w: the chunks end at %d, the body at %d", ErrCorruptSegment, next, footerAt)
	}
	return entries, nil
}

// DecodeSegment decodes a whole segment's footer (trailer first).
func DecodeSegment(segment []byte) ([]PackedChunk, error) {
	if len(segment) < SegmentTrailerLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a trailer", ErrCorruptSegment, len(segment))
	}
	size := uint64(len(segment))
	footerAt, footerLen, crc, err := ParseSegmentTrailer(segment[size-SegmentTrailerLen:], size)
	if err != nil {
		return nil, err
	}
	return DecodeSegmentFooter(segment[footerAt:footerAt+footerLen], footerAt, crc)
}

// PackedChunkBytes checks the bytes a ranged read returned for e against e (length, CRC) and that
// they are a chunk of e's span, and returns them.
func PackedChunkBytes(e PackedChunk, data []byte) ([]byte, error) {
	if sum := crc32.Checksum(data, castagnoli); uint64(len(data)) != e.Length || sum != e.CRC {
		// Either the chunk's bytes or the row that lists them are damaged: both errors match.
		return nil, fmt.Errorf("%w: %w: chunk %d..%d of %q: read %d bytes with CRC %08x where its listing says %d bytes with CRC %08x",
			ErrCorruptSegment, ErrCorruptChunk, e.First, e.Last, e.Key, len(data), sum, e.Length, e.CRC)
	}
	first, last, err := ChunkSpan(data)
	if err != nil {
		return nil, err
	}
	if first != e.First || last != e.Last {
		return nil, fmt.Errorf("%w: chunk listed as %d..%d of %q holds %d..%d", ErrCorruptSegment, e.First, e.Last, e.Key, first, last)
	}
	return data, nil
}

// footerReader reads a footer's fields; the first failure sticks and every later read returns zero.
type footerReader struct {
	data []byte
	err  error
}

func (r *footerReader) byte() byte {
	b := r.bytes(1)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func (r *footerReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.data)
	if n <= 0 {
		r.err = fmt.Errorf("a varint that does not parse at %d bytes from the end", len(r.data))
		return 0
	}
	r.data = r.data[n:]
	return v
}

func (r *footerReader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.data)) {
		r.err = fmt.Errorf("%d bytes wanted, %d left", n, len(r.data))
		return nil
	}
	b := r.data[:n]
	r.data = r.data[n:]
	return b
}

func (r *footerReader) uint32() uint32 {
	b := r.bytes(4)
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// SegmentRef is a blob index row's value (namespace {mode}/blobindex/{L}, key the agent's stored key,
// id the chunk's last index): where the chunk is. Encoded:
//
//	version 1 byte, = 1; first index uvarint; offset uvarint; length uvarint; CRC-32C of the chunk
//	4 bytes big-endian; the segment's blob path, the rest of the value (1..MaxSegmentPathLen bytes)
type SegmentRef struct {
	Segment string
	First   oplog.Index
	Offset  uint64
	Length  uint64
	CRC     uint32
}

// MaxSegmentPathLen bounds a segment's blob path in an index row.
const MaxSegmentPathLen = 1024

// segmentRefVersion is the first byte of a SegmentRef's encoding.
const segmentRefVersion = 1

// Chunk is the footer entry the row stands for, given the row's key and id.
func (r SegmentRef) Chunk(key string, last oplog.Index) PackedChunk {
	return PackedChunk{Key: key, First: r.First, Last: last, Offset: r.Offset, Length: r.Length, CRC: r.CRC}
}

// EncodeSegmentRef encodes an index row's value.
func EncodeSegmentRef(r SegmentRef) []byte {
	out := make([]byte, 0, 1+3*binary.MaxVarintLen64+4+len(r.Segment))
	out = append(out, segmentRefVersion)
	out = binary.AppendUvarint(out, uint64(r.First))
	out = binary.AppendUvarint(out, r.Offset)
	out = binary.AppendUvarint(out, r.Length)
	out = binary.BigEndian.AppendUint32(out, r.CRC)
	return append(out, r.Segment...)
}

// DecodeSegmentRef decodes the value of the index row whose id is last, and checks it describes a
// chunk a segment can hold.
func DecodeSegmentRef(value []byte, last oplog.Index) (SegmentRef, error) {
	rd := footerReader{data: value}
	if v := rd.byte(); rd.err == nil && v != segmentRefVersion {
		return SegmentRef{}, fmt.Errorf("%w: index row version %d, this reader knows %d", ErrCorruptSegment, v, segmentRefVersion)
	}
	var r SegmentRef
	r.First = oplog.Index(rd.uvarint())
	r.Offset, r.Length = rd.uvarint(), rd.uvarint()
	r.CRC = rd.uint32()
	if rd.err != nil {
		return SegmentRef{}, fmt.Errorf("%w: index row of %d: %v", ErrCorruptSegment, last, rd.err)
	}
	r.Segment = string(rd.data)
	switch {
	case r.First < 1 || last < r.First || uint64(last) > is.MaxID || uint64(last-r.First) >= oplog.MaxChunkEntries:
		return SegmentRef{}, fmt.Errorf("%w: index row of %d says the chunk starts at %d", ErrCorruptSegment, last, r.First)
	case r.Length == 0 || r.Offset > math.MaxInt64-r.Length:
		return SegmentRef{}, fmt.Errorf("%w: index row of %d: a chunk of %d bytes at %d", ErrCorruptSegment, last, r.Length, r.Offset)
	case r.Segment == "" || len(r.Segment) > MaxSegmentPathLen || !utf8.ValidString(r.Segment):
		return SegmentRef{}, fmt.Errorf("%w: index row of %d names segment %q", ErrCorruptSegment, last, r.Segment)
	}
	return r, nil
}

// SegmentPath is the blob path of a segment of blob level L of mode, made at t:
// "{mode}/{L}/segments/{t as 20 decimal digits of nanoseconds since 1970}-{16 hex digits of nonce}".
// Paths sort by creation time (to the nanosecond; the nonce keeps two writers of one instant apart),
// and nothing in them is needed to read the segment. A time before 1970 counts as 1970.
func SegmentPath(mode oplog.Mode, level int, t time.Time, nonce uint64) string {
	return fmt.Sprintf("%s/%d/segments/%020d-%016x", mode, level, max(t.UnixNano(), 0), nonce)
}
