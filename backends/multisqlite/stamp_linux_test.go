package multisqlite

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// On a file system that keeps nanoseconds (ext4, tmpfs), a file is stamped once StampSettleFine has
// passed since the later change of it and its -wal, and not a moment before: a file written just before
// a sighting is stamped by the next walk, not a second later.
func TestStamps_AFileOfFineTimesSettlesInStampSettleFine(t *testing.T) {
	st := open(t, t.TempDir(), Options{})
	key := agentKey("a")
	if err := st.Append(t.Context(), testNS, key, 1, []byte("one")); err != nil {
		t.Fatal(err)
	}
	path := st.filePath(testNS, key)
	var changed time.Time
	for _, p := range []string{path, path + "-wal"} {
		var fi unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_CTIME, &fi); err != nil {
			t.Fatal(err)
		}
		if fi.Ctime.Nsec == 0 {
			t.Skipf("%s has a ctime of whole seconds: this file system may keep no finer times", p)
		}
		if c := time.Unix(fi.Ctime.Sec, int64(fi.Ctime.Nsec)); c.After(changed) {
			changed = c
		}
	}
	st.hooks.now = func() time.Time { return changed.Add(StampSettleFine - time.Nanosecond) }
	if s := stampsOf(t, st)[key]; s != "" {
		t.Fatalf("stamped %q a moment before StampSettleFine had passed", s)
	}
	st.hooks.now = func() time.Time { return changed.Add(StampSettleFine) }
	if s := stampsOf(t, st)[key]; s == "" {
		t.Fatal("not stamped once StampSettleFine had passed")
	}
}
