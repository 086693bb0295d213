package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// helpCommand is `strata help [COMMAND...]`: the overview, or a command's help, on stdout. Unlike
// cobra's own, a command strata does not have is a usage error.
func (a *app) helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND...]",
		Short: "The overview, or a command's help (as COMMAND --help shows it)",
		Long: "The overview of strata's commands, or a command's help: what it does, its arguments, its flags " +
			"and its exit codes (as COMMAND --help shows it). strata help config print names a subcommand.",
		Args: cobra.ArbitraryArgs,
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, rest, err := cmd.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, c := range target.Commands() {
				if c.IsAvailableCommand() && strings.HasPrefix(c.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(c.Name(), c.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			target, rest, err := cmd.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return unknownCommand(cmd.Root(), strings.Join(args, " "))
			}
			// As CMD -h shows it: the flags -h and --version are added when a command runs.
			target.InitDefaultHelpFlag()
			target.InitDefaultVersionFlag()
			return target.Help()
		}),
	}
}
