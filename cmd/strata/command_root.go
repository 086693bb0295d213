package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/internal/version"
)

// app is one invocation of strata: where its output goes, and where the process's own messages go.
type app struct {
	stdout, stderr io.Writer
	out            *errorSink
	// entered is set when a command's own code starts: an error returned before it (an unknown
	// command, a flag that does not parse, a wrong number of arguments) is cobra's, a usage error.
	entered bool
}

const rootLong = `strata archives ephemeral oplogs down storage layers by sweeping the layers themselves.

Configuration: a TOML file (--config FILE) over the defaults, then STRATA_<SECTION>_<KEY> variables
over the file, then --storage-url, --blob-url and --schedule-url over both, on the commands that open
those stores. See docs/config.md.

Flags go anywhere on the line (strata inspect AGENT --config FILE). Output marked JSON Lines is one
JSON object per line (scan --json, sweep --once --json, migrate status --json).

Exit codes: 0 success; 1 the command failed (a store that cannot be opened, a failed sweep, a bad
configuration file); 2 a usage error (an unknown command or flag, a bad flag value, a wrong number of
arguments), with one message on stderr; 130 a second SIGINT or SIGTERM while draining.`

// rootCommand builds the command tree. Each call builds a new one: no flag value outlives a run.
func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "strata",
		Short: "Archive ephemeral oplogs down storage layers by sweeping the layers themselves",
		Long:  rootLong,
		// strata with no command shows the overview on stderr and is a usage error.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(a.stderr)
			_ = cmd.Help()
			return errUsageShown
		},
		Version:                    version.Get().String(),
		SuggestionsMinimumDistance: 2,
		SilenceErrors:              true, // exitCode writes the one message
		SilenceUsage:               true,
		DisableAutoGenTag:          true,
		// The completion command is command_completion.go's, whose usage errors exit 2 as every other's.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })
	root.AddCommand(
		a.runCommand(),
		a.sweepCommand(),
		a.scanCommand(),
		a.inspectCommand(),
		a.eraseCommand(),
		a.gcCommand(),
		a.compactCommand(),
		a.verifyCommand(),
		a.migrateCommand(),
		a.demoCommand(),
		a.configCommand(),
		a.benchCommand(),
		a.versionCommand(),
		a.completionCommand(),
	)
	root.SetHelpCommand(a.helpCommand())
	return root
}

// usageError is a command line strata cannot run: it exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// errUsageShown: the usage was written already (strata with no command); exit 2 with nothing more.
var errUsageShown = errors.New("usage shown")

// exitCode writes the one message a failed command line gets and returns the exit code.
func (a *app) exitCode(cmd *cobra.Command, err error) int {
	var usage *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsageShown):
		return 2
	case !a.entered || errors.As(err, &usage):
		a.out.fail(commandName(cmd), fmt.Errorf("%s (see %s --help)", oneLine(err.Error()), commandPath(cmd)))
		return 2
	}
	a.out.fail(commandName(cmd), err)
	return 1
}

// commandName is the command as a message names it: "sweep", "config print"; "" for the root.
func commandName(cmd *cobra.Command) string {
	if cmd == nil {
		return ""
	}
	return strings.TrimPrefix(strings.TrimPrefix(cmd.CommandPath(), "strata"), " ")
}

func commandPath(cmd *cobra.Command) string {
	if cmd == nil {
		return "strata"
	}
	return cmd.CommandPath()
}

// oneLine joins a message's lines, so that a usage error is one line on stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// runE wraps a command's code: from here on, an error is the command's own (exit 1) unless it is a
// usageError.
func (a *app) runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.entered = true
		return fn(cmd, args)
	}
}

// noArgs refuses any argument, naming the first.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments (got %q)", commandName(cmd), args[0])
	}
	return nil
}

// exactArgs wants n arguments, described as what.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("want %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// group makes cmd a command of subcommands: it does nothing itself, and without a subcommand, or with
// one it does not have, it is a usage error naming them (cobra would show the help and exit 0).
func group(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.AddCommand(subs...)
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		names := subcommandNames(cmd)
		if len(args) == 0 {
			return usageErrorf("%s needs a command: %s", commandName(cmd), strings.Join(names, ", "))
		}
		return usageErrorf("unknown %s command %q; want %s", commandName(cmd), args[0], strings.Join(names, ", "))
	}
	cmd.RunE = func(*cobra.Command, []string) error { return nil } // unreachable: Args refuses every line
	return cmd
}

func subcommandNames(cmd *cobra.Command) []string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	slices.Sort(names)
	return names
}

// unknownCommand is the usage error for a command strata does not have, with the nearest names.
func unknownCommand(root *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q; the commands are %s", name, strings.Join(append(subcommandNames(root), "help"), ", "))
	if near := root.SuggestionsFor(name); len(near) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(near, " or "))
	}
	return &usageError{msg}
}
