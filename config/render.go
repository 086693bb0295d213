package config

import (
	redactpkg "github.com/stratalog/strata/internal/redact"

	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// docs/config.md is Markdown(); `go generate ./config/` rewrites it, and TestDocsMatchMarkdown fails
// when it drifts.
//go:generate go test -run ^TestDocsMatchMarkdown$ -update .

// DefaultsTOML is the default configuration file: every key of every section, set to its default,
// under a comment giving its meaning, unit, allowed values and environment variable. `strata config
// defaults` prints it, and it parses back to Default().
func DefaultsTOML() string {
	var b strings.Builder
	comment(&b, "strata configuration: every key, set to its default. `strata config defaults` prints this "+
		"file; docs/config.md is the reference.")
	b.WriteString("#\n")
	comment(&b, intro)
	defaults := Default()
	for _, sec := range sections {
		b.WriteString("\n")
		comment(&b, sec.doc)
		fmt.Fprintf(&b, "[%s]\n", sec.name)
		for i := range sec.keys {
			s := &sec.keys[i]
			b.WriteString("\n")
			comment(&b, s.help(true)+" Env: "+s.env+".")
			fmt.Fprintf(&b, "%s = %s\n", s.name, tomlValue(s.get(&defaults)))
		}
	}
	return b.String()
}

// intro says what the file and the environment do, for both the default file and the reference.
const intro = "Every key is optional: a key the file leaves out keeps its default. An environment variable " +
	"STRATA_<SECTION>_<KEY> (STRATA_SWEEP_PAGE_SIZE=64) overrides the file's key. Durations are Go " +
	`duration strings ("100ms", "30s", "5m", "24h"); negative durations are rejected. A key the file ` +
	"does not know is an error, and so is a variable under a known section (STRATA_SWEEP_…) with a key " +
	"the section does not have; variables under other names (STRATA_TEST_POSTGRES_URL) are ignored."

// Markdown is the configuration reference, docs/config.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("<!-- Generated from config/keys.go by `go generate ./config/`. Do not edit: a test fails when this file drifts. -->\n\n")
	b.WriteString("`strata run --config strata.toml` reads a TOML file over the defaults, applies the environment " +
		"over the file, and validates the result: an error names the key (or the variable), the bad value and what " +
		"is allowed. `strata config defaults` prints the default file, every key with a comment.\n\n")
	b.WriteString(strings.Replace(intro, "STRATA_<SECTION>_<KEY>", "`STRATA_<SECTION>_<KEY>`", 1) + "\n\n")
	b.WriteString("On the command line, `--storage-url`, `--blob-url` and `--schedule-url` override the three URLs over the " +
		"environment and the file (flag > variable > file > default) on the commands that open those stores: `strata run`, " +
		"`sweep`, `scan`, `inspect`, `migrate` and `config print`. A flag's value is checked as the key's is.\n\n")
	b.WriteString("A URL's scheme is checked when the configuration loads; the rest of it when the store is opened.\n\n")
	b.WriteString("The sweep's budgets are **untuned**: starting points, not measured optima.\n")
	defaults := Default()
	for _, sec := range sections {
		fmt.Fprintf(&b, "\n## [%s]\n\n%s\n\n", sec.name, sec.doc)
		b.WriteString("| Key | Type | Default | Environment variable | Meaning |\n")
		b.WriteString("|---|---|---|---|---|\n")
		for i := range sec.keys {
			s := &sec.keys[i]
			typ := s.kind.name()
			if s.unit != "" {
				typ += " (" + s.unit + ")"
			}
			fmt.Fprintf(&b, "| `%s` | %s | `%s` | `%s` | %s |\n",
				s.name, typ, tomlValue(s.get(&defaults)), s.env, cell(s.help(false)))
		}
	}
	b.WriteString("\n## The default file\n\n```toml\n" + DefaultsTOML() + "```\n")
	return b.String()
}

// help is the key's description: meaning, unit (when asked for: the reference has it in its own
// column), what is allowed, clamps, and whether it is tuned.
func (s *spec) help(unit bool) string {
	parts := []string{s.doc}
	if unit && s.unit != "" {
		parts = append(parts, "Unit: "+s.unit+".")
	}
	if s.rule.want != "" {
		parts = append(parts, "Allowed: "+s.rule.want+".")
	}
	if s.note != "" {
		parts = append(parts, s.note)
	}
	if s.untuned {
		parts = append(parts, "Untuned.")
	}
	return strings.Join(parts, " ")
}

// tomlValue renders a value as a TOML literal.
func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return tomlString(v)
	case time.Duration:
		return tomlString(formatDuration(v))
	}
	return fmt.Sprint(v)
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// formatDuration writes d the shortest way time.ParseDuration reads back: "1m", not "1m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// comment writes text as # lines of at most 100 columns (a longer word gets a line of its own).
func comment(b *strings.Builder, text string) {
	line := "#"
	for _, word := range strings.Fields(text) {
		if line != "#" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > 100 {
			b.WriteString(line + "\n")
			line = "#"
		}
		line += " " + word
	}
	b.WriteString(line + "\n")
}

// cell escapes text for a Markdown table cell.
func cell(text string) string {
	return strings.ReplaceAll(text, "|", `\|`)
}

// EffectiveTOML is c as a configuration file, every key of every section, for `strata config print`:
// a secret (http.token) is shown as "(hidden)" when set, and every URL has its secrets redacted, so
// the output is safe to paste in a ticket. It parses back to c but for those.
func (c Config) EffectiveTOML() string {
	var b strings.Builder
	comment(&b, "strata configuration in effect: the defaults, the file, then STRATA_* variables. Secrets are redacted.")
	for _, sec := range sections {
		fmt.Fprintf(&b, "\n[%s]\n", sec.name)
		for i := range sec.keys {
			s := &sec.keys[i]
			v := s.get(&c)
			if str, ok := v.(string); ok {
				switch {
				case s.secret && str != "":
					v = "(hidden)"
				default:
					v = redactpkg.URL(str)
				}
			}
			fmt.Fprintf(&b, "%s = %s\n", s.name, tomlValue(v))
		}
	}
	return b.String()
}
