package main

import (
	"github.com/spf13/cobra"
)

// completionCommand is `strata completion bash|zsh|fish|powershell`: the shell's completion script, on
// stdout. Commands, subcommands, flags and the values of --mode, --scenarios and --config complete.
func (a *app) completionCommand() *cobra.Command {
	shell := func(name, how string, gen func(cmd *cobra.Command) error) *cobra.Command {
		return &cobra.Command{
			Use:   name,
			Short: "The completion script for " + name,
			Long:  "The completion script for " + name + ", on stdout. " + how,
			Args:  noArgs,
			RunE:  a.runE(func(cmd *cobra.Command, _ []string) error { return gen(cmd) }),
		}
	}
	return group(&cobra.Command{
		Use:   "completion SHELL",
		Short: "A shell completion script: bash, zsh, fish or powershell",
		Long: "A completion script for SHELL, on stdout: strata's commands, subcommands, flags and the values of " +
			"--mode, --scenarios and --config complete.",
		Example: "  source <(strata completion bash)\n  strata completion zsh > \"${fpath[1]}/_strata\"\n" +
			"  strata completion fish > ~/.config/fish/completions/strata.fish",
	},
		shell("bash", "Load it in the current shell with source <(strata completion bash), or install it under "+
			"/etc/bash_completion.d/ (it needs the bash-completion package).",
			func(cmd *cobra.Command) error { return cmd.Root().GenBashCompletionV2(cmd.OutOrStdout(), true) }),
		shell("zsh", "Write it to a file named _strata in a directory of $fpath; compinit must be enabled.",
			func(cmd *cobra.Command) error { return cmd.Root().GenZshCompletion(cmd.OutOrStdout()) }),
		shell("fish", "Write it to ~/.config/fish/completions/strata.fish.",
			func(cmd *cobra.Command) error { return cmd.Root().GenFishCompletion(cmd.OutOrStdout(), true) }),
		shell("powershell", "Load it with strata completion powershell | Out-String | Invoke-Expression, or add that to $PROFILE.",
			func(cmd *cobra.Command) error { return cmd.Root().GenPowerShellCompletionWithDesc(cmd.OutOrStdout()) }),
	)
}
