package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

func entriesFrom(first oplog.Index, n, size int) []oplog.Entry {
	out := make([]oplog.Entry, n)
	for i := range out {
		idx := first + oplog.Index(i)
		out[i] = oplog.Entry{Index: idx, Payload: bytes.Repeat([]byte(fmt.Sprintf("%d;", idx)), size)}
	}
	return out
}

func TestChunk_RoundTrip(t *testing.T) {
	for _, c := range []struct {
		first oplog.Index
		n     int
	}{{1, 1}, {7, 100}, {1, oplog.MaxChunkEntries}, {1 << 62, 3}} {
		in := entriesFrom(c.first, c.n, 3)
		in[0].Payload = nil // an empty payload survives too
		data, err := EncodeChunk(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeChunk(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(in) {
			t.Fatalf("decoded %d entries, want %d", len(out), len(in))
		}
		for i := range in {
			if out[i].Index != in[i].Index || !bytes.Equal(out[i].Payload, in[i].Payload) {
				t.Fatalf("entry %d: %d %q, want %d %q", i, out[i].Index, out[i].Payload, in[i].Index, in[i].Payload)
			}
		}
		first, last, err := ChunkSpan(data)
		if err != nil || first != c.first || last != c.first+oplog.Index(c.n)-1 {
			t.Fatalf("ChunkSpan = %d %d %v", first, last, err)
		}
	}
}

func TestChunk_EveryFlippedByteIsReported(t *testing.T) {
	data, err := EncodeChunk(entriesFrom(10, 50, 20))
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		for _, bit := range []byte{0x01, 0x80} {
			bad := bytes.Clone(data)
			bad[i] ^= bit
			if _, err := DecodeChunk(bad); !errors.Is(err, ErrCorruptChunk) {
				t.Fatalf("flipping bit %#x of byte %d: %v, want ErrCorruptChunk", bit, i, err)
			}
		}
	}
	for _, n := range []int{0, 3, len(data) - 1} {
		if _, err := DecodeChunk(data[:n]); !errors.Is(err, ErrCorruptChunk) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
}

func TestChunk_RefusesWhatNoChunkHolds(t *testing.T) {
	for name, in := range map[string][]oplog.Entry{
		"empty":      nil,
		"too many":   entriesFrom(1, oplog.MaxChunkEntries+1, 1),
		"gap":        {{Index: 1}, {Index: 3}},
		"index zero": {{Index: 0}},
		"over 4 MiB": {{Index: 1, Payload: make([]byte, oplog.MaxChunkBytes/2+1)}, {Index: 2, Payload: make([]byte, oplog.MaxChunkBytes/2)}},
		"descending": {{Index: 2}, {Index: 1}},
	} {
		if _, err := EncodeChunk(in); err == nil {
			t.Fatalf("%s: encoded", name)
		}
	}
}

func TestSplitChunks_RespectsBothLimits(t *testing.T) {
	byCount := splitChunks(entriesFrom(1, 2*oplog.MaxChunkEntries+1, 1))
	if len(byCount) != 3 || len(byCount[0]) != oplog.MaxChunkEntries || len(byCount[2]) != 1 {
		t.Fatalf("split by count: %d chunks", len(byCount))
	}
	big := make([]oplog.Entry, 5)
	for i := range big {
		big[i] = oplog.Entry{Index: oplog.Index(i + 1), Payload: make([]byte, oplog.MaxChunkBytes/2)}
	}
	bySize := splitChunks(big)
	if len(bySize) != 3 || len(bySize[0]) != 2 || len(bySize[2]) != 1 {
		t.Fatalf("split by size: %d chunks", len(bySize))
	}
	for _, c := range bySize {
		if _, err := EncodeChunk(c); err != nil {
			t.Fatalf("a split chunk does not encode: %v", err)
		}
	}
}

// The last id an index can hold is is.MaxID (2^63−1), so a chunk ending there is valid: it encodes,
// its checksum and header pass, and it decodes to the entries it was made of. One index further is
// no id at all, so such a chunk is refused when encoded rather than written and then never readable.
func TestChunk_EndingAtMaxIDIsValid(t *testing.T) {
	for _, n := range []int{1, 2, 100} {
		first := oplog.Index(is.MaxID) - oplog.Index(n) + 1
		in := entriesFrom(first, n, 2)
		data, err := EncodeChunk(in)
		if err != nil {
			t.Fatalf("%d entries ending at MaxID: encode: %v", n, err)
		}
		gotFirst, gotLast, err := ChunkSpan(data)
		if err != nil || gotFirst != first || gotLast != oplog.Index(is.MaxID) {
			t.Fatalf("%d entries ending at MaxID: ChunkSpan = %d, %d, %v; want %d, %d", n, gotFirst, gotLast, err, first, is.MaxID)
		}
		out, err := DecodeChunk(data)
		if err != nil {
			t.Fatalf("%d entries ending at MaxID: decode: %v", n, err)
		}
		if len(out) != n || out[n-1].Index != oplog.Index(is.MaxID) || !bytes.Equal(out[n-1].Payload, in[n-1].Payload) {
			t.Fatalf("%d entries ending at MaxID: decoded %d entries, last %d", n, len(out), out[len(out)-1].Index)
		}
	}
	for _, n := range []int{1, 2} {
		in := entriesFrom(oplog.Index(is.MaxID)-oplog.Index(n)+2, n, 1)
		if _, err := EncodeChunk(in); !errors.Is(err, oplog.ErrInvalidEntries) {
			t.Fatalf("%d entries ending one past MaxID: encode: %v, want ErrInvalidEntries", n, err)
		}
	}
	// A chunk whose header claims to end past MaxID, made by hand, does not parse.
	for _, c := range []struct{ first, count uint64 }{{is.MaxID, 2}, {is.MaxID + 1, 1}, {1 << 63, 4096}, {^uint64(0), 1}} {
		if _, _, err := ChunkSpan(handMadeChunk(c.first, c.count, []byte{})); !errors.Is(err, ErrCorruptChunk) {
			t.Fatalf("a chunk of %d entries from %d: %v, want ErrCorruptChunk", c.count, c.first, err)
		}
	}
}

// handMadeChunk frames a header and a body as a foreign writer would, checksum included.
func handMadeChunk(first, count uint64, body []byte) []byte {
	out := []byte{chunkVersion}
	out = binary.AppendUvarint(out, count)
	out = binary.AppendUvarint(out, first)
	out = append(out, body...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// A foreign writer's zstd library may write a frame without its content size (any streaming
// encoder does: it starts the frame before it knows how long the input is), in several blocks. The
// decoder must read such a frame as a stream rather than rely on the header's size.
func TestChunk_DecodesAFrameWithoutContentSize(t *testing.T) {
	in := entriesFrom(40, 300, 400) // ~600 KiB of payload: several zstd blocks (128 KiB each at most)
	var raw []byte
	for _, e := range in {
		raw = binary.AppendUvarint(raw, uint64(len(e.Payload)))
		raw = append(raw, e.Payload...)
	}
	for _, opts := range [][]zstd.EOption{
		{zstd.WithEncoderConcurrency(1)},
		{zstd.WithEncoderConcurrency(4), zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithWindowSize(1 << 20)},
		{zstd.WithEncoderCRC(false), zstd.WithSingleSegment(false)},
	} {
		var frame bytes.Buffer
		w, err := zstd.NewWriter(&frame, opts...)
		if err != nil {
			t.Fatal(err)
		}
		// Written in pieces through the io.Writer side, never EncodeAll: the frame header cannot say
		// how long the content is.
		for rest := raw; len(rest) > 0; {
			n := min(len(rest), 10_000)
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		var hdr zstd.Header
		if err := hdr.Decode(frame.Bytes()); err != nil {
			t.Fatal(err)
		}
		if hdr.HasFCS {
			t.Fatalf("the streaming encoder wrote a content size (%d): the test needs a frame without one", hdr.FrameContentSize)
		}
		out, err := DecodeChunk(handMadeChunk(40, uint64(len(in)), frame.Bytes()))
		if err != nil {
			t.Fatalf("a frame without content size (%d bytes, single segment %v): %v", frame.Len(), hdr.SingleSegment, err)
		}
		if len(out) != len(in) {
			t.Fatalf("decoded %d entries, want %d", len(out), len(in))
		}
		for i := range in {
			if out[i].Index != in[i].Index || !bytes.Equal(out[i].Payload, in[i].Payload) {
				t.Fatalf("entry %d: %d, want %d", i, out[i].Index, in[i].Index)
			}
		}
	}
}

// The bound on what a body decompresses to holds whether or not the frame states its size.
func TestChunk_RefusesABodyLargerThanAChunkHolds(t *testing.T) {
	big := make([]byte, maxBody+1)
	var streamed bytes.Buffer
	w, err := zstd.NewWriter(&streamed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for name, frame := range map[string][]byte{
		"stated size": encoder.EncodeAll(big, nil),
		"streamed":    streamed.Bytes(),
	} {
		if _, err := DecodeChunk(handMadeChunk(1, 1, frame)); !errors.Is(err, ErrCorruptChunk) {
			t.Fatalf("%s: a body of %d bytes: %v, want ErrCorruptChunk", name, len(big), err)
		}
	}
}

// A small chunk decodes in memory of its own size. klauspost's encoder states no content size for a
// body under a few hundred bytes, and a decoder that then reserves the whole bound (4 MiB, zeroed) for
// every chunk made the sweep's drain of small oplogs four times slower. Bytes, not time: allocation is
// the same on a loaded machine.
func TestChunk_ASmallChunkDecodesWithoutReservingTheWholeBound(t *testing.T) {
	chunk, err := EncodeChunk([]oplog.Entry{{Index: 1, Payload: []byte("a")}, {Index: 2, Payload: []byte("bc")}, {Index: 3, Payload: []byte("def")}})
	if err != nil {
		t.Fatal(err)
	}
	var hdr zstd.Header
	if _, _, body, err := parseHeader(chunk); err != nil || hdr.Decode(body) != nil || hdr.HasFCS {
		t.Fatalf("the test needs a frame without a content size: %v, has one %v", err, hdr.HasFCS)
	}
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeChunk(chunk); err != nil {
				b.Fatal(err)
			}
		}
	})
	if got := res.AllocedBytesPerOp(); got > 64<<10 {
		t.Fatalf("decoding a chunk of 6 bytes of payload allocates %d bytes", got)
	}
}

// rawBody is what a chunk's body decompresses to for entries: each payload with its length prefix.
func rawBody(entries []oplog.Entry) []byte {
	var raw []byte
	for _, e := range entries {
		raw = binary.AppendUvarint(raw, uint64(len(e.Payload)))
		raw = append(raw, e.Payload...)
	}
	return raw
}

// streamFrame compresses raw as a streaming encoder does: one frame that states no content size.
func streamFrame(t *testing.T, raw []byte) []byte {
	t.Helper()
	var frame bytes.Buffer
	w, err := zstd.NewWriter(&frame, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return frame.Bytes()
}

// skippableFrame is a zstd skippable frame (RFC 8878 §3.1.2) holding data: readers pass over it.
func skippableFrame(data []byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, 0x184D2A50)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(data)))
	return append(out, data...)
}

// A chunk's body may be several zstd frames one after another, as RFC 8878 allows (a writer that
// flushes a frame per batch of entries, or concatenates compressed pieces): the entries are what the
// frames decompress to together, whether each frame states its content size or not, with skippable
// frames among them.
func TestChunk_DecodesABodyOfConcatenatedFrames(t *testing.T) {
	in := entriesFrom(100, 90, 50)
	raw := rawBody(in)
	cut1, cut2 := len(rawBody(in[:30])), len(rawBody(in[:70]))
	for name, body := range map[string][]byte{
		"two frames with their sizes":             slices.Concat(encoder.EncodeAll(raw[:cut1], nil), encoder.EncodeAll(raw[cut1:], nil)),
		"a frame with its size, then one without": slices.Concat(encoder.EncodeAll(raw[:cut1], nil), streamFrame(t, raw[cut1:])),
		"three frames and a skippable one": slices.Concat(streamFrame(t, raw[:cut1]), skippableFrame([]byte("note")),
			encoder.EncodeAll(raw[cut1:cut2], nil), streamFrame(t, raw[cut2:])),
		// A frame may end inside an entry: the frames are one stream.
		"frames cut inside an entry": slices.Concat(encoder.EncodeAll(raw[:cut1+7], nil), encoder.EncodeAll(raw[cut1+7:], nil)),
	} {
		out, err := DecodeChunk(handMadeChunk(100, uint64(len(in)), body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(out) != len(in) {
			t.Fatalf("%s: decoded %d entries, want %d", name, len(out), len(in))
		}
		for i := range in {
			if out[i].Index != in[i].Index || !bytes.Equal(out[i].Payload, in[i].Payload) {
				t.Fatalf("%s: entry %d is %d %q, want %d", name, i, out[i].Index, out[i].Payload, in[i].Index)
			}
		}
	}
}

// The bound on what a body decompresses to holds over all its frames together: frames each well under
// it that add up to more are refused, as one frame of that size is.
func TestChunk_RefusesConcatenatedFramesLargerTogetherThanAChunkHolds(t *testing.T) {
	half := make([]byte, maxBody/2+1)
	for name, body := range map[string][]byte{
		"stated sizes": slices.Concat(encoder.EncodeAll(half, nil), encoder.EncodeAll(half, nil)),
		"streamed":     slices.Concat(streamFrame(t, half), streamFrame(t, half)),
	} {
		if _, err := DecodeChunk(handMadeChunk(1, 1, body)); !errors.Is(err, ErrCorruptChunk) {
			t.Fatalf("%s: two frames of %d bytes each: %v, want ErrCorruptChunk", name, len(half), err)
		}
	}
}
