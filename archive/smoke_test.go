package archive_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
)

func TestSmokeDrain(t *testing.T) {
	st, blobs := memory.New(), memory.NewBlobStore()
	stack, err := archive.DefaultStack(st, blobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	agent := oplog.AgentID{Component: "c", Name: "a/../b %"}
	for _, mode := range oplog.Modes {
		const n = 10_000
		var entries []oplog.Entry
		for i := 1; i <= n; i++ {
			entries = append(entries, oplog.Entry{Index: oplog.Index(i), Payload: []byte(fmt.Sprint(i))})
		}
		if err := stack.Append(t.Context(), agent, mode, entries); err != nil {
			t.Fatal(err)
		}
		d, err := stack.Drain(t.Context(), agent, mode)
		if err != nil {
			t.Fatal(err)
		}
		got, err := stack.Read(t.Context(), agent, mode, 1, n+5)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Fatalf("%s: read %d entries after %+v", mode, len(got), d)
		}
		for i, e := range got {
			if e.Index != oplog.Index(i+1) || !bytes.Equal(e.Payload, []byte(fmt.Sprint(i+1))) {
				t.Fatalf("entry %d: %d %q", i, e.Index, e.Payload)
			}
		}
		t.Logf("%s: %+v", mode, d)
	}
}
