//go:build !unix

package sweeps_test

import "io/fs"

// allocatedBytes is the disk a file takes; without st_blocks, its size.
func allocatedBytes(info fs.FileInfo) int64 { return info.Size() }
