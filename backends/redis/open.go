package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// PrefixParam is the query parameter of an Open URL that sets the Store's key prefix.
const PrefixParam = "prefix"

// WaitReplicasParam and WaitTimeoutParam are the query parameters of an Open URL that make each write
// wait for replicas (WaitOptions): wait_replicas=1&wait_timeout=500ms. wait_timeout is a Go duration
// (a bare number is milliseconds) and defaults to DefaultWaitTimeout; 0 would wait forever and is
// refused.
const (
	WaitReplicasParam  = "wait_replicas"
	WaitTimeoutParam   = "wait_timeout"
	DefaultWaitTimeout = time.Second
)

// ClusterScheme is the scheme of an Open URL that names a Redis Cluster; ClusterTLSScheme the same
// over TLS.
const (
	ClusterScheme    = "redis+cluster"
	ClusterTLSScheme = "rediss+cluster"
)

// Open connects to the Redis server or Redis Cluster a URL names and returns a Store that owns the
// connection:
//
//	redis://[user:password@]host:port[/db][?prefix=strata:&wait_replicas=…&<go-redis options>]
//	redis+cluster://[user:password@]host:port[,host:port…][/][?prefix=strata:&…&<go-redis options>]
//
// rediss:// and rediss+cluster:// (TLS) and unix:///path/to/socket work too. A cluster URL lists one
// or more seed nodes, comma-separated; go-redis finds the rest (CLUSTER SLOTS), follows MOVED and ASK,
// and retries TRYAGAIN and CLUSTERDOWN. A cluster has database 0 only, so its URL takes no /db.
//
// prefix (percent-encoded, at most once, not empty, printable UTF-8 without '{' or '}') starts every
// Redis key of the Store; wait_replicas and wait_timeout make each write wait for replicas
// (WaitOptions); the other query parameters are go-redis's (pool_size, dial_timeout, ...; see
// goredis.ParseURL and goredis.ParseClusterURL). The client honours ctx deadlines
// (ContextTimeoutEnabled).
//
// Open pings the server, refuses a redis:// URL that reaches a Redis Cluster node (INFO cluster says
// cluster_enabled:1: a plain client there would fail two appends in three with MOVED and walk one
// node's keys) and checks the prefix's layout (CheckLayout). A malformed URL is ErrInvalidArgument, a
// server that does not answer is classified like any other failure (connection refused is
// ErrTransient).
func Open(ctx context.Context, rawURL string) (*Store, error) {
	return open(ctx, rawURL, false)
}

// OpenExisting is Open for a reader that must change nothing (strata scan, strata inspect): it checks
// the prefix's layout as Open does, reading the marker key but never writing it (an unmarked prefix is
// looked over for keys of the previous layout every time, and read as it is), and the Store it
// returns refuses writes with ErrInvalidArgument.
func OpenExisting(ctx context.Context, rawURL string) (*Store, error) {
	return open(ctx, rawURL, true)
}

func open(ctx context.Context, rawURL string, readOnly bool) (*Store, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	client := cfg.client()
	s, err := New(ctx, client, &Options{Prefix: cfg.prefix, Wait: cfg.wait})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.owned = true
	s.readOnly = readOnly
	if err := s.check(ctx, cfg.cluster != nil); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis open %s: %w", redact(rawURL), err)
	}
	return s, nil
}

// check is what Open asks the server before handing the Store out.
func (s *Store) check(ctx context.Context, cluster bool) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return classify(err)
	}
	if !cluster {
		info, err := s.client.Info(ctx, "cluster").Result()
		var reply goredis.Error
		switch {
		case errors.As(err, &reply):
			// A server that refuses INFO (an ACL without it, a proxy) is no cluster node this client
			// could tell; a cluster node would answer MOVED to the first write, classified transient.
			info = ""
		case err != nil:
			return classify(err)
		}
		if strings.Contains(info, "cluster_enabled:1") {
			return fmt.Errorf("%w: the server is a Redis Cluster node: a redis:// URL talks to one node, which holds a third of the slots or fewer; name the cluster with %s://host:port[,host:port…]/?prefix=…", is.ErrInvalidArgument, ClusterScheme)
		}
	}
	return s.CheckLayout(ctx)
}

// config is what an Open URL says.
type config struct {
	single  *goredis.Options
	cluster *goredis.ClusterOptions
	prefix  string
	wait    WaitOptions
}

// parseURL takes our parameters out of the URL, since go-redis rejects options it does not know, and
// hands the rest to go-redis.
func parseURL(rawURL string) (config, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("redis open %s: %w: %s", redact(rawURL), is.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	var cfg config
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, password included; keep only its reason.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return cfg, invalid("not a URL: %v", err)
	}
	cluster := false
	switch u.Scheme {
	case "redis", "rediss", "unix":
	case ClusterScheme, ClusterTLSScheme:
		cluster = true
	default:
		return cfg, invalid("scheme %q is not redis, rediss, unix, %s or %s", u.Scheme, ClusterScheme, ClusterTLSScheme)
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return cfg, invalid("query: %v", err)
	}
	params := urlParams{query: query, invalid: invalid}
	if cfg.prefix, err = params.prefix(); err != nil {
		return cfg, err
	}
	if cfg.wait, err = params.wait(); err != nil {
		return cfg, err
	}
	u.RawQuery = query.Encode()
	if !cluster {
		opts, err := goredis.ParseURL(u.String())
		if err != nil {
			return cfg, invalid("%v", err)
		}
		cfg.single = opts
		return cfg, nil
	}
	cfg.cluster, err = clusterOptions(u, query, invalid)
	return cfg, err
}

// urlParams takes strata's own parameters out of an Open URL's query, leaving go-redis's.
type urlParams struct {
	query url.Values
	// invalid words an ErrInvalidArgument about the URL, its password hidden.
	invalid func(format string, args ...any) error
}

// one removes the parameter from the query and returns its value; ok is false when it is absent, and
// a parameter given more than once is an error.
func (p urlParams) one(name string) (value string, ok bool, err error) {
	values, ok := p.query[name]
	if !ok {
		return "", false, nil
	}
	delete(p.query, name)
	if len(values) != 1 {
		return "", false, p.invalid("%s is given %d times", name, len(values))
	}
	return values[0], true, nil
}

// prefix is the PrefixParam, "" when absent.
func (p urlParams) prefix() (string, error) {
	prefix, ok, err := p.one(PrefixParam)
	if err != nil || !ok {
		return "", err
	}
	if err := validatePrefix(prefix); err != nil {
		return "", p.invalid("%s %q: %v", PrefixParam, prefix, err)
	}
	return prefix, nil
}

// wait is what WaitReplicasParam and WaitTimeoutParam say; a timeout needs replicas to wait for.
func (p urlParams) wait() (WaitOptions, error) {
	var wait WaitOptions
	if raw, ok, err := p.one(WaitReplicasParam); err != nil {
		return wait, err
	} else if ok {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			return wait, p.invalid("%s %q: want a number of replicas, 0 or more", WaitReplicasParam, raw)
		}
		wait = WaitOptions{Replicas: n, Timeout: DefaultWaitTimeout}
	}
	raw, ok, err := p.one(WaitTimeoutParam)
	if err != nil || !ok {
		return wait, err
	}
	d, err := time.ParseDuration(raw)
	if ms, nerr := strconv.Atoi(raw); nerr == nil {
		d, err = time.Duration(ms)*time.Millisecond, nil
	}
	if err != nil || d <= 0 {
		return wait, p.invalid("%s %q: want a positive duration (500ms, 2s)", WaitTimeoutParam, raw)
	}
	if wait.Replicas == 0 {
		return wait, p.invalid("%s without %s", WaitTimeoutParam, WaitReplicasParam)
	}
	wait.Timeout = d
	return wait, nil
}

// clusterOptions reads a cluster URL, whose query holds go-redis's parameters only by now. go-redis
// reads a cluster URL as redis://first-node?addr=other-node&…
func clusterOptions(u *url.URL, query url.Values, invalid func(format string, args ...any) error) (*goredis.ClusterOptions, error) {
	if u.Host == "" {
		return nil, invalid("a cluster URL names at least one node: %s://host:port[,host:port…]/", ClusterScheme)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, invalid("a cluster has database 0 only: leave the path out")
	}
	if _, ok := query["addr"]; ok {
		return nil, invalid("list the nodes in the host, comma-separated, not in addr=")
	}
	hosts := strings.Split(u.Host, ",")
	if slices.Contains(hosts, "") {
		return nil, invalid("empty node in %q", u.Host)
	}
	for _, h := range hosts[1:] {
		query.Add("addr", h)
	}
	u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
	u.Host = hosts[0]
	u.Path = ""
	u.RawQuery = query.Encode()
	opts, err := goredis.ParseClusterURL(u.String())
	if err != nil {
		return nil, invalid("%v", err)
	}
	return opts, nil
}

// validatePrefix keeps a prefix given in a URL to text that reads back the same in logs and
// redis-cli, without a brace that would move the Redis Cluster hash tag.
func validatePrefix(prefix string) error {
	switch {
	case prefix == "":
		return errors.New("is empty (leave the parameter out for no prefix)")
	case len(prefix) > is.MaxKeyLen:
		return fmt.Errorf("is %d bytes, more than %d", len(prefix), is.MaxKeyLen)
	case !utf8.ValidString(prefix):
		return errors.New("is not valid UTF-8")
	case strings.ContainsFunc(prefix, func(r rune) bool { return !unicode.IsPrint(r) }):
		return errors.New("holds a control or non-printing character")
	case strings.ContainsAny(prefix, "{}"):
		return errors.New("holds '{' or '}', which would move the keys' Redis Cluster hash tag")
	}
	return nil
}

// redact hides a password for error messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// client is a client of the node or cluster the URL named, whose calls end with their context.
func (cfg config) client() goredis.UniversalClient {
	if cfg.cluster != nil {
		cfg.cluster.ContextTimeoutEnabled = true
		return goredis.NewClusterClient(cfg.cluster)
	}
	cfg.single.ContextTimeoutEnabled = true
	return goredis.NewClient(cfg.single)
}
