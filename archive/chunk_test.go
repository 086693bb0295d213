package archive

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

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
