package deploy_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// TestDockerfile_ParsesAndLints parses the Dockerfile with BuildKit's own parser and runs the linter
// rules its instruction parser applies (the checks of `docker build --check` that need no image): no
// container engine runs where this was written, so this is as close to a build as CI gets.
func TestDockerfile_ParsesAndLints(t *testing.T) {
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	res, err := parser.Parse(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile line %d: %s", w.Location.Start.Line, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		t.Errorf("Dockerfile lint %s: %s", rule, msg)
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 {
		t.Errorf("%d stages, want 2 (build, runtime)", len(stages))
	}
}
