package main

import (
	"encoding/json"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/stratalog/strata/internal/testenv"
	"github.com/stratalog/strata/test/strataproc"
)

const pgSecret = "hunter2-secret"

// withPassword is the test server's URL with pgSecret as the user-info password and as the password=
// query parameter (trust authentication accepts any), in schema.
func withPassword(t *testing.T, raw, schema string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), pgSecret)
	q := u.RawQuery
	if q != "" {
		q += "&"
	}
	u.RawQuery = q + "password=" + pgSecret + "&schema=" + schema
	return u.String()
}

func writeConfig(t *testing.T, dir, storage, extra string) string {
	t.Helper()
	return strataproc.WriteConfig(t, dir, storage, storage, "fs://"+dir+"/blobs", "[sweep]\ninterval = \"1h\"\n"+extra+"\n")
}

// A password in the storage URL, in its user-info and its query, never reaches stdout, stderr or
// GET /v1/status: not while serving, not when the server cannot be reached, not in a JSON log.
func TestBinary_AStorageURLPasswordIsNeverShown(t *testing.T) {
	pg := testenv.PostgresURL(t)
	schema := testenv.PostgresSchema(t, pg)
	storage := withPassword(t, pg, schema)

	for _, format := range []string{"text", "json"} {
		t.Run("serving/"+format, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeConfig(t, dir, storage, "[log]\nformat = \""+format+"\"\nlevel = \"debug\"")
			p := strataproc.Start(t, binary, cfg)
			feed(t, p, "")
			if code, body := p.Call(t, "POST", "/v1/sweep", "", ""); code != 200 {
				t.Fatalf("sweep: %d %s", code, body)
			}
			code, status := p.Call(t, "GET", "/v1/status", "", "")
			if code != 200 {
				t.Fatalf("status: %d %s", code, status)
			}
			if exit := p.Stop(t); exit != 0 {
				t.Fatalf("exit %d\n%s", exit, p.Log())
			}
			for what, text := range map[string]string{"stderr": p.Log(), "/v1/status": status} {
				if strings.Contains(text, pgSecret) {
					t.Errorf("%s shows the password:\n%s", what, text)
				}
			}
			if !strings.Contains(p.Log(), "password=xxxxx") {
				t.Errorf("the startup log does not show the redacted URL:\n%s", p.Log())
			}
			if format == "json" {
				requireJSONLines(t, p.Log())
			}
		})
	}

	// Nothing listens on the port: the connection fails, and its error is what strata exits with.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	down := withPassword(t, "postgres://postgres@"+closed+"/test?sslmode=disable&connect_timeout=5", schema)
	for _, format := range []string{"text", "json"} {
		t.Run("unreachable/"+format, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeConfig(t, dir, down, "[log]\nformat = \""+format+"\"")
			for _, args := range [][]string{{"run", "--config", cfg}, {"sweep", "--once", "--config", cfg},
				{"scan", "--config", cfg}, {"inspect", "--config", cfg, "c:a"}} {
				code, stdout, stderr := runBinary(t, nil, args...)
				if code != 1 || !strings.Contains(stderr, "storage.url") {
					t.Errorf("%s: exit %d, want 1 naming storage.url\n%s", args[0], code, stderr)
				}
				if strings.Contains(stdout+stderr, pgSecret) {
					t.Errorf("%s shows the password:\n%s\n%s", args[0], stdout, stderr)
				}
				if format == "json" && args[0] == "run" {
					requireJSONLines(t, stderr)
				}
			}
		})
	}
}

// requireJSONLines fails unless every line of log is a JSON object.
func requireJSONLines(t *testing.T, log string) {
	t.Helper()
	for line := range strings.SplitSeq(strings.TrimRight(log, "\n"), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("not a JSON line: %q", line)
		}
	}
}
