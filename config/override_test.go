package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An override wins over the variable, which wins over the file; the others keep their values.
func TestLoadWith_AFlagOverridesTheVariableAndTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte("[storage]\nurl = \"sqlite:file.db\"\n[blob]\nurl = \"fs:file-blobs\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"STRATA_STORAGE_URL=sqlite:env.db", "STRATA_SCHEDULE_URL=sqlite:env-schedule.db"}
	cfg, err := LoadWith(path, env, []Override{{Key: "storage.url", Flag: "--storage-url", Value: "sqlite:flag.db"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Storage.URL != "sqlite:flag.db" || cfg.Schedule.URL != "sqlite:env-schedule.db" || cfg.Blob.URL != "fs:file-blobs" {
		t.Fatalf("storage %q, schedule %q, blob %q", cfg.Storage.URL, cfg.Schedule.URL, cfg.Blob.URL)
	}
	if cfg, err = LoadWith("", nil, nil); err != nil || cfg.Storage.URL != Default().Storage.URL {
		t.Fatalf("no file, no overrides: %q, %v", cfg.Storage.URL, err)
	}
}

// A flag's value is checked as the key's would be, and the message names the flag.
func TestCheckOverride_RefusesWhatTheKeyRefusesNamingTheFlag(t *testing.T) {
	for _, c := range []struct {
		o    Override
		says string
	}{
		{Override{Key: "storage.url", Flag: "--storage-url", Value: "ftp://x"}, `--storage-url: "ftp://x" is not allowed: want a URL of the form memory://`},
		{Override{Key: "blob.url", Flag: "--blob-url", Value: ""}, `--blob-url: "" is not allowed`},
		{Override{Key: "schedule.url", Flag: "--schedule-url", Value: "redis://h:6379/0"}, `--schedule-url: "redis://h:6379/0" is not allowed`},
		{Override{Key: "storage.url", Flag: "--storage-url", Value: "postgres://u:hunter2@h/db"}, ""},
		{Override{Key: "nosuch.key", Flag: "--x", Value: "1"}, `no configuration key "nosuch.key"`},
	} {
		err := CheckOverride(c.o)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("%+v: %v", c.o, err)
		case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%+v: %v, want %q", c.o, err, c.says)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("%+v: the message shows the password: %v", c.o, err)
		}
	}
	if err := CheckOverride(Override{Key: "storage.url", Flag: "--storage-url", Value: "redis://u:hunter2@h:6379/0?x=%zz"}); err != nil && strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("the message shows the password: %v", err)
	}
	if EnvName("storage.url") != "STRATA_STORAGE_URL" || EnvName("nosuch") != "" {
		t.Fatal("EnvName")
	}
}
