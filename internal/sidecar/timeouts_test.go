package sidecar

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/oplog"
)

// serveSidecar opens a sidecar on SQLite and a filesystem blob store in a temporary directory and
// serves it with Serve on a real loopback listener, as `strata run` does (the server's timeouts are
// Serve's). It returns the sidecar and the listener's address.
func serveSidecar(t *testing.T, edit func(*config.Config)) (*Sidecar, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Storage.URL = "sqlite://" + filepath.Join(dir, "strata.db")
	cfg.Schedule.URL = cfg.Storage.URL
	cfg.Blob.URL = "fs://" + filepath.Join(dir, "blobs")
	if edit != nil {
		edit(&cfg)
	}
	s, err := Open(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.Close()
	})
	return s, ln.Addr().String()
}

// waitFor polls cond until it holds, failing the test after a generous bound: for states that have no
// signal to wait on (what the server has read of a connection).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// trickle opens a connection to addr and sends the head of a request announcing a body of
// contentLength bytes, then body, then one space a second until the connection fails or the test ends.
func trickle(t *testing.T, addr, method, path string, contentLength int, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		method, path, contentLength, body)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for sent := len(body); sent < contentLength-1; sent++ {
			select {
			case <-t.Context().Done():
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	return conn
}

// answerThenClose reads the server's answer on conn and then waits for the server to close the
// connection, both within bound; it returns the answer's status.
func answerThenClose(t *testing.T, conn net.Conn, bound time.Duration) int {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(bound))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", bound, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("after answering %d the server kept the connection open (%v)", resp.StatusCode, err)
	}
	return resp.StatusCode
}

// isReset reports a connection the server reset rather than closed: it closes a connection whose
// body it did not read, and unread bytes make the kernel send a RST.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !errors.Is(err, os.ErrDeadlineExceeded)
}

const testBodyTimeout = 2 * time.Second

// margin is what the bounds allow beyond the configured timeouts: scheduling on a loaded machine.
// Generous on purpose: these tests check that something happens, not how fast.
const margin = 10 * time.Second

// A client sending its residency body one byte a second holds the feed for http.body_timeout at most:
// the executor's PUT, sent meanwhile, waits its turn and lands; the slow client gets 408 and its
// connection is closed.
func TestServe_ASlowResidencyClientNeverKeepsTheExecutorsPUTOut(t *testing.T) {
	s, addr := serveSidecar(t, func(c *config.Config) { c.HTTP.BodyTimeout = testBodyTimeout })
	slow := trickle(t, addr, "PUT", "/v1/residency", 1000, `{"agents":["shop:slow"`)
	waitFor(t, "the slow PUT holds the residency feed", func() bool { return len(s.residencyTurn) > 0 })

	resident := oplog.AgentID{Component: "shop", Name: "resident"}
	// It waits for the slow PUT, which its body deadline cuts: one body deadline at most, plus margin.
	executor := &http.Client{Timeout: testBodyTimeout + margin}
	req, err := http.NewRequest("PUT", "http://"+addr+"/v1/residency", strings.NewReader(`{"agents":["shop:resident"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := executor.Do(req)
	if err != nil {
		t.Fatalf("the executor's PUT behind a slow client: %v", err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the executor's PUT behind a slow client: %d %s, want 200", resp.StatusCode, answer)
	}
	if !s.feed.isResident(resident) || s.feed.isResident(oplog.AgentID{Component: "shop", Name: "slow"}) {
		t.Fatalf("the feed after the executor's PUT: %+v, want exactly the executor's agent", s.feed.status().Residency)
	}
	if code := answerThenClose(t, slow, margin); code != http.StatusRequestTimeout {
		t.Fatalf("the slow client got %d, want 408", code)
	}
}

// Every request's body has a deadline, whatever the endpoint and whether or not its handler reads
// the body: a client that stops sending its body mid-way gets an answer and its connection closed
// within http.body_timeout, rather than holding a handler or the connection.
func TestServe_EveryRequestBodyHasADeadline(t *testing.T) {
	_, addr := serveSidecar(t, func(c *config.Config) { c.HTTP.BodyTimeout = testBodyTimeout })
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"PUT", "/v1/assignment", `{"shard_count":1,`, http.StatusRequestTimeout},
		{"PUT", "/v1/residency", `{"agents":[`, http.StatusRequestTimeout},
		{"POST", "/v1/sweep", `{`, http.StatusOK},             // does not read its body: the server drains it after
		{"PUT", "/v1/nothing-here", `{`, http.StatusNotFound}, // likewise
	} {
		t.Run(c.method+c.path, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n%s", c.method, c.path, c.body)
			if code := answerThenClose(t, conn, testBodyTimeout+margin); code != c.want {
				t.Fatalf("answer %d, want %d", code, c.want)
			}
		})
	}
}

// A kept-alive connection that sends no further request is closed after http.idle_timeout.
func TestServe_IdleConnectionsAreClosedAfterIdleTimeout(t *testing.T) {
	const idle = time.Second
	_, addr := serveSidecar(t, func(c *config.Config) { c.HTTP.IdleTimeout = idle })
	for i := range 3 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(idle + margin))
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("connection %d: %d, close %v; want 200 on a kept-alive connection", i, resp.StatusCode, resp.Close)
		}
		if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d, idle after its request: %v, want it closed by the server (EOF) within %s", i, err, idle+margin)
		}
	}
}
