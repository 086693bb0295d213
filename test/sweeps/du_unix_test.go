//go:build unix

package sweeps_test

import (
	"io/fs"
	"syscall"
)

// allocatedBytes is the disk a file takes, as du counts it: its allocated blocks.
func allocatedBytes(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
