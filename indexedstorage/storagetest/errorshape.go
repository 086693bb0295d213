package storagetest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

// call is one operation of the Storage on (ns, key), as the suite provokes its errors.
type call struct {
	op  is.Operation
	run func(ctx context.Context, st is.Storage, ns, key string) error
}

// indexCalls are the operations on one index, each with a batch or id that is valid on an empty index.
var indexCalls = []call{
	{is.OpExists, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, err := st.Exists(ctx, ns, key)
		return err
	}},
	{is.OpAppend, func(ctx context.Context, st is.Storage, ns, key string) error {
		return st.Append(ctx, ns, key, 1, []byte("v"))
	}},
	{is.OpAppendMany, func(ctx context.Context, st is.Storage, ns, key string) error {
		return st.AppendMany(ctx, ns, key, []is.Entry{{ID: 1, Value: []byte("v")}})
	}},
	{is.OpLength, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, err := st.Length(ctx, ns, key)
		return err
	}},
	{is.OpRead, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, err := st.Read(ctx, ns, key, 0, is.MaxID)
		return err
	}},
	{is.OpFirst, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, _, err := st.First(ctx, ns, key)
		return err
	}},
	{is.OpLast, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, _, err := st.Last(ctx, ns, key)
		return err
	}},
	{is.OpLastID, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, _, err := st.LastID(ctx, ns, key)
		return err
	}},
	{is.OpClosest, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, _, err := st.Closest(ctx, ns, key, 1)
		return err
	}},
	{is.OpClosestLast, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, _, _, _, err := st.(is.ClosestLastReader).ClosestLast(ctx, ns, key, 1)
		return err
	}},
	{is.OpDropPrefix, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, err := st.DropPrefix(ctx, ns, key, 1)
		return err
	}},
	{is.OpDelete, func(ctx context.Context, st is.Storage, ns, key string) error {
		return st.Delete(ctx, ns, key)
	}},
}

// batchCalls are the batch operations, each of one key, on a backend that has them (is.BatchReader,
// is.BatchDropper, is.BatchAppender): their call's own errors name the namespace and no key (a key's own failure is its
// part's Err, named by its key: the poisoned checks see to those).
var batchCalls = []call{
	{is.OpClosestLastMany, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, err := st.(is.BatchReader).ClosestLastMany(ctx, ns, []is.KeyID{{Key: key, ID: 1}})
		return err
	}},
	{is.OpDropPrefixMany, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, err := st.(is.BatchDropper).DropPrefixMany(ctx, ns, []is.KeyID{{Key: key, ID: 1}})
		return err
	}},
	{is.OpAppendKeys, func(ctx context.Context, st is.Storage, ns, key string) error {
		_, err := st.(is.BatchAppender).AppendKeys(ctx, ns, []is.KeyEntries{{Key: key, Entries: []is.Entry{{ID: 9}}}})
		return err
	}},
}

// scanCalls are the walks of a namespace; key is unused (their errors name no index).
var scanCalls = []call{
	{is.OpScan, func(ctx context.Context, st is.Storage, ns, _ string) error {
		_, _, err := st.Scan(ctx, ns, "", 0, 10)
		return err
	}},
	{is.OpScanStable, func(ctx context.Context, st is.Storage, ns, _ string) error {
		_, err := st.ScanStable(ctx, ns, is.KeyRange{}, is.Resume{}, 10)
		return err
	}},
}

// testErrorShape checks that an error names backend, operation and index: every conflict, invalid
// argument and operation after Close comes back as an *is.OpError whose Op is the operation's metric
// label and whose Namespace and Key are the call's (Key empty for a scan), matching its sentinel.
func testErrorShape(t *testing.T, h Harness) {
	const ns, key = "errorshape", "agent:7"
	t.Run("Conflict", func(t *testing.T) {
		f := newFixture(t, h)
		// A last id at the top of the range, which the message must name whole (a backend that
		// stores ids as hex or text gets it wrong first).
		last := is.MaxID - 7
		f.append(ns, key, last)
		err := f.st.Append(f.ctx, ns, key, 5, nil)
		requireOpError(t, is.OpAppend, ns, key, is.ErrConflict, err)
		if err != nil && !strings.Contains(err.Error(), strconv.FormatUint(last, 10)) {
			t.Errorf("conflict %q does not name the index's last id %d", err, last)
		}
		requireOpError(t, is.OpAppendMany, ns, key, is.ErrConflict,
			f.st.AppendMany(f.ctx, ns, key, []is.Entry{{ID: 5}, {ID: 8}}))
		if b, ok := f.st.(is.BatchAppender); ok {
			// A batch's conflict is its key's part, named by that key and the index's last id.
			errs, err := b.AppendKeys(f.ctx, ns, []is.KeyEntries{{Key: "fresh", Entries: []is.Entry{{ID: 1}}}, {Key: key, Entries: []is.Entry{{ID: 5}}}})
			if err != nil || len(errs) != 2 || errs[0] != nil {
				t.Fatalf("AppendKeys of a fresh key and a conflicting one: %v, %v; want the second part's conflict only", errs, err)
			}
			requireOpError(t, is.OpAppendKeys, ns, key, is.ErrConflict, errs[1])
			if !strings.Contains(errs[1].Error(), strconv.FormatUint(last, 10)) {
				t.Errorf("batch conflict %q does not name the index's last id %d", errs[1], last)
			}
		}
	})
	t.Run("InvalidArgument", func(t *testing.T) {
		f := newFixture(t, h)
		const badNS = "bad ns" // ' ' is outside a namespace's alphabet (is.ValidateNamespace)
		for _, c := range callsOf(f.st) {
			requireOpError(t, c.op, badNS, keyOf(c, key), is.ErrInvalidArgument, c.run(f.ctx, f.st, badNS, key))
		}
	})
	t.Run("Closed", func(t *testing.T) {
		f := newFixture(t, h)
		f.append(ns, key, 1)
		if err := f.st.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for _, c := range callsOf(f.st) {
			requireOpError(t, c.op, ns, keyOf(c, key), is.ErrClosed, c.run(f.ctx, f.st, ns, key))
		}
	})
}

// callsOf lists the operations st has: ClosestLast only on an is.ClosestLastReader, the batch forms
// only on an is.BatchReader, an is.BatchDropper and an is.BatchAppender (the per-key fallbacks' errors are the per-key
// operations', checked as such).
func callsOf(st is.Storage) []call {
	var calls []call
	for _, c := range slices.Concat(indexCalls, scanCalls, batchCalls) {
		_, closestLast := st.(is.ClosestLastReader)
		_, reader := st.(is.BatchReader)
		_, dropper := st.(is.BatchDropper)
		_, appender := st.(is.BatchAppender)
		if (c.op == is.OpClosestLast && !closestLast) || (c.op == is.OpClosestLastMany && !reader) ||
			(c.op == is.OpDropPrefixMany && !dropper) || (c.op == is.OpAppendKeys && !appender) {
			continue
		}
		calls = append(calls, c)
	}
	return calls
}

// keyOf is the key an error of c names: none for a scan, nor for a batch's call.
func keyOf(c call, key string) string {
	switch c.op {
	case is.OpScan, is.OpScanStable, is.OpClosestLastMany, is.OpDropPrefixMany, is.OpAppendKeys:
		return ""
	}
	return key
}

func requireOpError(t *testing.T, op is.Operation, ns, key string, sentinel, err error) {
	t.Helper()
	var oe *is.OpError
	switch {
	case err == nil:
		t.Errorf("%s (ns %q, key %q): no error, want %v", op, ns, key, sentinel)
	case !errors.Is(err, sentinel):
		t.Errorf("%s (ns %q, key %q): %v, want %v", op, ns, key, err, sentinel)
	case !errors.As(err, &oe):
		t.Errorf("%s (ns %q, key %q): %v (%T) is no *indexedstorage.OpError naming backend, operation and index", op, ns, key, err, err)
	case oe.Backend == "" || oe.Op != op || oe.Namespace != ns || oe.Key != key:
		t.Errorf("%s (ns %q, key %q): %v names backend %q, op %q, ns %q, key %q", op, ns, key, err, oe.Backend, oe.Op, oe.Namespace, oe.Key)
	}
}

// requireNamesIndex checks that err, if any, of an operation on one index whose own storage failed is
// an *is.OpError naming a backend and that index, so an operator can tell which agent is broken.
func requireNamesIndex(t testing.TB, op, ns, key string, err error) {
	t.Helper()
	var oe *is.OpError
	if err == nil {
		return
	}
	if !errors.As(err, &oe) {
		t.Fatalf("%s of %q: %v (%T) is no *indexedstorage.OpError naming backend, operation and index", op, key, err, err)
	}
	if oe.Backend == "" || oe.Op == "" || oe.Namespace != ns || oe.Key != key {
		t.Fatalf("%s of %q: %v names backend %q, op %q, ns %q, key %q", op, key, err, oe.Backend, oe.Op, oe.Namespace, oe.Key)
	}
}
