package postgres

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	is "github.com/stratalog/strata/indexedstorage"
)

// The query parameters Open reads from a postgres URL and removes before pgx parses it: pgx would send
// any parameter it does not know to the server as a run-time parameter, and the server would refuse
// the connection.
const (
	ParamSchema           = "schema"
	ParamMaxConcurrentOps = "max_concurrent_ops"
)

// DefaultPingTimeout bounds the liveness ping pgxpool sends on a connection that sat idle before
// handing it out, when the URL sets no pool_ping_timeout (pgx's own default is none). Without a bound,
// a ping on a connection to a server that stopped answering, whose caller has no deadline (a loop
// waiting for cancellation), is left running for a minute after the caller gives up, holding its
// connection, and the pool's Close waits for it: a partitioned server would hold shutdown that long.
const DefaultPingTimeout = 3 * time.Second

// newPool opens a pool on poolConfig with this package's defaults for what the connection string
// left unset.
func newPool(ctx context.Context, poolConfig *pgxpool.Config) (*pgxpool.Pool, error) {
	if poolConfig.PingTimeout == 0 {
		poolConfig.PingTimeout = DefaultPingTimeout
	}
	return pgxpool.NewWithConfig(ctx, poolConfig)
}

// reservedConns is how many pool connections the default max_concurrent_ops leaves free of the
// limiter, for code that reaches the pool directly and so that a slot's holder never waits for a
// connection.
const reservedConns = 2

// Open opens the store a postgres:// (or postgresql://) URL names: New with default Options. The URL
// is any libpq URL, plus two parameters of this package:
//
//   - schema: the schema holding the table (default "public"; see Options.Schema);
//   - max_concurrent_ops: how many operations run at once, an integer ≥ 1 (default: the pool's
//     maximum connections, pool_max_conns, less 2, at least 1). pool_max_conns itself defaults to
//     DefaultPoolConns(0) here, at least 16, where pgx would take max(4, NumCPU): so the default
//     max_concurrent_ops (14 and up) is above the sweep's default max_concurrency (4); a caller that
//     needs more says so with New's Options.MinConcurrentOps (backends.Options.MinConcurrentOps).
//
// A bad value is ErrInvalidArgument, naming the parameter.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	if !isURL(rawURL) {
		return nil, fmt.Errorf("postgres: %w", errNotURL)
	}
	return New(ctx, rawURL, nil)
}

// errNotURL refuses a connection string where a postgres:// URL is wanted.
var errNotURL = fmt.Errorf("%w: Open takes a postgres:// or postgresql:// URL", is.ErrInvalidArgument)

// DefaultPoolConns is the pool size New takes when the connection string sets no pool_max_conns: 16,
// or the machine's CPUs if more, or enough for minOps operations and the reserved connections.
func DefaultPoolConns(minOps int) int {
	return max(16, runtime.NumCPU(), minOps+reservedConns)
}

// isURL tells a postgres:// URL from a keyword/value connection string.
// urlParams takes this package's parameters off a postgres:// URL: it returns the connection string
// pgx reads, and the schema and max_concurrent_ops the URL gives ("" and 0 where it gives none, so
// that a caller's options stand). A keyword/value string is returned as it is.
func urlParams(connString string) (conn, schema string, maxOps int, err error) {
	if !isURL(connString) {
		return connString, "", 0, nil
	}
	conn, schema, maxOps, err = splitURL(connString)
	if err != nil {
		return "", "", 0, err
	}
	if _, given := queryParam(connString, ParamSchema); !given {
		schema = ""
	}
	return conn, schema, maxOps, nil
}

func isURL(connString string) bool {
	return strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://")
}

// poolMaxConnsSet tells whether a connection string, URL or keyword/value, sets pool_max_conns.
func poolMaxConnsSet(connString string) bool {
	if isURL(connString) {
		_, set := queryParam(connString, "pool_max_conns")
		return set
	}
	for _, field := range strings.Fields(connString) {
		if name, _, _ := strings.Cut(field, "="); name == "pool_max_conns" {
			return true
		}
	}
	return false
}

// queryParam returns the URL query's value of the parameter and whether the query names it.
func queryParam(rawURL, name string) (string, bool) {
	_, rawQuery, _ := strings.Cut(rawURL, "?")
	query, err := url.ParseQuery(rawQuery)
	return query.Get(name), err == nil && query.Has(name)
}

// splitURL removes this package's parameters from rawURL and returns what remains for pgx, the
// schema, and max_concurrent_ops (0 when absent). Only the query is rewritten, so host lists and
// socket paths, which net/url cannot parse, pass through untouched.
func splitURL(rawURL string) (connString, schema string, maxOps int, err error) {
	if !isURL(rawURL) {
		return "", "", 0, errNotURL
	}
	base, rawQuery, _ := strings.Cut(rawURL, "?")
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", "", 0, fmt.Errorf("%w: URL query: %v", is.ErrInvalidArgument, err)
	}
	param := func(name string) (string, bool, error) {
		values, ok := query[name]
		query.Del(name)
		if len(values) > 1 {
			return "", false, fmt.Errorf("%w: URL parameter %s is given %d times", is.ErrInvalidArgument, name, len(values))
		}
		if !ok {
			return "", false, nil
		}
		return values[0], true, nil
	}

	schema, given, err := param(ParamSchema)
	switch {
	case err != nil:
		return "", "", 0, err
	case !given:
		schema = DefaultSchema
	default:
		if err := validateSchema(schema); err != nil {
			return "", "", 0, fmt.Errorf("URL parameter %s: %w", ParamSchema, err)
		}
	}

	ops, given, err := param(ParamMaxConcurrentOps)
	if err != nil {
		return "", "", 0, err
	}
	if given {
		maxOps, err = strconv.Atoi(ops)
		if err != nil || maxOps < 1 {
			return "", "", 0, fmt.Errorf("%w: URL parameter %s=%q: want an integer ≥ 1", is.ErrInvalidArgument, ParamMaxConcurrentOps, ops)
		}
	}

	connString = base
	if len(query) > 0 {
		connString += "?" + query.Encode()
	}
	return connString, schema, maxOps, nil
}

// validateSchema accepts what can be written as an unquoted identifier, letter case aside: the name is
// always quoted, so it is used exactly as written.
func validateSchema(schema string) error {
	if schema == "" || len(schema) > 63 {
		return fmt.Errorf("%w: schema name must be 1-63 bytes, got %d", is.ErrInvalidArgument, len(schema))
	}
	for i := 0; i < len(schema); i++ {
		c := schema[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case (c >= '0' && c <= '9' || c == '$') && i > 0:
		default:
			return fmt.Errorf("%w: schema name %q: want letters, digits, '_' and '$', not starting with a digit", is.ErrInvalidArgument, schema)
		}
	}
	return nil
}
