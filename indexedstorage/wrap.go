package indexedstorage

import "context"

// Operation names a Storage method in metrics and limiter accounting.
type Operation string

// The operations of Storage, as they appear in metric labels.
const (
	OpExists     Operation = "exists"
	OpAppend     Operation = "append"
	OpAppendMany Operation = "append_many"
	OpLength     Operation = "length"
	OpRead       Operation = "read"
	OpFirst      Operation = "first"
	OpLast       Operation = "last"
	OpLastID     Operation = "last_id"
	OpClosest    Operation = "closest"
	// OpClosestLast is ClosestLastReader's ClosestLast, on a backend that has it (on one that does not,
	// the two calls it falls back on are counted as themselves).
	OpClosestLast Operation = "closest_last"
	OpDropPrefix  Operation = "drop_prefix"
	OpDelete      Operation = "delete"
	OpScan        Operation = "scan"
	OpScanStable  Operation = "scan_stable"
	// OpClosestLastMany and OpDropPrefixMany are the batch operations (BatchReader, BatchDropper), on a
	// backend that has them (on one that does not, each key's operation is counted as itself).
	OpClosestLastMany Operation = "closest_last_many"
	OpDropPrefixMany  Operation = "drop_prefix_many"
	// OpAppendKeys is BatchAppender's AppendKeys, on a backend that has it.
	OpAppendKeys Operation = "append_keys"
)

// Operations lists every Operation, in the order of the Storage interface.
var Operations = []Operation{
	OpExists, OpAppend, OpAppendMany, OpLength, OpRead, OpFirst, OpLast, OpLastID, OpClosest,
	OpClosestLast, OpDropPrefix, OpDelete, OpScan, OpScanStable, OpClosestLastMany, OpDropPrefixMany,
	OpAppendKeys,
}

// Wrapper is implemented by a Storage that decorates another, such as Limit's and Instrument's.
type Wrapper interface {
	Unwrap() Storage
}

// Interceptor runs one operation of a wrapped Storage: it calls do (with the same or a derived
// context) to run the operation itself, and returns do's error or its own.
type Interceptor func(ctx context.Context, op Operation, do func(context.Context) error) error

// Intercept wraps st so that every operation but Close runs through fn: the shape of the limiter and
// the instrumentation, and of a test's fault injection. Capabilities are forwarded; Unwrap returns st.
func Intercept(st Storage, fn Interceptor) Storage { return &around{inner: st, call: fn} }

// around is a Storage that runs every operation but Close through one function.
type around struct {
	inner Storage
	call  Interceptor
}

func (a *around) Unwrap() Storage            { return a.inner }
func (a *around) Capabilities() Capabilities { return CapabilitiesOf(a.inner) }
func (a *around) Close() error               { return a.inner.Close() }

func (a *around) Exists(ctx context.Context, ns, key string) (ok bool, err error) {
	err = a.call(ctx, OpExists, func(ctx context.Context) (e error) { ok, e = a.inner.Exists(ctx, ns, key); return })
	return
}

func (a *around) LastID(ctx context.Context, ns, key string) (id uint64, ok bool, err error) {
	err = a.call(ctx, OpLastID, func(ctx context.Context) (e error) { id, ok, e = a.inner.LastID(ctx, ns, key); return })
	return
}

func (a *around) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return a.call(ctx, OpAppend, func(ctx context.Context) error { return a.inner.Append(ctx, ns, key, id, value) })
}

func (a *around) AppendMany(ctx context.Context, ns, key string, entries []Entry) error {
	return a.call(ctx, OpAppendMany, func(ctx context.Context) error { return a.inner.AppendMany(ctx, ns, key, entries) })
}

func (a *around) Length(ctx context.Context, ns, key string) (n uint64, err error) {
	err = a.call(ctx, OpLength, func(ctx context.Context) (e error) { n, e = a.inner.Length(ctx, ns, key); return })
	return
}

func (a *around) Read(ctx context.Context, ns, key string, from, to uint64) (entries []Entry, err error) {
	err = a.call(ctx, OpRead, func(ctx context.Context) (e error) { entries, e = a.inner.Read(ctx, ns, key, from, to); return })
	return
}

func (a *around) First(ctx context.Context, ns, key string) (entry Entry, ok bool, err error) {
	err = a.call(ctx, OpFirst, func(ctx context.Context) (e error) { entry, ok, e = a.inner.First(ctx, ns, key); return })
	return
}

func (a *around) Last(ctx context.Context, ns, key string) (entry Entry, ok bool, err error) {
	err = a.call(ctx, OpLast, func(ctx context.Context) (e error) { entry, ok, e = a.inner.Last(ctx, ns, key); return })
	return
}

func (a *around) Closest(ctx context.Context, ns, key string, id uint64) (entry Entry, ok bool, err error) {
	err = a.call(ctx, OpClosest, func(ctx context.Context) (e error) { entry, ok, e = a.inner.Closest(ctx, ns, key, id); return })
	return
}

// ClosestLast is one operation where the inner Storage is a ClosestLastReader, else the two it falls
// back on, each run (and counted) as itself.
func (a *around) ClosestLast(ctx context.Context, ns, key string, id uint64) (entry Entry, found bool, last uint64, exists bool, err error) {
	r, ok := a.inner.(ClosestLastReader)
	if !ok {
		return ClosestLast(ctx, storageOnly{a}, ns, key, id)
	}
	err = a.call(ctx, OpClosestLast, func(ctx context.Context) (e error) {
		entry, found, last, exists, e = r.ClosestLast(ctx, ns, key, id)
		return
	})
	return
}

// ScanDeep runs as OpScanStable, the inner Storage's ScanDeep where it has one, else its ScanStable.
func (a *around) ScanDeep(ctx context.Context, ns string, r KeyRange, from Resume, count int) (page Page, err error) {
	err = a.call(ctx, OpScanStable, func(ctx context.Context) (e error) {
		page, e = ScanDeep(ctx, a.inner, ns, r, from, count)
		return
	})
	return
}

// ClosestLastMany is one operation where the inner Storage is a BatchReader, else the per-key calls it
// falls back on, each run (and counted) as itself.
func (a *around) ClosestLastMany(ctx context.Context, ns string, reqs []KeyID) (out []ClosestLastResult, err error) {
	b, ok := a.inner.(BatchReader)
	if !ok {
		return ClosestLastMany(ctx, perKeyOnly{a, a}, ns, reqs)
	}
	err = a.call(ctx, OpClosestLastMany, func(ctx context.Context) (e error) { out, e = b.ClosestLastMany(ctx, ns, reqs); return })
	return
}

// DropPrefixMany is one operation where the inner Storage is a BatchDropper, else the per-key drops it
// falls back on, each run (and counted) as itself.
func (a *around) DropPrefixMany(ctx context.Context, ns string, reqs []KeyID) (out []DropResult, err error) {
	b, ok := a.inner.(BatchDropper)
	if !ok {
		return DropPrefixMany(ctx, perKeyOnly{a, a}, ns, reqs)
	}
	err = a.call(ctx, OpDropPrefixMany, func(ctx context.Context) (e error) { out, e = b.DropPrefixMany(ctx, ns, reqs); return })
	return
}

// AppendKeys is one operation where the inner Storage is a BatchAppender, else the per-key appends it
// falls back on, each run (and counted) as itself.
func (a *around) AppendKeys(ctx context.Context, ns string, reqs []KeyEntries) (out []error, err error) {
	b, ok := a.inner.(BatchAppender)
	if !ok {
		return AppendKeys(ctx, perKeyOnly{a, a}, ns, reqs)
	}
	err = a.call(ctx, OpAppendKeys, func(ctx context.Context) (e error) { out, e = b.AppendKeys(ctx, ns, reqs); return })
	return
}

// perKeyOnly hides the batch methods of a Storage, so that a fallback calls its per-key ones.
type perKeyOnly struct {
	Storage
	ClosestLastReader
}

// storageOnly hides every method of a Storage but the interface's own.
type storageOnly struct{ Storage }

func (a *around) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (dropped uint64, err error) {
	err = a.call(ctx, OpDropPrefix, func(ctx context.Context) (e error) { dropped, e = a.inner.DropPrefix(ctx, ns, key, upTo); return })
	return
}

func (a *around) Delete(ctx context.Context, ns, key string) error {
	return a.call(ctx, OpDelete, func(ctx context.Context) error { return a.inner.Delete(ctx, ns, key) })
}

func (a *around) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (next uint64, keys []string, err error) {
	err = a.call(ctx, OpScan, func(ctx context.Context) (e error) {
		next, keys, e = a.inner.Scan(ctx, ns, prefix, cursor, count)
		return
	})
	return
}

func (a *around) ScanStable(ctx context.Context, ns string, r KeyRange, from Resume, count int) (page Page, err error) {
	err = a.call(ctx, OpScanStable, func(ctx context.Context) (e error) {
		page, e = a.inner.ScanStable(ctx, ns, r, from, count)
		return
	})
	return
}
