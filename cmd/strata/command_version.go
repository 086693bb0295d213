package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stratalog/strata/internal/version"
)

// versionCommand is `strata version [--json]`; `strata --version` prints the same line.
func (a *app) versionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [flags]",
		Short: "The build: module version, commit and Go version",
		Long: "The build: module version, commit (and whether the tree was modified) and Go version, as " +
			"strata --version prints it; --json prints one JSON object.",
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			if !asJSON {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), info.String())
				return err
			}
			raw, err := json.Marshal(map[string]any{"version": info.Version, "commit": info.Commit,
				"modified": info.Modified, "go_version": info.GoVersion})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(raw))
			return err
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the build as one JSON object: {"version","commit","modified","go_version"}`)
	return cmd
}
