package testenv

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

type closeBuffer struct{ *bytes.Buffer }

func (closeBuffer) Close() error { return nil }

// A skip is announced on the terminal once per run and kind, however many tests and packages skip.
func TestAnnounceSkip_OncePerRunAndKind(t *testing.T) {
	var out bytes.Buffer
	orig := openTerminal
	openTerminal = func() (io.WriteCloser, error) { return closeBuffer{&out}, nil }
	t.Cleanup(func() { openTerminal = orig })
	kind := UniqueName("KIND_")
	marker, ok := runMarker(kind)
	if !ok {
		t.Fatal("no run marker: /proc is needed to tell one go test run from another")
	}
	t.Cleanup(func() { os.Remove(marker) })

	for range 3 {
		announceSkip(kind, "tests that need "+kind+" are skipped")
	}
	announceSkip(kind+"_OTHER", "another kind")
	defer func() {
		if m, ok := runMarker(kind + "_OTHER"); ok {
			os.Remove(m)
		}
	}()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != "strata: tests that need "+kind+" are skipped" || lines[1] != "strata: another kind" {
		t.Fatalf("announced:\n%s\nwant one line per kind", out.String())
	}
}
