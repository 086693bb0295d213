package multisqlite

import (
	"errors"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

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

// changeStampFields are what a change stamp (changeStamp) reads of a file.
const changeStampFields = unix.STATX_INO | unix.STATX_BTIME | unix.STATX_SIZE | unix.STATX_MTIME | unix.STATX_CTIME

// changeStamp is the page's stamp (is.Page.Stamps) of the index file at path: its identity (device,
// inode, birth time), size, mtime and ctime, and the same of its -wal (or that it has none), or "" when
// it cannot vouch for the file: a field cannot be read, or either file changed less than its settle
// (stampSettle: 1 s on a file system of whole seconds, 100 ms on one of finer times) before now.
//
// Why it is sound. A commit appends to the -wal (or, a foreign writer's rollback journal, writes the
// file itself), and a checkpoint writes the file and truncates or rewrites the -wal: every change goes
// through a write or truncate of one of the two, which sets that file's ctime to the kernel's coarse
// clock. That clock moves in ticks (a few milliseconds), so a write within the tick of the file's last
// change can leave ctime as it was, and a -wal rewritten from its start after a checkpoint keeps its
// size: so a stamp is given only for files whose last change is older than many such ticks (on a file
// system of whole seconds, than one second), and any later write moves ctime. A file removed and
// created again (the removal protocol, lock.go) is born later: its birth time differs even where its
// inode is reused. What remains is a wall clock stepped back by more than the settle between two
// sightings, onto the same tick; the sweep that compares stamps only delays or hastens an archive it
// would make anyway, and an archive never depends on the gate for its safety.
func changeStamp(path string, now time.Time) string {
	b := make([]byte, 0, 160)
	b, ok := appendFileStamp(b, path, now, false)
	if !ok {
		return ""
	}
	b = append(b, '|')
	b, ok = appendFileStamp(b, path+"-wal", now, true)
	if !ok {
		return ""
	}
	return string(b)
}

// appendFileStamp appends the stamp of one file to b; a missing file appends "-" when mayLack is set.
func appendFileStamp(b []byte, path string, now time.Time, mayLack bool) ([]byte, bool) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_SYNC_AS_STAT, changeStampFields, &st); err != nil {
		if mayLack && errors.Is(err, unix.ENOENT) {
			return append(b, '-'), true
		}
		return b, false
	}
	if st.Mask&changeStampFields != changeStampFields {
		return b, false
	}
	changed := time.Unix(st.Ctime.Sec, int64(st.Ctime.Nsec))
	if now.Sub(changed) < stampSettle(st.Ctime.Nsec) {
		return b, false
	}
	for _, n := range []uint64{uint64(st.Dev_major), uint64(st.Dev_minor), st.Ino,
		uint64(st.Btime.Sec), uint64(st.Btime.Nsec), st.Size,
		uint64(st.Mtime.Sec), uint64(st.Mtime.Nsec), uint64(st.Ctime.Sec), uint64(st.Ctime.Nsec)} {
		b = strconv.AppendUint(b, n, 36)
		b = append(b, '.')
	}
	return b, true
}
