package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestBinary_DemoRunsTwiceOnOneDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fresh")
	for run := 1; run <= 2; run++ {
		code, out, errOut := runBinary(t, nil, "demo", "--dir", dir, "--invocations", "60")
		if code != 0 || !strings.Contains(out, "verified: 60/60 invocations read back exactly once") {
			t.Fatalf("demo run %d: exit %d\n%s\n%s", run, code, out, errOut)
		}
	}
}
