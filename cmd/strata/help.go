package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/stratalog/strata/internal/version"
)

// command is one of strata's commands as `strata help CMD` and `CMD -h` show it.
type command struct {
	synopsis string // the command line, flags and arguments
	about    string // what it does, and its exit codes
	args     string // its positional arguments, "" if none
}

var commands = map[string]command{
	"run": {synopsis: "strata run [--config FILE]",
		about: "Serve the HTTP API (probes, /metrics, the executor's feed, /v1/status) and run the sweep and the " +
			"scheduler beside an executor, until SIGINT or SIGTERM; then drain and exit 0."},
	"sweep": {synopsis: "strata sweep --once [--json] [--config FILE] [--gap D] [--max-ticks N] [--shards S --shard-count N]",
		about: "One full sweep (two passes, --gap apart), then exit. Exits 1 if an archive failed, a key was " +
			"unreadable, storage failed or the sweep did not complete in --max-ticks ticks."},
	"scan": {synopsis: "strata scan [--config FILE] [--json] [--mode M] [--layer L] [--limit N]",
		about: "List the agents a layer holds, with their last index. Read-only: creates no database, file or " +
			"schema, and fails on a missing one. Exits 1 after the list if any could not be read."},
	"inspect": {synopsis: "strata inspect [--config FILE] [--json] [--mode M] AGENT",
		about: "Each layer's first and last index and entry count for AGENT. Read-only, as scan is.",
		args:  "AGENT  the agent, component:name"},
	"demo": {synopsis: "strata demo [--dir DIR] [--blob URL] [--invocations N] [--lose P] [--seed N]",
		about: "An executor losing teardown drains, the sweep, a verification, on embedded SQLite."},
	"config": {synopsis: "strata config defaults | strata config check FILE | strata config print [--config FILE]",
		about: "defaults: print the default configuration file, every key commented. check: validate FILE with the " +
			"STRATA_* variables over it, as strata run would; exit 1 with the error. print: the configuration in " +
			"effect after the defaults, the file and the variables, secrets redacted.",
		args: "FILE  a TOML configuration file (config check)"},
	"bench": {synopsis: "strata bench chaos [--quick] [--postgres URL] [--plot FILE] [--latency D] [--seed N] [--scenarios A|B|AB]",
		about: "Latency injected on PostgreSQL through a proxy: the sweep against registration on the commit " +
			"path; exits non-zero if any entry was lost or doubled."},
	"version": {synopsis: "strata version [--json]",
		about: "The build: module version, commit (and whether the tree was modified) and Go version."},
	"help": {synopsis: "strata help [CMD]", about: "This overview, or CMD's synopsis, arguments and flags.",
		args: "CMD  a command"},
}

// commandNames lists the commands, sorted.
func commandNames() []string {
	var names []string
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// printCommandHelp writes name's synopsis, description, arguments and, when fs is not nil, flags.
func printCommandHelp(w io.Writer, name string, fs *flag.FlagSet) {
	c := commands[name]
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.synopsis, c.about)
	if c.args != "" {
		fmt.Fprintf(w, "\nArguments:\n  %s\n", c.args)
	}
	if fs != nil {
		has := false
		fs.VisitAll(func(*flag.Flag) { has = true })
		if has {
			fmt.Fprint(w, "\nFlags:\n")
			out := fs.Output()
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(out)
		}
	}
}

// withHelp makes fs's -h print the command's help.
func withHelp(fs *flag.FlagSet, name string) *flag.FlagSet {
	fs.Usage = func() { printCommandHelp(fs.Output(), name, fs) }
	return fs
}

// wantsHelp reports whether args asks for help (-h, -help, --help) before any other argument.
func wantsHelp(args []string) bool {
	return len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help")
}

// cmdHelp is `strata help [CMD]`: the overview, or one command's help on stdout.
func cmdHelp(args []string, stdout, stderr io.Writer) error {
	switch len(args) {
	case 0:
		_, err := io.WriteString(stdout, usage)
		return err
	case 1:
		if args[0] == "help" || wantsHelp(args) {
			printCommandHelp(stdout, "help", nil)
			return nil
		}
		if _, ok := commands[args[0]]; !ok {
			return &usageError{fmt.Sprintf("no command %q; the commands are %s", args[0], strings.Join(commandNames(), ", "))}
		}
		// The command prints its own help, flags included, for -h: ask it, onto stdout.
		if code := run([]string{args[0], "-h"}, stdout, stdout); code != 0 {
			return fmt.Errorf("help %s: exit %d", args[0], code)
		}
		return nil
	}
	return &usageError{"usage: " + commands["help"].synopsis}
}

// cmdVersion is `strata version [--json]`.
func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := withHelp(flag.NewFlagSet("version", flag.ContinueOnError), "version")
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the build as a JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &usageError{"version takes no arguments"}
	}
	info := version.Get()
	if !*asJSON {
		_, err := fmt.Fprintln(stdout, info.String())
		return err
	}
	raw, err := json.Marshal(map[string]any{"version": info.Version, "commit": info.Commit,
		"modified": info.Modified, "go_version": info.GoVersion})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, string(raw))
	return err
}
