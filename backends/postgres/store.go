package postgres

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	is "github.com/stratalog/strata/indexedstorage"
)

// Options configures New. A nil *Options is the zero Options, and a zero field means its default.
type Options struct {
	// Schema holds the table; DefaultSchema ("public") when empty. It is used exactly as written
	// (quoted), must be 1–63 bytes of letters, digits, '_' and '$' not starting with a digit, and is
	// created if it does not exist. A URL's schema parameter wins over it.
	Schema string
	// MaxConcurrentOps bounds how many operations of the Store run at once; the others queue. 0 means
	// the pool's maximum connections less 2 (kept free for code that reaches the pool directly), at
	// least 1, raised to MinConcurrentOps. A URL's max_concurrent_ops parameter wins over it.
	MaxConcurrentOps int
	// MinConcurrentOps is how many operations the caller needs to run at once (a sidecar's sweep
	// max_concurrency, whose archives share the Store's slots with the executor and would otherwise
	// queue on them). With no pool_max_conns in the connection string and no MaxConcurrentOps, the
	// pool is sized DefaultPoolConns(MinConcurrentOps); with a pool_max_conns too small for it, the
	// limit is MinConcurrentOps. What is set explicitly stands.
	MinConcurrentOps int
	// ConfigurePool, when set, adjusts the pool configuration parsed from the connection string before
	// the pool opens: run-time parameters, MaxConns, a tracer. The default MaxConcurrentOps follows the
	// MaxConns it leaves.
	ConfigurePool func(*pgxpool.Config)
}

// New opens a Store on connString and brings the schema up to date. connString is a libpq URL or
// keyword/value string, as pgxpool.ParseConfig reads it (pool_max_conns and the other pool_*
// parameters included; pool_max_conns defaults to DefaultPoolConns here); a postgres:// URL may also
// carry this package's parameters (ParamSchema, ParamMaxConcurrentOps), which New removes before pgx
// sees them and which win over opts. The pool connects lazily, but the migration does not: an
// unreachable server is an error here, ErrTransient.
func New(ctx context.Context, connString string, opts *Options) (*Store, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	connString, urlSchema, urlMaxOps, err := urlParams(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	o.Schema = cmp.Or(urlSchema, o.Schema)
	o.MaxConcurrentOps = cmp.Or(urlMaxOps, o.MaxConcurrentOps)
	schema := o.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	if err := validateSchema(schema); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if o.MaxConcurrentOps < 0 || o.MinConcurrentOps < 0 {
		return nil, fmt.Errorf("postgres: %w: MaxConcurrentOps %d, MinConcurrentOps %d: want ≥ 0",
			is.ErrInvalidArgument, o.MaxConcurrentOps, o.MinConcurrentOps)
	}
	poolConfig, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w: %v", is.ErrInvalidArgument, err)
	}
	poolSet := poolMaxConnsSet(connString)
	if !poolSet {
		poolConfig.MaxConns = int32(defaultPoolConns(o.MaxConcurrentOps, o.MinConcurrentOps))
	}
	if o.ConfigurePool != nil {
		o.ConfigurePool(poolConfig)
	}
	e, err := newEngine(ctx, poolConfig, schema)
	if err != nil {
		return nil, err
	}
	return limited(e, opLimit(int(poolConfig.MaxConns), o.MaxConcurrentOps, o.MinConcurrentOps)), nil
}

// limited puts e under a limit of maxOps operations at once.
func limited(e *engine, maxOps int) *Store {
	return &Store{engine: e, limiter: is.Limit(e, maxOps)}
}

// defaultPoolConns is the pool size New takes when the connection string sets none: room for minOps
// operations unless the operation limit is explicit.
func defaultPoolConns(maxOps, minOps int) int {
	if maxOps > 0 {
		return DefaultPoolConns(0)
	}
	return DefaultPoolConns(minOps)
}

// opLimit is the Store's operation limit: maxOps when set, else the pool less the reserved
// connections, at least 1 and at least the caller's minOps.
func opLimit(poolConns, maxOps, minOps int) int {
	if maxOps > 0 {
		return maxOps
	}
	return max(poolConns-reservedConns, 1, minOps)
}

// Pool returns the store's connection pool, for code that needs the engine itself (benchmarks). What
// runs on it directly is not under the Store's limit.
func (s *Store) Pool() *pgxpool.Pool { return s.engine.pool }

// Table returns the quoted, schema-qualified name of the table.
func (s *Store) Table() string { return s.engine.table }

// Schema returns the schema the store works in.
func (s *Store) Schema() string { return s.engine.schema }

// LimiterStats returns the counters of the Store's operation limit (indexedstorage.Limited).
func (s *Store) LimiterStats() is.LimiterStats { return s.limiter.Stats() }

// Capabilities: ScanStable hands back each key once, in ascending byte order.
func (s *Store) Capabilities() is.Capabilities { return s.engine.Capabilities() }

// Close closes the pool, waiting for operations under way to release their connections. Later calls
// return ErrClosed; Close itself is idempotent.
func (s *Store) Close() error { return s.engine.Close() }

// The operations run under the limit. Each is the engine's, documented on indexedstorage.Storage.

func (s *Store) Exists(ctx context.Context, ns, key string) (bool, error) {
	return s.limiter.Exists(ctx, ns, key)
}

func (s *Store) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return s.limiter.Append(ctx, ns, key, id, value)
}

func (s *Store) AppendMany(ctx context.Context, ns, key string, entries []is.Entry) error {
	return s.limiter.AppendMany(ctx, ns, key, entries)
}

func (s *Store) Length(ctx context.Context, ns, key string) (uint64, error) {
	return s.limiter.Length(ctx, ns, key)
}

func (s *Store) Read(ctx context.Context, ns, key string, from, to uint64) ([]is.Entry, error) {
	return s.limiter.Read(ctx, ns, key, from, to)
}

func (s *Store) First(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return s.limiter.First(ctx, ns, key)
}

func (s *Store) Last(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	return s.limiter.Last(ctx, ns, key)
}

func (s *Store) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	return s.limiter.LastID(ctx, ns, key)
}

func (s *Store) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	return s.limiter.Closest(ctx, ns, key, id)
}

// ClosestLast is one operation (indexedstorage.ClosestLastReader).
func (s *Store) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	return s.limiter.ClosestLast(ctx, ns, key, id)
}

func (s *Store) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	return s.limiter.DropPrefix(ctx, ns, key, upTo)
}

func (s *Store) Delete(ctx context.Context, ns, key string) error {
	return s.limiter.Delete(ctx, ns, key)
}

func (s *Store) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	return s.limiter.Scan(ctx, ns, prefix, cursor, count)
}

func (s *Store) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return s.limiter.ScanStable(ctx, ns, r, from, count)
}

// ScanDeep seeks from key to key within a page (indexedstorage.DeepScanner).
func (s *Store) ScanDeep(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	return s.limiter.ScanDeep(ctx, ns, r, from, count)
}

// ClosestLastMany is one operation, one limiter slot and one statement for the whole batch
// (indexedstorage.BatchReader).
func (s *Store) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	return s.limiter.ClosestLastMany(ctx, ns, reqs)
}

// DropPrefixMany is one operation and one limiter slot for the whole batch, one round trip and one
// transaction for the usual one (indexedstorage.BatchDropper).
func (s *Store) DropPrefixMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	return s.limiter.DropPrefixMany(ctx, ns, reqs)
}

// AppendKeys is one operation and one limiter slot for the whole batch, one round trip and one
// transaction (indexedstorage.BatchAppender).
func (s *Store) AppendKeys(ctx context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	return s.limiter.AppendKeys(ctx, ns, reqs)
}
