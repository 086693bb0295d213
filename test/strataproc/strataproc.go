// Package strataproc runs the strata binary as an operator would, for the end-to-end and crash tests:
// built once, started with a config file, driven over its HTTP API, stopped with SIGTERM or killed.
package strataproc

import (
	"bufio"
	"bytes"
	"fmt"
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

// Build builds ./cmd/strata from the module root (without -race, whatever the test run uses) into dir
// and returns the binary's path.
func Build(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: %q, %v", gomod, err)
	}
	bin := filepath.Join(dir, "strata")
	build := exec.Command("go", "build", "-o", bin, "./cmd/strata")
	build.Dir = filepath.Dir(gomod)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/strata: %v\n%s", err, out)
	}
	return bin, nil
}

// Process is a running `strata run`.
type Process struct {
	cmd  *exec.Cmd
	Addr string        // the loopback address it serves on
	done chan struct{} // closed once the process has exited and its stderr is read

	mu     sync.Mutex
	stderr bytes.Buffer
}

var listenLine = regexp.MustCompile(`strata is serving.*(?: listen=|"listen":")(127\.0\.0\.1:\d+)`) // text or JSON log

// Start runs `bin run --config config` with env added to the test's environment and waits until it
// serves. The process is killed when the test ends if it is still running.
func Start(tb testing.TB, bin, config string, env ...string) *Process {
	tb.Helper()
	cmd := exec.Command(bin, "run", "--config", config)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
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
	tb.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case p.Addr = <-addrs:
	case <-p.done:
		tb.Fatalf("strata run exited before serving: %v\n%s", cmd.ProcessState, p.Log())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		tb.Fatalf("strata run did not start serving\n%s", p.Log())
	}
	return p
}

// Log is what the process has written to stderr so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Call sends one request, with a bearer token when token is not empty, and returns the status and body.
func (p *Process) Call(tb testing.TB, method, path, token, body string) (int, string) {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), method, "http://"+p.Addr+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// Kill sends SIGKILL and waits for the process to be gone; it fails the test if the process had
// already exited on its own.
func (p *Process) Kill(tb testing.TB) {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		tb.Fatal("strata did not exit after SIGKILL")
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		tb.Fatalf("strata exited on its own before the kill: %v\n%s", p.cmd.ProcessState, p.Log())
	}
}

// Stop sends SIGTERM and returns the exit code once the process has drained and exited.
func (p *Process) Stop(tb testing.TB) int {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		tb.Fatalf("strata did not exit after SIGTERM\n%s", p.Log())
	}
	return p.cmd.ProcessState.ExitCode()
}

// WriteConfig writes a strata.toml into dir for a test process: its stores (blobURL is the blob
// store's URL), an HTTP listener on a free loopback port, then rest (more sections, verbatim). It
// returns the file's path.
func WriteConfig(t *testing.T, dir, storageURL, scheduleURL, blobURL, rest string) string {
	t.Helper()
	cfg := fmt.Sprintf("[storage]\nurl = %q\n[schedule]\nurl = %q\n[blob]\nurl = %q\n[http]\nlisten = \"127.0.0.1:0\"\n%s",
		storageURL, scheduleURL, blobURL, rest)
	path := filepath.Join(dir, "strata.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
