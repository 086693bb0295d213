//go:build !linux

package multisqlite

// fileStamp is a file's identity for the schema-check cache (pool.go). Outside Linux (statx) no birth
// time is read, so nothing is cached: every open checks its file's schema.
type fileStamp struct{}

func stampOf(string) (fileStamp, bool) { return fileStamp{}, false }
