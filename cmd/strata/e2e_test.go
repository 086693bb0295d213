package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/fsblob"
	"github.com/stratalog/strata/backends/sqlite"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/test/strataproc"
)

var binary string

// TestMain builds the strata binary once; the end-to-end tests run it as an operator would.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if binary, err = strataproc.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// deployment is a data directory with a config file for it.
type deployment struct {
	dir, config string
}

// newDeployment writes a config with sweepExtra added to [sweep] and httpExtra to [http].
func newDeployment(t *testing.T, sweepExtra, httpExtra string) deployment {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`[storage]
url = "sqlite://%[1]s/strata.db"
[schedule]
url = "sqlite://%[1]s/strata.db"
[blob]
url = "fs://%[1]s/blobs"
[http]
listen = "127.0.0.1:0"
%[3]s
[sweep]
interval = "1h"  # ticks come from POST /v1/sweep in these tests
%[2]s
`, dir, sweepExtra, httpExtra)
	path := filepath.Join(dir, "strata.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return deployment{dir: dir, config: path}
}

// stack opens the deployment's stores from the test process, beside the running binary.
func (d deployment) stack(t *testing.T) *oplog.Stack {
	t.Helper()
	st, err := sqlite.New(t.Context(), filepath.Join(d.dir, "strata.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := fsblob.New(t.Context(), filepath.Join(d.dir, "blobs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := archive.DefaultStack(st, blobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return stack
}

func payloadOf(a oplog.AgentID, i int) []byte { return fmt.Appendf(nil, "%s#%d", a.Name, i) }

func strandAgents(t *testing.T, stack *oplog.Stack, n, entries int) []oplog.AgentID {
	t.Helper()
	var agents []oplog.AgentID
	for i := range n {
		a := oplog.AgentID{Component: "shop", Name: fmt.Sprintf("cart/%03d", i)}
		batch := make([]oplog.Entry, entries)
		for j := range batch {
			batch[j] = oplog.Entry{Index: oplog.Index(j + 1), Payload: payloadOf(a, j+1)}
		}
		if err := stack.Append(t.Context(), a, oplog.Ephemeral, batch); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	return agents
}

// requireWhole checks every agent reads back exactly 1..entries and lives in one layer or the other,
// never half moved.
func requireWhole(t *testing.T, stack *oplog.Stack, agents []oplog.AgentID, entries int) (archived int) {
	t.Helper()
	ctx := t.Context()
	for _, a := range agents {
		got, err := stack.Read(ctx, a, oplog.Ephemeral, 1, entries+5)
		if err != nil || len(got) != entries {
			t.Fatalf("%s: read %d entries, %v", a, len(got), err)
		}
		for i, e := range got {
			if e.Index != oplog.Index(i+1) || !bytes.Equal(e.Payload, payloadOf(a, i+1)) {
				t.Fatalf("%s: entry %d is %d %q", a, i+1, e.Index, e.Payload)
			}
		}
		_, inL1, _ := stack.Archives()[0].LastIndex(ctx, a, oplog.Ephemeral)
		_, inBlob, _ := stack.Archives()[1].LastIndex(ctx, a, oplog.Ephemeral)
		if inL1 && inBlob {
			t.Fatalf("%s is half moved: entries in compressed level 1 and in the blob layer", a)
		}
		if inBlob {
			archived++
		}
	}
	return archived
}

// start runs the binary over the deployment with env added to the test's environment.
func start(t *testing.T, d deployment, env ...string) *strataproc.Process {
	t.Helper()
	return strataproc.Start(t, binary, d.config, env...)
}

// feed gives the process the single shard, with a lease, and an empty resident set.
func feed(t *testing.T, p *strataproc.Process, token string) {
	t.Helper()
	if code, body := p.Call(t, "PUT", "/v1/assignment", token, `{"shard_count":1,"shards":[0],"lease_seconds":600}`); code != 200 {
		t.Fatalf("assignment: %d %s", code, body)
	}
	if code, body := p.Call(t, "PUT", "/v1/residency", token, `{"agents":[]}`); code != 200 {
		t.Fatalf("residency: %d %s", code, body)
	}
}

func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		exitErr, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = exitErr.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

func runIn(args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}
