package main

import (
	"cmp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// everyCommand lists the command tree's commands below the root, subcommands included, as cobra
// builds it for a run.
func everyCommand() []*cobra.Command {
	root := (&app{out: &errorSink{}}).rootCommand()
	root.InitDefaultHelpCmd()
	var out []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			out = append(out, sub)
			walk(sub)
		}
	}
	walk(root)
	return out
}

// Every command has its help, the same through `strata help CMD` and `CMD -h`, on stdout, exit 0:
// what it does, its usage line, its arguments where it takes some, and its flags.
func TestHelp_EveryCommandHasItsHelp(t *testing.T) {
	for _, c := range everyCommand() {
		path := strings.Fields(strings.TrimPrefix(c.CommandPath(), "strata "))
		code, out, errOut := runIn(append([]string{"help"}, path...)...)
		if code != 0 || errOut != "" || !strings.Contains(out, "Usage:\n  "+c.UseLine()) || !strings.Contains(out, strings.TrimSpace(cmp.Or(c.Long, c.Short))) {
			t.Errorf("help %s: exit %d\n%s%s", c.CommandPath(), code, out, errOut)
		}
		if c.Long == "" && c.Short == "" {
			t.Errorf("%s has no description", c.CommandPath())
		}
		if strings.Contains(c.Use, "AGENT") || strings.Contains(c.Use, "FILE") {
			if !strings.Contains(out, "Arguments:\n  ") {
				t.Errorf("help %s lacks its arguments:\n%s", c.CommandPath(), out)
			}
		}
		if c.Name() == "help" {
			continue
		}
		code, dashH, errOut := runIn(append(path, "-h")...)
		if code != 0 || errOut != "" || dashH != out {
			t.Errorf("%s -h: exit %d, not what help shows\n%s%s", c.CommandPath(), code, dashH, errOut)
		}
	}
	for _, name := range []string{"run", "sweep", "scan", "inspect", "demo", "version"} {
		if _, out, _ := runIn("help", name); !strings.Contains(out, "Flags:\n") || !strings.Contains(out, "--config") && name != "demo" && name != "version" {
			t.Errorf("help %s lists no flags:\n%s", name, out)
		}
	}
	if _, out, _ := runIn("help", "scan"); !strings.Contains(out, "--json") || !strings.Contains(out, "--limit") || !strings.Contains(out, "JSON Lines") {
		t.Errorf("help scan:\n%s", out)
	}
	if code, out, _ := runIn("help"); code != 0 || !strings.Contains(out, "  version ") || !strings.Contains(out, "  migrate ") || !strings.Contains(out, "Exit codes") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
	if _, out, _ := runIn("help", "config", "print"); !strings.Contains(out, "strata config print [flags]") || !strings.Contains(out, "--storage-url") {
		t.Errorf("help config print:\n%s", out)
	}
}

// sweep -h renders its usage line as written (the hand-rolled CLI showed "-once strata run").
func TestHelp_SweepShowsItsUsageLine(t *testing.T) {
	_, out, _ := runIn("sweep", "-h")
	if !strings.Contains(out, "Usage:\n  strata sweep --once [flags]\n") || strings.Contains(out, "-once strata run") ||
		!strings.Contains(out, "      --once ") || !strings.Contains(out, "JSON Lines") {
		t.Fatalf("sweep -h:\n%s", out)
	}
}
