package archive_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/oplog"
)

func mustChunk(t testing.TB, first oplog.Index, payloads ...string) []byte {
	t.Helper()
	entries := make([]oplog.Entry, len(payloads))
	for i, p := range payloads {
		entries[i] = oplog.Entry{Index: first + oplog.Index(i), Payload: []byte(p)}
	}
	c, err := archive.EncodeChunk(entries)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sampleSegment(t testing.TB) ([]archive.SegmentChunk, []byte, []archive.PackedChunk) {
	t.Helper()
	chunks := []archive.SegmentChunk{
		{Key: "0000/shop:cart/1", Chunk: mustChunk(t, 1, "a", "bb", "ccc")},
		{Key: "111e/é:日本", Chunk: mustChunk(t, 7, "x")},
		{Key: "3fff/" + strings.Repeat("k", is.MaxKeyLen-5), Chunk: mustChunk(t, oplog.Index(is.MaxID), "last")},
	}
	seg, entries, err := archive.EncodeSegment(chunks)
	if err != nil {
		t.Fatal(err)
	}
	return chunks, seg, entries
}

// A segment lists its chunks in its footer: the decoded footer is what EncodeSegment returned, and
// each entry's bytes are the chunk that went in, which decodes to its entries.
func TestSegment_RoundTrip(t *testing.T) {
	chunks, seg, entries := sampleSegment(t)
	got, err := archive.DecodeSegment(seg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(chunks) {
		t.Fatalf("footer lists %d chunks, want %d", len(got), len(chunks))
	}
	wantSpans := [][2]oplog.Index{{1, 3}, {7, 7}, {oplog.Index(is.MaxID), oplog.Index(is.MaxID)}}
	for i, e := range got {
		if e != entries[i] {
			t.Fatalf("entry %d decodes as %+v, was encoded as %+v", i, e, entries[i])
		}
		if e.Key != chunks[i].Key || e.First != wantSpans[i][0] || e.Last != wantSpans[i][1] {
			t.Fatalf("entry %d is %q %d..%d, want %q %v", i, e.Key, e.First, e.Last, chunks[i].Key, wantSpans[i])
		}
		data, err := archive.PackedChunkBytes(e, seg[e.Offset:e.Offset+e.Length])
		if err != nil || !bytes.Equal(data, chunks[i].Chunk) {
			t.Fatalf("entry %d's bytes: %v", i, err)
		}
	}
	// The trailer alone says where the footer is: a reader can range-read it.
	size := uint64(len(seg))
	at, n, _, err := archive.ParseSegmentTrailer(seg[size-archive.SegmentTrailerLen:], size)
	if err != nil || at != got[len(got)-1].Offset+got[len(got)-1].Length || at+n+archive.SegmentTrailerLen != size {
		t.Fatalf("trailer: footer at %d, %d bytes (%v); segment %d bytes", at, n, err, size)
	}
}

// Every single flipped byte of a segment is caught: in a chunk by its CRC (PackedChunkBytes), in the
// footer or trailer by DecodeSegment.
func TestSegment_EveryFlippedByteIsCaught(t *testing.T) {
	_, seg, entries := sampleSegment(t)
	bodyEnd := entries[len(entries)-1].Offset + entries[len(entries)-1].Length
	for i := range seg {
		bad := bytes.Clone(seg)
		bad[i] ^= 0x20
		if uint64(i) >= bodyEnd {
			if _, err := archive.DecodeSegment(bad); !errors.Is(err, archive.ErrCorruptSegment) || !errors.Is(err, oplog.ErrIntegrity) {
				t.Fatalf("byte %d of the footer or trailer flipped: %v", i, err)
			}
			continue
		}
		caught := false
		for _, e := range entries {
			if uint64(i) >= e.Offset && uint64(i) < e.Offset+e.Length {
				_, err := archive.PackedChunkBytes(e, bad[e.Offset:e.Offset+e.Length])
				caught = errors.Is(err, archive.ErrCorruptSegment)
			}
		}
		if !caught {
			t.Fatalf("byte %d of the body flipped went unnoticed", i)
		}
	}
}

// A chunk's bytes that fail their listing's check are named with what was read and what the listing
// says, so an operator can tell a short read from flipped bytes.
func TestPackedChunkBytes_NamesWhatWasReadAndWhatIsListed(t *testing.T) {
	_, seg, entries := sampleSegment(t)
	e := entries[0]
	bad := bytes.Clone(seg[e.Offset : e.Offset+e.Length])
	bad[0] ^= 0x20
	_, err := archive.PackedChunkBytes(e, bad)
	want := fmt.Sprintf("read %d bytes with CRC %08x where its listing says %d bytes with CRC %08x",
		len(bad), crc32.Checksum(bad, crc32.MakeTable(crc32.Castagnoli)), e.Length, e.CRC)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("flipped: %v; want it to say %q", err, want)
	}
	_, err = archive.PackedChunkBytes(e, seg[e.Offset:e.Offset+e.Length-1])
	if want := fmt.Sprintf("read %d bytes", e.Length-1); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("short: %v; want it to say %q", err, want)
	}
}

// Truncated segments (a partial upload, a short read) are corrupt, never a shorter valid segment.
func TestSegment_TruncatedIsCorrupt(t *testing.T) {
	_, seg, _ := sampleSegment(t)
	for n := range len(seg) {
		if _, err := archive.DecodeSegment(seg[:n]); !errors.Is(err, archive.ErrCorruptSegment) {
			t.Fatalf("the first %d of %d bytes: %v", n, len(seg), err)
		}
	}
}

// A footer whose checksum is right but whose entries lie (a foreign writer's bug) is refused: chunks
// that overlap, leave a gap, run past the body, or list a bad span or key.
func TestSegment_InconsistentFooterIsRefused(t *testing.T) {
	c1, c2 := mustChunk(t, 1, "a"), mustChunk(t, 5, "b", "c")
	body := append(bytes.Clone(c1), c2...)
	type ent struct {
		key                         string
		first, last, offset, length uint64
	}
	var extra []byte // bytes after the footer's last entry
	build := func(count uint64, es ...ent) []byte {
		f := []byte{1}
		f = binary.AppendUvarint(f, count)
		for _, e := range es {
			f = binary.AppendUvarint(f, uint64(len(e.key)))
			f = append(f, e.key...)
			for _, v := range []uint64{e.first, e.last, e.offset, e.length} {
				f = binary.AppendUvarint(f, v)
			}
			f = binary.BigEndian.AppendUint32(f, 0)
		}
		f = append(f, extra...)
		seg := append(bytes.Clone(body), f...)
		seg = binary.BigEndian.AppendUint32(seg, uint32(len(f)))
		seg = binary.BigEndian.AppendUint32(seg, crc32.Checksum(f, crc32.MakeTable(crc32.Castagnoli)))
		return append(seg, archive.SegmentMagic...)
	}
	n1, n2 := uint64(len(c1)), uint64(len(c2))
	good := []ent{{"a", 1, 1, 0, n1}, {"b", 5, 6, n1, n2}}
	if _, err := archive.DecodeSegment(build(2, good...)); err != nil {
		t.Fatalf("the well-formed footer: %v", err)
	}
	for name, seg := range map[string][]byte{
		"overlap":         build(2, good[0], ent{"b", 5, 6, n1 - 1, n2}),
		"gap":             build(2, ent{"a", 1, 1, 0, n1 - 1}, good[1]),
		"past the body":   build(2, good[0], ent{"b", 5, 6, n1, n2 + 1}),
		"short of body":   build(1, good[0]),
		"empty chunk":     build(3, good[0], ent{"z", 9, 9, n1, 0}, good[1]),
		"last < first":    build(2, good[0], ent{"b", 6, 5, n1, n2}),
		"first 0":         build(2, ent{"a", 0, 1, 0, n1}, good[1]),
		"span too long":   build(2, good[0], ent{"b", 5, 5 + oplog.MaxChunkEntries, n1, n2}),
		"above MaxID":     build(2, good[0], ent{"b", is.MaxID, is.MaxID + 1, n1, n2}),
		"empty key":       build(2, good[0], ent{"", 5, 6, n1, n2}),
		"key not UTF-8":   build(2, good[0], ent{"\xff", 5, 6, n1, n2}),
		"key with NUL":    build(2, good[0], ent{"b\x00", 5, 6, n1, n2}),
		"count too large": build(3, good...),
		"count 0":         build(0),
		"no magic":        append(build(2, good...)[:len(body)+1], "xxxxxxxxxxxxxxxx"...),
		"count above max": build(archive.MaxSegmentChunks+1, good...),
	} {
		if _, err := archive.DecodeSegment(seg); !errors.Is(err, archive.ErrCorruptSegment) {
			t.Errorf("%s: %v, want ErrCorruptSegment", name, err)
		}
	}
	extra = []byte{0}
	if _, err := archive.DecodeSegment(build(2, good...)); !errors.Is(err, archive.ErrCorruptSegment) {
		t.Errorf("a byte after the last entry: %v, want ErrCorruptSegment", err)
	}
}

// EncodeSegment refuses what it cannot describe: no chunks, a bad key, bytes that are no chunk.
func TestEncodeSegment_RefusesBadInput(t *testing.T) {
	c := mustChunk(t, 1, "a")
	corrupt := bytes.Clone(c)
	corrupt[1] ^= 1
	for name, chunks := range map[string][]archive.SegmentChunk{
		"none":          nil,
		"empty key":     {{Key: "", Chunk: c}},
		"long key":      {{Key: strings.Repeat("k", is.MaxKeyLen+1), Chunk: c}},
		"not UTF-8":     {{Key: "\xc3", Chunk: c}},
		"corrupt chunk": {{Key: "k", Chunk: corrupt}},
		"no chunk":      {{Key: "k", Chunk: nil}},
	} {
		if _, _, err := archive.EncodeSegment(chunks); err == nil {
			t.Errorf("%s: EncodeSegment succeeded", name)
		}
	}
}

// An index row's value round-trips, and a row that cannot describe a chunk is corrupt.
func TestSegmentRef_RoundTripAndRefusals(t *testing.T) {
	ref := archive.SegmentRef{Segment: "ephemeral/0/segments/x", First: 5, Offset: 1 << 40, Length: 77, CRC: 0xdeadbeef}
	got, err := archive.DecodeSegmentRef(archive.EncodeSegmentRef(ref), 9)
	if err != nil || got != ref {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if e := got.Chunk("k", 9); e.First != 5 || e.Last != 9 || e.Offset != 1<<40 || e.Length != 77 || e.Key != "k" {
		t.Fatalf("Chunk: %+v", e)
	}
	enc := archive.EncodeSegmentRef(ref)
	for name, c := range map[string]struct {
		value []byte
		last  oplog.Index
	}{
		"empty":             {nil, 9},
		"version 2":         {append([]byte{2}, enc[1:]...), 9},
		"truncated":         {enc[:5], 9},
		"no segment":        {enc[:len(enc)-len(ref.Segment)], 9},
		"last below first":  {enc, 4},
		"span too long":     {enc, 5 + oplog.MaxChunkEntries},
		"zero length":       {archive.EncodeSegmentRef(archive.SegmentRef{Segment: "s", First: 1}), 1},
		"first 0":           {archive.EncodeSegmentRef(archive.SegmentRef{Segment: "s", Length: 1}), 1},
		"segment not UTF-8": {archive.EncodeSegmentRef(archive.SegmentRef{Segment: "\xff", First: 1, Length: 1}), 1},
	} {
		if _, err := archive.DecodeSegmentRef(c.value, c.last); !errors.Is(err, archive.ErrCorruptSegment) {
			t.Errorf("%s: %v, want ErrCorruptSegment", name, err)
		}
	}
}

// Whatever bytes a segment holds, decoding it returns a footer or an error, never a panic, and a
// footer it accepts lies within the segment.
func FuzzDecodeSegment(f *testing.F) {
	_, seg, _ := sampleSegment(f)
	f.Add(seg)
	f.Add([]byte(archive.SegmentMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := archive.DecodeSegment(data)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Offset+e.Length > uint64(len(data)) {
				t.Fatalf("entry %+v past a segment of %d bytes", e, len(data))
			}
		}
	})
}

// Segment paths sort by creation time, across digit counts and within one instant by nonce, and are
// the documented form.
func TestSegmentPath_SortsByCreationTime(t *testing.T) {
	at := time.Date(2025, 12, 2, 0, 0, 0, 0, time.UTC)
	if got, want := archive.SegmentPath(oplog.Ephemeral, 0, at, 0x0123456789abcdef), "ephemeral/0/segments/01764633600000000000-0123456789abcdef"; got != want {
		t.Fatalf("SegmentPath = %q, want %q", got, want)
	}
	times := []time.Time{time.Unix(0, 0), time.Unix(0, 9), time.Unix(0, 10), time.Unix(1, 0), at, at.Add(time.Nanosecond)}
	var paths []string
	for _, tm := range times {
		paths = append(paths, archive.SegmentPath(oplog.Durable, 3, tm, 0), archive.SegmentPath(oplog.Durable, 3, tm, 1))
	}
	if !slices.IsSorted(paths) {
		t.Fatalf("paths do not sort by time: %q", paths)
	}
}
