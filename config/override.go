package config

import (
	"fmt"
	"os"
)

// Override sets one key from outside the file and the environment: a command-line flag such as
// strata's --storage-url. It wins over both (flag > variable > file > default).
type Override struct {
	Key   string // the key, "storage.url"
	Flag  string // how messages name it: "--storage-url"
	Value string // the value as the flag was given, parsed as a variable's would be
}

// LoadWith is Load with the overrides applied over the environment, each named by its Flag in
// messages.
func LoadWith(path string, environ []string, overrides []Override) (Config, error) {
	if path == "" {
		return parse(nil, "", environ, overrides...)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return parse(data, path, environ, overrides...)
}

// CheckOverride checks an override's value against its key's type and rule, as Load checks the key,
// without loading anything: so that a bad flag is refused before any file is read or store opened.
func CheckOverride(o Override) error {
	s := byKey[o.Key]
	if s == nil {
		return fmt.Errorf("%s: no configuration key %q", o.Flag, o.Key)
	}
	v, err := fromEnv(s, o.Value)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Flag, err)
	}
	if s.rule.ok != nil && !s.rule.ok(v) {
		return fmt.Errorf("%s: %s is not allowed: want %s", o.Flag, show(s, v), s.rule.want)
	}
	return nil
}

// EnvName is the environment variable that sets key ("storage.url": STRATA_STORAGE_URL), "" for a key
// the table does not have.
func EnvName(key string) string {
	if s := byKey[key]; s != nil {
		return s.env
	}
	return ""
}

func applyOverrides(c *Config, overrides []Override, from labels) []error {
	var errs []error
	for _, o := range overrides {
		s := byKey[o.Key]
		if s == nil {
			errs = append(errs, fmt.Errorf("%s: no configuration key %q", o.Flag, o.Key))
			continue
		}
		v, err := fromEnv(s, o.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.Flag, err))
			continue
		}
		from[s.key] = fmt.Sprintf("%s (%s)", o.Flag, s.key)
		s.set(c, v)
	}
	return errs
}
