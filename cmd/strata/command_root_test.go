package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stratalog/strata/internal/version"
)

// Every usage error exits 2 with exactly one message, one line on stderr naming the command, and
// nothing on stdout: an unknown command or flag, a bad flag value, a wrong number of arguments, a value
// out of range. (The hand-rolled CLI reported an unknown flag twice, once from the flag package and
// once as the exit error.)
func TestUsageErrors_ExitTwoWithOneMessage(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"nosuch"}, `strata: unknown command "nosuch"; the commands are bench,`},
		{[]string{"swep"}, `(did you mean sweep?)`},
		{[]string{"--bogus"}, "strata: unknown flag: --bogus"},
		{[]string{"-x"}, "unknown shorthand flag: 'x' in -x"},
		{[]string{"help", "nosuch"}, `unknown command "nosuch"`},
		{[]string{"help", "a", "b"}, `unknown command "a b"`},
		{[]string{"version", "extra"}, `version takes no arguments (got "extra")`},
		{[]string{"version", "--bogus"}, "strata version: unknown flag: --bogus"},
		{[]string{"version", "--json=maybe"}, `invalid argument "maybe" for "--json" flag`},
		{[]string{"config"}, "config needs a command: check, defaults, print"},
		{[]string{"config", "bogus"}, `unknown config command "bogus"`},
		{[]string{"config", "check"}, "want one FILE, got 0 arguments"},
		{[]string{"config", "check", "a", "b"}, "want one FILE, got 2 arguments"},
		{[]string{"config", "defaults", "x"}, `config defaults takes no arguments (got "x")`},
		{[]string{"config", "print", "extra"}, "config print takes no arguments"},
		{[]string{"config", "print", "--bogus"}, "strata config print: unknown flag: --bogus"},
		{[]string{"config", "print", "--storage-url", "ftp://x"}, `--storage-url: "ftp://x" is not allowed: want a URL of the form`},
		{[]string{"config", "print", "--schedule-url", "redis://h:6379/0"}, `--schedule-url: "redis://h:6379/0" is not allowed`},
		{[]string{"inspect"}, "want one AGENT (component:name), got 0 arguments"},
		{[]string{"inspect", "a:b", "c:d"}, "got 2 arguments"},
		{[]string{"inspect", "no-colon"}, "no-colon"},
		{[]string{"inspect", "--mode", "x", "a:b"}, `"x"`},
		{[]string{"inspect", "a:b", "--blob-url", ""}, `--blob-url: "" is not allowed`},
		{[]string{"scan", "extra"}, "scan takes no arguments"},
		{[]string{"scan", "--mode", "x"}, `"x"`},
		{[]string{"scan", "--limit", "-1"}, "--limit -1: want 0 (all) or more"},
		{[]string{"scan", "--limit", "many"}, `invalid argument "many" for "--limit" flag`},
		{[]string{"scan", "--storage-url", "nosuch://x"}, `--storage-url: "nosuch://x" is not allowed`},
		{[]string{"scan", "--schedule-url", "sqlite:x.db"}, "unknown flag: --schedule-url"},
		{[]string{"sweep"}, "only --once is supported here"},
		{[]string{"sweep", "--bogus"}, "strata sweep: unknown flag: --bogus"},
		{[]string{"sweep", "--once", "extra"}, "sweep takes no arguments"},
		{[]string{"sweep", "--once", "--gap", "x"}, `invalid argument "x" for "--gap" flag`},
		{[]string{"sweep", "--once", "--gap", "-1s"}, "--gap -1s: want a duration from 0 to 24h"},
		{[]string{"sweep", "--once", "--gap", "25h"}, "--gap 25h0m0s: want a duration from 0 to 24h"},
		{[]string{"sweep", "--once", "--shards", "5", "--shard-count", "2"}, "shard 5 is outside 0..1"},
		{[]string{"sweep", "--once", "--shard-count", "x"}, `invalid argument "x" for "--shard-count" flag`},
		{[]string{"sweep", "--once", "--max-ticks", "0"}, "--max-ticks 0: want 1 to 1000000"},
		{[]string{"run", "--bogus"}, "strata run: unknown flag: --bogus"},
		{[]string{"run", "extra"}, "run takes no arguments"},
		{[]string{"run", "--storage-url", ""}, `--storage-url: "" is not allowed`},
		{[]string{"run", "--config"}, "flag needs an argument: --config"},
		{[]string{"demo", "--lose", "2"}, "--lose must be within 0..1"},
		{[]string{"demo", "extra"}, "demo takes no arguments"},
		{[]string{"bench"}, "bench needs a command: chaos"},
		{[]string{"bench", "nosuch"}, `unknown bench command "nosuch"`},
		{[]string{"bench", "chaos", "--scenarios", "C"}, `--scenarios "C": want A, B or AB`},
		{[]string{"migrate"}, "migrate needs a command: blobs, status, up"},
		{[]string{"migrate", "bogus"}, `unknown migrate command "bogus"`},
		{[]string{"migrate", "status", "extra"}, "migrate status takes no arguments"},
		{[]string{"migrate", "status", "--blob-url", "fs:x"}, "unknown flag: --blob-url"},
		{[]string{"migrate", "up", "--dry-run=x"}, `invalid argument "x" for "--dry-run" flag`},
		{[]string{"migrate", "up", "--storage-url", "mem://"}, `--storage-url: "mem://" is not allowed`},
		{[]string{"completion"}, "completion needs a command: bash, fish, powershell, zsh"},
		{[]string{"completion", "tcsh"}, `unknown completion command "tcsh"`},
		{[]string{"completion", "bash", "extra"}, "completion bash takes no arguments"},
	} {
		code, out, errOut := runIn(c.args...)
		line := strings.TrimSuffix(errOut, "\n")
		if code != 2 || out != "" || line == "" || strings.Contains(line, "\n") || !strings.HasPrefix(line, "strata") ||
			!strings.Contains(line, c.says) {
			t.Errorf("strata %s: exit %d, stdout %q, stderr %q; want exit 2 and one line saying %q",
				strings.Join(c.args, " "), code, out, errOut, c.says)
		}
	}
}

// strata alone shows the overview on stderr and is a usage error.
func TestUsageErrors_NoCommandShowsTheOverviewAndExitsTwo(t *testing.T) {
	code, out, errOut := runIn()
	if code != 2 || out != "" || !strings.Contains(errOut, "Available Commands:") || !strings.Contains(errOut, "Exit codes") {
		t.Fatalf("strata: exit %d\n%s%s", code, out, errOut)
	}
}

// A command that fails at run time exits 1, with one message naming the command.
func TestRuntimeErrorsExitOne(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.toml")
	for _, c := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"config", "check", missing}, "strata config check: config: open " + missing},
		{[]string{"config", "print", "--config", missing}, "strata config print: config: open " + missing},
		{[]string{"scan", "--config", missing}, "strata scan: config: open " + missing},
		{[]string{"scan", "--storage-url", "sqlite:"}, "strata scan: storage.url"},
	} {
		code, _, errOut := runIn(c.args...)
		if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, c.prefix) {
			t.Errorf("strata %s: exit %d, %q; want exit 1 with one message starting %q", strings.Join(c.args, " "), code, errOut, c.prefix)
		}
	}
}

// strata --version prints what strata version prints.
func TestVersionFlag_PrintsTheBuild(t *testing.T) {
	code, out, errOut := runIn("--version")
	if code != 0 || errOut != "" || strings.TrimSpace(out) != version.Get().String() {
		t.Fatalf("--version: exit %d %q %q; want %q", code, out, errOut, version.Get().String())
	}
}

// Flags go anywhere on the line: after the argument, between subcommand and argument, before the
// subcommand's own flags. (The hand-rolled CLI ignored flags after an argument: inspect AGENT --config
// FILE exited 2 with a wrong message.)
func TestFlags_GoAnywhereOnTheLine(t *testing.T) {
	d := newDeployment(t, "", "")
	agents := strandAgents(t, d.stack(t), 1, 7)
	row := regexp.MustCompile(`compressed-1\s+1\s+7\s+7`)
	for _, args := range [][]string{
		{"inspect", agents[0].Key(), "--config", d.config},
		{"inspect", "--config", d.config, agents[0].Key()},
		{"inspect", agents[0].Key(), "--mode", "ephemeral", "--config=" + d.config},
	} {
		if code, out, errOut := runIn(args...); code != 0 || !row.MatchString(out) {
			t.Errorf("strata %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, out, errOut := runIn("config", "print", "--config", d.config); code != 0 || !strings.Contains(out, d.dir) {
		t.Errorf("config print --config: exit %d\n%s%s", code, out, errOut)
	}
}

// completion writes each shell's script, and the script's helper completes commands and flag values.
func TestCompletion_EveryShellAndTheFlagValues(t *testing.T) {
	for shell, marker := range map[string]string{"bash": "bash completion V2 for strata", "zsh": "#compdef strata",
		"fish": "complete -c strata", "powershell": "Register-ArgumentCompleter"} {
		code, out, errOut := runIn("completion", shell)
		if code != 0 || errOut != "" || !strings.Contains(out, marker) {
			t.Errorf("completion %s: exit %d, %d bytes, %q", shell, code, len(out), errOut)
		}
	}
	for args, want := range map[string][]string{
		"__complete\x00swe":                               {"sweep"},
		"__complete\x00migrate\x00":                       {"status", "up"},
		"__complete\x00scan\x00--mode\x00":                {"ephemeral", "durable"},
		"__complete\x00bench\x00chaos\x00--scenarios\x00": {"A", "B", "AB"},
		"__complete\x00sweep\x00--st":                     {"--storage-url"},
		"__complete\x00help\x00mig":                       {"migrate"},
	} {
		code, out, _ := runIn(strings.Split(args, "\x00")...)
		for _, w := range want {
			if code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(w)+`(\t|$)`).MatchString(out) {
				t.Errorf("%q: exit %d, want %q offered\n%s", strings.ReplaceAll(args, "\x00", " "), code, w, out)
			}
		}
	}
}

// --storage-url and --blob-url (and --schedule-url) win over the variables, which win over the file.
func TestURLFlags_OverrideTheVariablesAndTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(path, []byte("[storage]\nurl = \"sqlite:file.db\"\n[blob]\nurl = \"fs:file-blobs\"\n[schedule]\nurl = \"sqlite:file.db\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRATA_STORAGE_URL", "sqlite:env.db")
	t.Setenv("STRATA_SCHEDULE_URL", "sqlite:env-schedule.db")
	code, out, errOut := runIn("config", "print", "--config", path, "--storage-url", "sqlite:flag.db", "--blob-url=fs:flag-blobs")
	if code != 0 {
		t.Fatalf("config print: exit %d %s", code, errOut)
	}
	for _, want := range []string{`url = "sqlite:flag.db"`, `url = "fs:flag-blobs"`, `url = "sqlite:env-schedule.db"`} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %s:\n%s", want, out)
		}
	}
	// A command that opens the stores opens the flags' stores: scan reads the agents there, with no file.
	d := newDeployment(t, "", "")
	agents := strandAgents(t, d.stack(t), 2, 3)
	t.Setenv("STRATA_STORAGE_URL", "sqlite://"+filepath.Join(dir, "elsewhere.db"))
	code, out, errOut = runIn("scan", "--storage-url", "sqlite://"+filepath.Join(d.dir, "strata.db"), "--blob-url", "fs://"+filepath.Join(d.dir, "blobs"))
	if code != 0 || !strings.Contains(out, agents[0].Key()) || !strings.Contains(out, agents[1].Key()) {
		t.Fatalf("scan with URL flags: exit %d\n%s%s", code, out, errOut)
	}
}
