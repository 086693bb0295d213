package crash_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashBin is the strata binary, built once per test that needs it (without -race, whatever the test
// run uses) into that test's temporary directory.
var crashBin struct {
	mu   sync.Mutex
	path string
}

// crashBinary builds ./cmd/strata from the module root, once: later calls return the same binary
// while it exists (a later test of the same run, after the first one's directory is gone, builds it
// again).
func crashBinary(t *testing.T) string {
	t.Helper()
	crashBin.mu.Lock()
	defer crashBin.mu.Unlock()
	if crashBin.path != "" {
		if _, err := os.Stat(crashBin.path); err == nil {
			return crashBin.path
		}
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD: %q, %v", gomod, err)
	}
	bin := filepath.Join(t.TempDir(), "strata")
	build := exec.Command("go", "build", "-o", bin, "./cmd/strata")
	build.Dir = filepath.Dir(gomod)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/strata: %v\n%s", err, out)
	}
	crashBin.path = bin
	return bin
}

// strataProcess is a running `strata run`.
type strataProcess struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed once the process has exited and its stderr is read

	mu     sync.Mutex
	stderr bytes.Buffer
}

var listenLine = regexp.MustCompile(`strata is serving.* listen=(127\.0\.0\.1:\d+)`)

// startStrata runs `strata run --config cfg` and waits until it serves.
func startStrata(t *testing.T, bin, cfg string) *strataProcess {
	t.Helper()
	cmd := exec.Command(bin, "run", "--config", cfg)
	cmd.Env = os.Environ()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &strataProcess{cmd: cmd, done: make(chan struct{})}
	addrs := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrs <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case p.addr = <-addrs:
	case <-p.done:
		t.Fatalf("strata run exited before serving: %v\n%s", cmd.ProcessState, p.log())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("strata run did not start serving\n%s", p.log())
	}
	return p
}

func (p *strataProcess) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *strataProcess) put(t *testing.T, path, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+p.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %d %s", path, resp.StatusCode, raw)
	}
}

// feed gives the process the single shard, without a lease, and an empty resident set: from its next
// tick on, the sweep archives every stranded agent that passes the quiet gate.
func (p *strataProcess) feed(t *testing.T) {
	t.Helper()
	p.put(t, "/v1/assignment", `{"shard_count":1,"shards":[0]}`)
	p.put(t, "/v1/residency", `{"agents":[]}`)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *strataProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("strata did not exit after SIGKILL")
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("strata exited on its own before the kill: %v\n%s", p.cmd.ProcessState, p.log())
	}
}

// stop sends SIGTERM and returns the exit code once the process has drained and exited.
func (p *strataProcess) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("strata did not exit after SIGTERM\n%s", p.log())
	}
	return p.cmd.ProcessState.ExitCode()
}
