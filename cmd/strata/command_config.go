package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/config"
)

// configCommand is `strata config defaults|check|print`.
func (a *app) configCommand() *cobra.Command {
	return group(&cobra.Command{
		Use:   "config COMMAND",
		Short: "The configuration: the default file, a file's check, the configuration in effect",
		Long: "The configuration: a TOML file over the defaults, then STRATA_<SECTION>_<KEY> variables over the file, " +
			"then --storage-url, --blob-url and --schedule-url over both. See docs/config.md.",
	}, a.configDefaultsCommand(), a.configCheckCommand(), a.configPrintCommand())
}

func (a *app) configDefaultsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "defaults",
		Short: "Print the default configuration file, every key commented",
		Args:  noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(cmd.OutOrStdout(), config.DefaultsTOML())
			return err
		}),
	}
}

func (a *app) configCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Validate FILE with the STRATA_* variables over it, as strata run would",
		Long: "Validate FILE with the STRATA_* variables over it, as strata run would: print \"FILE: ok\", or exit 1 " +
			"with every problem found, each naming its key.\n\nArguments:\n  FILE  a TOML configuration file",
		Args: exactArgs(1, "one FILE"),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			if _, err := config.Load(args[0], environ()); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", args[0])
			return err
		}),
	}
}

func (a *app) configPrintCommand() *cobra.Command {
	var f *storeFlags
	cmd := &cobra.Command{
		Use:   "print [flags]",
		Short: "The configuration in effect, secrets redacted",
		Long: "The configuration in effect after the defaults, the file, the STRATA_* variables and the URL flags, " +
			"as a TOML file, secrets redacted.",
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd, a.stderr, nil)
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), cfg.EffectiveTOML())
			return err
		}),
	}
	f = addStoreFlags(cmd, keyStorage, keyBlob, keySchedule)
	return cmd
}
