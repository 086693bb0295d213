package multisqlite

import "golang.org/x/sys/unix"

// fileStamp is a file's identity for the schema-check cache (pool.go): device, inode and birth time.
type fileStamp struct {
	devMajor, devMinor uint32
	ino                uint64
	birth              unix.StatxTimestamp
}

// stampOf is the identity of the file at path; false when it cannot be read or the file system keeps
// no birth time.
func stampOf(path string) (fileStamp, bool) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_SYNC_AS_STAT, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return fileStamp{}, false
	}
	if st.Mask&unix.STATX_INO == 0 || st.Mask&unix.STATX_BTIME == 0 {
		return fileStamp{}, false
	}
	return fileStamp{devMajor: st.Dev_major, devMinor: st.Dev_minor, ino: st.Ino, birth: st.Btime}, true
}
