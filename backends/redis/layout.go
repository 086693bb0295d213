package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// ErrOldLayout is what CheckLayout (and so Open) returns for a prefix that holds keys of strata's
// previous Redis layout, one key per index (P + ns + ":" + key) and no index sets: this version's walk
// reads the index sets only and would never see them. It also matches is.ErrInvalidArgument.
var ErrOldLayout = errors.New("the prefix holds keys of strata's previous Redis layout")

// layoutProbeCount is the COUNT of the SCAN that looks for keys of the previous layout.
const layoutProbeCount = 1000

// CheckLayout makes sure the prefix is in this layout. A prefix that carries the marker key
// P{strata}layout = "2" is, at the cost of one GET. A prefix without it is looked over once, by a SCAN
// of the keys under it (on a cluster, of every master): if it holds a sorted set named like an index
// of the previous layout (P + namespace + ":" + key), CheckLayout returns ErrOldLayout naming it and
// writes nothing; otherwise it writes the marker (SET NX), so the next Open costs the GET only. That
// one SCAN costs in proportion to the database (a few hundred round trips for a million keys), once
// per prefix.
//
// To move on from the previous layout, drain the prefix with the version that wrote it (every agent
// archived, the layers empty) and delete what is left, or give this version a new prefix.
//
// A Store from OpenExisting checks the same way but never writes the marker: it pays the SCAN at
// every open of an unmarked prefix instead, and reads what is there.
func (s *Store) CheckLayout(ctx context.Context) error {
	return s.checkLayout(ctx, !s.readOnly)
}

// checkLayout is CheckLayout; mark says whether it may write the marker on a prefix it found in this
// layout.
func (s *Store) checkLayout(ctx context.Context, mark bool) error {
	if s.closed.Load() {
		return is.ErrClosed
	}
	marker := s.prefix + layoutKey
	got, err := s.client.Get(ctx, marker).Result()
	switch {
	case err == nil && got == layoutVersion:
		return nil
	case err == nil:
		return fmt.Errorf("%w: %q holds layout %q, this version knows layout %s only (a newer strata wrote it?)", is.ErrInvalidArgument, marker, got, layoutVersion)
	case !errors.Is(err, goredis.Nil):
		return fmt.Errorf("read layout marker %q: %w", marker, classify(err))
	}
	old, err := s.findOldLayoutKey(ctx)
	if err != nil {
		return fmt.Errorf("look for keys of the previous layout under %q: %w", s.prefix, classify(err))
	}
	if old != "" {
		return fmt.Errorf("%w: %w: %q is an index of the layout before index sets, which this version cannot see; "+
			"drain the prefix with the version that wrote it, or give this one a new prefix (docs/redis.md, \"The previous layout\")",
			is.ErrInvalidArgument, ErrOldLayout, old)
	}
	if !mark {
		return nil
	}
	if err := s.client.SetNX(ctx, marker, layoutVersion, 0).Err(); err != nil {
		return fmt.Errorf("write layout marker %q: %w", marker, classify(err))
	}
	return nil
}

// findOldLayoutKey returns a key of the previous layout under the prefix, or "" if there is none.
func (s *Store) findOldLayoutKey(ctx context.Context) (string, error) {
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		// ForEachMaster asks the masters concurrently; any one answer will do.
		var mu sync.Mutex
		var found string
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
			k, err := s.findOn(ctx, node)
			mu.Lock()
			defer mu.Unlock()
			if k != "" {
				found = k
			}
			return err
		})
		return found, err
	case *goredis.Client:
		return s.findOn(ctx, c)
	}
	return "", fmt.Errorf("%T: cannot look for keys of the previous layout with this client", s.client)
}

// findOn looks over the keys under the prefix on one node.
func (s *Store) findOn(ctx context.Context, node *goredis.Client) (string, error) {
	iter := node.Scan(ctx, 0, escapeGlob(s.prefix)+"*", layoutProbeCount).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if !strings.HasPrefix(k, s.prefix) || !looksOld(k[len(s.prefix):]) {
			continue
		}
		typ, err := node.Type(ctx, k).Result()
		if err != nil {
			return "", err
		}
		if typ == "zset" {
			return k, nil
		}
	}
	return "", iter.Err()
}

// looksOld reports whether what follows the prefix in a Redis key is named like an index of the
// previous layout: a namespace, ':' and a key. This layout's keys start with '{'; a key of another
// Store whose prefix merely starts with this one (which the package doc forbids, but tests make
// prefixes like that by the dozen) holds this layout's "{ns|T}:" and is left alone.
func looksOld(rest string) bool {
	if rest == "" || rest[0] == '{' {
		return false
	}
	ns, _, ok := strings.Cut(rest, ":")
	if !ok || is.ValidateNamespace(ns) != nil {
		return false
	}
	if i := strings.IndexByte(rest, '{'); i >= 0 {
		if tag, _, ok := strings.Cut(rest[i+1:], "}"); ok {
			if tns, _, ok := strings.Cut(tag, "|"); ok && is.ValidateNamespace(tns) == nil {
				return false
			}
		}
	}
	return true
}
