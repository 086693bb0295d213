package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/config.md from Markdown()")

const docsPath = "../docs/config.md"

// docs/config.md is generated: `go generate ./config/` (go test -run TestDocsMatchMarkdown -update)
// rewrites it, and this test fails in CI when the checked-in copy drifts from the key table.
func TestDocsMatchMarkdown(t *testing.T) {
	want := Markdown()
	if *update {
		if err := os.WriteFile(docsPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatalf("%v: generate it with go generate ./config/", err)
	}
	if string(got) != want {
		t.Fatalf("docs/config.md is out of date with the key table in config/keys.go: run go generate ./config/")
	}
}

func TestMarkdown_HasARowForEveryKey(t *testing.T) {
	md := Markdown()
	for _, s := range specs {
		row := "| `" + s.name + "` | " + s.kind.name()
		if !strings.Contains(md, row) || !strings.Contains(md, "`"+s.env+"`") {
			t.Errorf("the reference has no row for %s with its variable %s", s.key, s.env)
		}
	}
	for _, sec := range sections {
		if !strings.Contains(md, "\n## ["+sec.name+"]\n") {
			t.Errorf("the reference has no heading for [%s]", sec.name)
		}
	}
}
