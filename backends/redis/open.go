package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// PrefixParam is the query parameter of an Open URL that sets the Store's key prefix.
const PrefixParam = "prefix"

// Open connects to the Redis server a URL names and returns a Store that owns the connection:
//
//	redis://[user:password@]host:port[/db][?prefix=strata:&<go-redis options>]
//
// rediss:// (TLS) and unix:///path/to/socket work too. prefix (percent-encoded, at most once, not
// empty, printable UTF-8) starts every Redis key of the Store; the other query parameters are
// go-redis's (pool_size, dial_timeout, ...; see goredis.ParseURL). The client honours ctx deadlines
// (ContextTimeoutEnabled). Open pings the server: a malformed URL is ErrInvalidArgument, a server that
// does not answer is classified like any other failure (connection refused is ErrTransient).
func Open(ctx context.Context, rawURL string) (*Store, error) {
	opts, prefix, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled = true
	client := goredis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis open %s: %w", redact(rawURL), classify(err))
	}
	s := New(client, prefix)
	s.owned = true
	return s, nil
}

// parseURL takes our prefix parameter out of the URL, since goredis.ParseURL rejects options it does
// not know, and hands the rest to go-redis.
func parseURL(rawURL string) (*goredis.Options, string, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("redis open %s: %w: %s", redact(rawURL), is.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, password included; keep only its reason.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, "", invalid("not a URL: %v", err)
	}
	switch u.Scheme {
	case "redis", "rediss", "unix":
	default:
		return nil, "", invalid("scheme %q is not redis, rediss or unix", u.Scheme)
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, "", invalid("query: %v", err)
	}
	var prefix string
	if values, ok := query[PrefixParam]; ok {
		if len(values) != 1 {
			return nil, "", invalid("%s is given %d times", PrefixParam, len(values))
		}
		prefix = values[0]
		if err := validatePrefix(prefix); err != nil {
			return nil, "", invalid("%s %q: %v", PrefixParam, prefix, err)
		}
		delete(query, PrefixParam)
		u.RawQuery = query.Encode()
	}
	opts, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, "", invalid("%v", err)
	}
	return opts, prefix, nil
}

// validatePrefix keeps a prefix given in a URL to text that reads back the same in logs and
// redis-cli: a prefix passed to New may be any bytes.
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
