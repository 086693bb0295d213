package config

import (
	"os"
	"strings"

	"github.com/BurntSushi/toml"
)

// LogFormatHint is the log.format the file at path (if any) and environ ask for, read leniently, even
// when the configuration is otherwise invalid: so that the error saying so can be written in that
// format. It is "" when neither sets it or the file cannot be read.
func LogFormatHint(path string, environ []string) string {
	format := ""
	if path != "" {
		var file struct {
			Log struct {
				Format string `toml:"format"`
			} `toml:"log"`
		}
		if data, err := os.ReadFile(path); err == nil {
			if _, err := toml.Decode(string(data), &file); err == nil {
				format = file.Log.Format
			}
		}
	}
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "STRATA_LOG_FORMAT="); ok {
			format = v
		}
	}
	return format
}
