//go:build !linux

package multisqlite

import "time"

// fileStamp is a file's identity for the schema-check cache (pool.go). Outside Linux (statx) no birth
// time is read, so nothing is cached: every open checks its file's schema.
type fileStamp struct{}

func stampOf(string) (fileStamp, bool) { return fileStamp{}, false }

// changeStamp vouches for nothing outside Linux (no birth time to tell a re-created file): the sweep
// reads each index it sights.
func changeStamp(string, time.Time) string { return "" }
