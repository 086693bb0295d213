package testenv

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// announceSkip tells whoever runs `go test ./...` at a terminal, once per run and kind, which tests
// were skipped and why. go test shows a passing package as one "ok" line and swallows what its tests
// print, so a skip would otherwise hide behind "ok": the line goes to the controlling terminal, which
// the test binary shares with the go command. Without a terminal (CI, where CI=true turns a missing
// service into a failure anyway) nothing is written beyond the test's own skip message.
//
// The packages of one run are separate processes, so "once" is kept by a marker file per kind, named
// after the go command that started them (the test binary's parent) and that process's start time.
func announceSkip(kind, line string) {
	marker, ok := runMarker(kind)
	if !ok {
		return
	}
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return // another package of this run said it already (or the directory is not writable)
	}
	f.Close()
	tty, err := openTerminal()
	if err != nil {
		return
	}
	defer tty.Close()
	fmt.Fprintf(tty, "strata: %s\n", line)
}

// openTerminal opens the controlling terminal; a test replaces it.
var openTerminal = func() (io.WriteCloser, error) { return os.OpenFile("/dev/tty", os.O_WRONLY, 0) }

// runMarker is the marker file of kind for this go test run: the parent's pid and start time (field 22
// of /proc/PID/stat) name the run, so a reused pid is a new run.
func runMarker(kind string) (string, bool) {
	ppid := os.Getppid()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ppid))
	if err != nil {
		return "", false
	}
	// The command name, field 2, is in parentheses and may hold spaces: count fields after its end.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return "", false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return "", false
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("strata-test-skip-%d-%s-%s", ppid, fields[19], kind)), true
}
