// Package baseline holds the benchmarks' independent archivers: the least an archiver of one
// namespace can do on each engine, written against the engine's own client (PostgreSQL through pgx,
// SQLite and multi-file SQLite through database/sql and mattn/go-sqlite3, Redis through go-redis), and
// reading what strata's backends wrote from the layout docs/storage-format.md, docs/redis.md and
// docs/multisqlite.md describe. They exist to measure strata's sweep against, so they share no code
// with strata: this package imports nothing of the module it lives in (not indexedstorage, no backend,
// not archive), only the engines' clients; TestImportsNothingOfStrata holds that. The one interface
// they take, Blobs, is the Put of archive.BlobStore, declared here.
//
// Two shapes per engine:
//
//   - per agent (PerAgent): one keyset page of keys with their last ids, then per agent, Workers at
//     once: read its rows up to that id, put each row to a blob as it is, one bounded delete (id ≤ the
//     last id read) that takes the same per-index lock strata's own writers take, so it is safe beside
//     them. No quiet gate, no residency, no re-check, no comparison with what is below: it would
//     archive a live agent. This is the "minimal archiver that talks to the engine directly".
//   - batched (Batched): a page of agents a step: one statement (one pipeline on Redis, one
//     transaction on SQLite) reads the page's first rows and last ids, the blobs are put Workers at
//     once, and one statement drops them, each index's lock taken in key order and each delete bounded
//     by the id read for that key. The limit a batched sweep approaches.
//
// Each archiver counts what it sends (Counts.RoundTrips) and the transactions it commits where the
// engine has them (Counts.Commits: SQLite's commit hook). The engine's own counters, which count
// strata's calls and these alike, are read by PGCommits and RedisCommandStats.
//
// A blob is put at BlobPath(stored key, row id) with the row's stored value (the chunk) as it is: a
// baseline neither decodes nor re-encodes a chunk.
package baseline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
)

// Blobs is where an archiver puts what it reads: archive.BlobStore's Put (any BlobStore satisfies it).
type Blobs interface {
	Put(ctx context.Context, path string, data []byte) error
}

// Counts is what an archiver counted itself.
type Counts struct {
	// RoundTrips: requests to the engine, each awaited before the next of its worker (a statement or a
	// pgx batch on PostgreSQL, a command or a pipeline on Redis, a statement on SQLite, whose "round
	// trip" is a call into the library).
	RoundTrips atomic.Int64
	// Commits: write transactions committed, where the archiver can count them itself (SQLite's commit
	// hook, on every connection the archiver opened). Zero on PostgreSQL and Redis: read those from the
	// engine (PGCommits, RedisCommandStats).
	Commits atomic.Int64
	// Agents archived (indexes emptied and gone).
	Agents atomic.Int64
}

func (c *Counts) rt(n int) {
	if c != nil {
		c.RoundTrips.Add(int64(n))
	}
}

func (c *Counts) agents(n int) {
	if c != nil {
		c.Agents.Add(int64(n))
	}
}

// Defaults of Options' zero values: the sweep's own (its max_concurrency and page_size).
const (
	DefaultWorkers  = 4
	DefaultPageSize = 128
)

// Options are what every archiver takes.
type Options struct {
	Blobs    Blobs
	Workers  int     // agents (blob puts) at once; 0 is DefaultWorkers
	PageSize int     // keys a page; 0 is DefaultPageSize
	Counts   *Counts // may be nil
}

func (o Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return DefaultWorkers
}

func (o Options) pageSize() int {
	if o.PageSize > 0 {
		return o.PageSize
	}
	return DefaultPageSize
}

// BlobDir is the blob prefix of a stored key's rows: "baseline/" and the key as one path segment
// (below), then "/".
func BlobDir(storedKey string) string { return "baseline/" + segment(storedKey) + "/" }

// BlobPath is where an archiver puts the row id of storedKey: BlobDir and the id as 20 decimal digits.
func BlobPath(storedKey string, id uint64) string {
	return fmt.Sprintf("%s%020d", BlobDir(storedKey), id)
}

// segment makes s one blob path segment as docs/storage-format.md ("Blob layout") describes one: every
// byte but A–Z a–z 0–9 _ - written %XX, and an escaped form over 255 bytes cut at 190 (back to the %
// of an escape it would split), then "." and the SHA-256 of s.
func segment(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	esc := b.String()
	if len(esc) <= 255 {
		return esc
	}
	cut := 190
	if i := strings.LastIndexByte(esc[:cut], '%'); i > cut-3 {
		cut = i
	}
	sum := sha256.Sum256([]byte(s))
	return esc[:cut] + "." + hex.EncodeToString(sum[:])
}
