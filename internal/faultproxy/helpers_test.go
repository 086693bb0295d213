package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// patience bounds how long a test waits for something that must happen. It is a liveness bound for
// a hung proxy, never an assertion about speed: a correct proxy meets it by orders of magnitude.
const patience = 30 * time.Second

// echoServer is a loopback upstream that writes back everything it reads and closes its side once
// the client has closed its own.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	once  sync.Once
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, conns: make(map[net.Conn]struct{})}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns[c] = struct{}{}
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				_, _ = io.Copy(c, c)
				c.Close()
				e.mu.Lock()
				delete(e.conns, c)
				e.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(e.close)
	return e
}

func (e *echoServer) addr() string { return e.ln.Addr().String() }

// close stops the server, closes its connections and waits for all its goroutines.
func (e *echoServer) close() {
	e.once.Do(func() {
		e.ln.Close()
		e.mu.Lock()
		for c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
}

func startProxy(t *testing.T, upstream string, opts ...Option) *Proxy {
	t.Helper()
	p, err := Start("127.0.0.1:0", upstream, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads back as many bytes, failing the test on any error.
func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	if err := tryRoundTrip(c, msg); err != nil {
		t.Fatalf("round trip through %s: %v", c.RemoteAddr(), err)
	}
}

func tryRoundTrip(c net.Conn, msg []byte) error {
	if err := c.SetDeadline(time.Now().Add(patience)); err != nil {
		return err
	}
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != string(msg) {
		return errors.New("echo differs from what was sent")
	}
	return nil
}

// expectDropped asserts that c has been dropped: a read returns an error, and not a deadline one
// (the deadline only stops a hung test).
func expectDropped(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(patience)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err == nil {
		t.Fatalf("read %d bytes (%q) from a connection that should have been dropped", n, buf[:n])
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection was not dropped: read still blocked after %v", patience)
	}
}

// expectSilent asserts that nothing arrives on c within d: the read must end in a deadline error.
// A correct proxy can only pass this; a broken one that delivers data fails it.
func expectSilent(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("expected a read deadline error, got %d bytes (%q), err %v", n, buf[:n], err)
	}
}

// eventually polls cond every 10ms, up to a generous number of tries.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range int(patience / (10 * time.Millisecond)) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("gave up waiting: %s", what)
}

// settledGoroutines waits until at most want goroutines remain, and returns the last count.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for range 3000 {
		if n <= want {
			return n
		}
		time.Sleep(10 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}
