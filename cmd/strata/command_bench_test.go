package main

import (
	"strings"
	"testing"
)

func TestBench_AnUnknownScenarioIsAUsageError(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"bench", "chaos", "--scenarios", "C"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `--scenarios "C": want A, B or AB`) {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}
