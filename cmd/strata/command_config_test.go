package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratalog/strata/config"
)

func TestConfigCheckAndPrint(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(good, []byte("[storage]\nurl = \"postgres://u:hunter2@127.0.0.1/db?password=hunter2\"\n[sweep]\npage_size = 77\n"), 0o600)
	os.WriteFile(bad, []byte("[sweep]\npage_size = -1\n"), 0o600)
	if code, out, errOut := runIn("config", "check", good); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("check good: exit %d %s %s", code, out, errOut)
	}
	if code, _, errOut := runIn("config", "check", bad); code != 1 || !strings.Contains(errOut, "sweep.page_size") {
		t.Fatalf("check bad: exit %d %s", code, errOut)
	}
	if code, _, errOut := runIn("config", "check", filepath.Join(dir, "missing.toml")); code != 1 {
		t.Fatalf("check missing: exit %d %s", code, errOut)
	}
	t.Setenv("STRATA_HTTP_TOKEN", "hunter2-token")
	t.Setenv("STRATA_SWEEP_MAX_CONCURRENCY", "3")
	code, out, errOut := runIn("config", "print", "--config", good)
	if code != 0 || strings.Contains(out+errOut, "hunter2") {
		t.Fatalf("print: exit %d\n%s%s", code, out, errOut)
	}
	cfg, err := config.Parse([]byte(out), nil)
	if err != nil {
		t.Fatalf("print does not parse back: %v\n%s", err, out)
	}
	if cfg.Sweep.PageSize != 77 || cfg.Sweep.MaxConcurrency != 3 || cfg.HTTP.Token != "(hidden)" {
		t.Fatalf("print is not the effective config:\n%s", out)
	}
}

func TestBinary_ConfigDefaultsParseBack(t *testing.T) {
	code, out, _ := runBinary(t, nil, "config", "defaults")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	cfg, err := config.Parse([]byte(out), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sweep.PageSize != config.Default().Sweep.PageSize || !strings.Contains(out, "untuned") {
		t.Fatalf("defaults: %+v", cfg.Sweep)
	}
}

// config print shows the URL flags in effect, their passwords hidden as the file's are.
func TestConfigPrint_URLFlagsAreInEffectAndRedacted(t *testing.T) {
	code, out, errOut := runIn("config", "print", "--storage-url", "postgres://u:hunter2@127.0.0.1/db?password=hunter2", "--schedule-url", "memory://")
	if code != 0 || strings.Contains(out+errOut, "hunter2") || !strings.Contains(out, "127.0.0.1/db") || !strings.Contains(out, `url = "memory://"`) {
		t.Fatalf("config print: exit %d\n%s%s", code, out, errOut)
	}
}
