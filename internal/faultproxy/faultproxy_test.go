package faultproxy

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPassThroughIntact sends large random payloads over many concurrent connections and checks
// each comes back byte for byte, including the half-close that ends it.
func TestPassThroughIntact(t *testing.T) {
	for _, tc := range []struct {
		name    string
		latency time.Duration
		opts    []Option
	}{
		{name: "plain"},
		{name: "small-queue", opts: []Option{WithMaxQueued(0)}}, // raised to the 64 KiB floor: back-pressure
		{name: "latency-both", latency: time.Millisecond, opts: []Option{WithMaxQueued(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo := startEcho(t)
			p := startProxy(t, echo.addr(), tc.opts...)
			p.SetLatency(tc.latency, Both)

			const conns, size = 16, 1 << 20
			var wg sync.WaitGroup
			errs := make(chan error, conns)
			for i := range conns {
				c := dial(t, p.Addr())
				payload := make([]byte, size+i*1237) // uneven sizes
				rand.Read(payload)
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- echoWhole(c, payload)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			var sent int64
			for i := range conns {
				sent += int64(size + i*1237)
			}
			eventually(t, "byte counters to reach what was sent", func() bool {
				s := p.Stats()
				return s.BytesUp == sent && s.BytesDown == sent && s.Open == 0 && s.Queued == 0
			})
			if s := p.Stats(); s.Accepted != conns || s.Resets != 0 || s.Swallowed != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// echoWhole writes payload in uneven pieces, half-closes, and reads the echo until EOF.
func echoWhole(c *net.TCPConn, payload []byte) error {
	if err := c.SetDeadline(time.Now().Add(patience)); err != nil {
		return err
	}
	werr := make(chan error, 1)
	go func() {
		rest := payload
		for len(rest) > 0 {
			n := min(len(rest), 1+mrand.IntN(100_000))
			if _, err := c.Write(rest[:n]); err != nil {
				werr <- err
				return
			}
			rest = rest[n:]
		}
		werr <- c.CloseWrite()
	}()
	got, rerr := io.ReadAll(c)
	if err := <-werr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("read: %w", rerr)
	}
	if !bytes.Equal(got, payload) {
		return fmt.Errorf("echo of %d bytes differs (got %d bytes)", len(payload), len(got))
	}
	return nil
}

// TestLatencyLowerBound checks that no reply arrives before the injected latency has passed, in
// each direction setting, and that a switch applies to a connection already open.
func TestLatencyLowerBound(t *testing.T) {
	const latency = 100 * time.Millisecond
	echo := startEcho(t)
	p := startProxy(t, echo.addr())
	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("warm up, no latency"))

	for _, tc := range []struct {
		dir       Direction
		roundTrip time.Duration
	}{
		{Downstream, latency},
		{Upstream, latency},
		{Both, 2 * latency},
	} {
		p.SetLatency(latency, tc.dir)
		if down, up := p.Latency(); (down != 0) != tc.dir.covers(Downstream) || (up != 0) != tc.dir.covers(Upstream) {
			t.Fatalf("SetLatency(%v, %v): Latency() = %v, %v", latency, tc.dir, down, up)
		}
		start := time.Now()
		roundTrip(t, c, []byte("delayed "+tc.dir.String()))
		if elapsed := time.Since(start); elapsed < tc.roundTrip {
			t.Errorf("%v: round trip took %v, less than the injected %v", tc.dir, elapsed, tc.roundTrip)
		}
	}
	p.SetLatency(0, Both)
	roundTrip(t, c, []byte("latency off again"))
}

// TestLatencyPreservesOrder streams numbered records while the latency is switched between values
// and directions, and checks the echo is exactly the stream sent.
func TestLatencyPreservesOrder(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.addr())
	p.SetLatency(20*time.Millisecond, Downstream)
	c := dial(t, p.Addr())

	var sent bytes.Buffer
	for i := range 2000 {
		var rec [8]byte
		binary.BigEndian.PutUint64(rec[:], uint64(i))
		sent.Write(rec[:])
		sent.Write(bytes.Repeat([]byte{byte(i)}, i%300))
	}
	payload := sent.Bytes()

	stop := make(chan struct{})
	toggled := make(chan struct{})
	go func() {
		defer close(toggled)
		settings := []struct {
			d   time.Duration
			dir Direction
		}{{0, Both}, {5 * time.Millisecond, Upstream}, {30 * time.Millisecond, Both}, {time.Millisecond, Downstream}}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			s := settings[i%len(settings)]
			p.SetLatency(s.d, s.dir)
		}
	}()
	err := echoWhole(c, payload)
	close(stop)
	<-toggled
	if err != nil {
		t.Fatal(err)
	}
}

// TestLatencyDoesNotSerialiseConnections holds a reply on connection A behind a latency far longer
// than the test, then switches the latency off: connection B's traffic goes through at once while
// A's later traffic still waits behind A's held reply. A proxy that queued connections behind one
// another could not complete B; the check on A can only fail if a reply overtakes an earlier one.
func TestLatencyDoesNotSerialiseConnections(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.addr())
	a := dial(t, p.Addr())
	roundTrip(t, a, []byte("A before latency"))

	p.SetLatency(time.Hour, Downstream)
	if _, err := a.Write([]byte("A held for an hour")); err != nil {
		t.Fatal(err)
	}
	// Wait until the proxy holds A's echo, so it was read under the hour-long latency.
	eventually(t, "the proxy to hold A's echo", func() bool { return p.Stats().Queued == int64(len("A held for an hour")) })
	expectSilent(t, a, 50*time.Millisecond)

	p.SetLatency(0, Both)
	b := dial(t, p.Addr())
	roundTrip(t, b, []byte("B is not stuck behind A"))
	b2 := dial(t, p.Addr())
	roundTrip(t, b2, []byte("nor is a third connection"))

	if _, err := a.Write([]byte("A after the switch")); err != nil {
		t.Fatal(err)
	}
	expectSilent(t, a, 200*time.Millisecond) // must not overtake A's held reply
}

// TestReset drops every open connection, and connections made afterwards work.
func TestReset(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.addr())
	var conns []*net.TCPConn
	for i := range 5 {
		c := dial(t, p.Addr())
		roundTrip(t, c, fmt.Appendf(nil, "conn %d", i))
		conns = append(conns, c)
	}
	p.SetLatency(time.Hour, Downstream) // a reply held in the proxy is dropped too
	if _, err := conns[0].Write([]byte("pending")); err != nil {
		t.Fatal(err)
	}

	p.Reset()
	for _, c := range conns {
		expectDropped(t, c)
	}
	if s := p.Stats(); s.Resets != 5 {
		t.Errorf("Resets = %d after dropping 5 connections (stats %+v)", s.Resets, s)
	}
	eventually(t, "no open connections", func() bool { return p.Stats().Open == 0 })

	p.SetLatency(0, Both)
	roundTrip(t, dial(t, p.Addr()), []byte("a new connection works"))
}

// TestRefuse resets new connections while on, leaves open ones alone, and stops when switched off.
func TestRefuse(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.addr())
	open := dial(t, p.Addr())
	roundTrip(t, open, []byte("before refuse"))

	p.SetRefuse(true)
	for range 3 {
		c, err := net.DialTimeout("tcp", p.Addr(), patience)
		if err != nil {
			continue // refused outright is a failure too
		}
		// The first write may land before the reset arrives; the read must fail.
		_, _ = c.Write([]byte("PING"))
		expectDropped(t, c)
		c.Close()
	}
	if s := p.Stats(); s.Refused != 3 {
		t.Errorf("Refused = %d, want 3 (stats %+v)", s.Refused, s)
	}
	roundTrip(t, open, []byte("an open connection is unaffected"))

	p.SetRefuse(false)
	roundTrip(t, dial(t, p.Addr()), []byte("accepted again"))
}

// TestBlackhole swallows traffic on open and new connections, answers nothing, and on switching off
// drops the connections that lost bytes while an idle one and fresh ones work.
func TestBlackhole(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.addr())
	busy := dial(t, p.Addr())
	idle := dial(t, p.Addr())
	roundTrip(t, busy, []byte("before"))
	roundTrip(t, idle, []byte("before"))

	p.SetBlackhole(true)
	fresh := dial(t, p.Addr()) // accepted, but nothing behind it answers
	for _, c := range []*net.TCPConn{busy, fresh} {
		if _, err := c.Write([]byte("into the void")); err != nil {
			t.Fatal(err)
		}
		expectSilent(t, c, 200*time.Millisecond)
	}
	eventually(t, "the black-hole to swallow both writes", func() bool { return p.Stats().Swallowed >= 2*int64(len("into the void")) })

	p.SetBlackhole(false)
	expectDropped(t, busy)
	expectDropped(t, fresh)
	roundTrip(t, idle, []byte("an idle connection survives"))
	roundTrip(t, dial(t, p.Addr()), []byte("a fresh connection works"))
	if s := p.Stats(); s.Resets != 2 {
		t.Errorf("Resets = %d, want 2 (stats %+v)", s.Resets, s)
	}
}

// TestCloseIdempotentNoLeaks closes a proxy with connections open and in every state, twice, and
// checks every goroutine it started is gone.
func TestCloseIdempotentNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()

	echo := startEcho(t)
	p, err := Start("127.0.0.1:0", echo.addr())
	if err != nil {
		t.Fatal(err)
	}
	var clients []net.Conn
	dialP := func() net.Conn {
		c, err := net.DialTimeout("tcp", p.Addr(), patience)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		return c
	}
	for range 4 {
		roundTrip(t, dialP(), []byte("plain"))
	}
	p.SetLatency(time.Hour, Both)
	for range 2 {
		if _, err := dialP().Write([]byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	p.SetLatency(0, Both)
	p.SetBlackhole(true)
	for range 2 {
		if _, err := dialP().Write([]byte("swallowed")); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "all connections accepted", func() bool { return p.Stats().Accepted == 8 })

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, c := range clients {
		expectDropped(t, c)
		c.Close()
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), patience); err == nil {
		t.Error("the proxy still accepts connections after Close")
	}
	// Switches after Close are harmless.
	p.Reset()
	p.SetBlackhole(false)
	echo.close()

	if after := settledGoroutines(before); after > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// TestLoopbackOnly refuses listen and upstream addresses that are not loopback.
func TestLoopbackOnly(t *testing.T) {
	for _, tc := range []struct{ listen, upstream string }{
		{"0.0.0.0:0", "127.0.0.1:5432"},
		{":0", "127.0.0.1:5432"},
		{"[::]:0", "127.0.0.1:5432"},
		{"192.0.2.1:0", "127.0.0.1:5432"},
		{"127.0.0.1:0", "192.0.2.1:5432"},
		{"127.0.0.1:0", "example.com:5432"},
		{"127.0.0.1:0", ":5432"},
		{"127.0.0.1:0", "no-port"},
	} {
		p, err := Start(tc.listen, tc.upstream)
		if err == nil {
			p.Close()
			t.Errorf("Start(%q, %q) succeeded; want a refusal", tc.listen, tc.upstream)
		} else if !strings.Contains(err.Error(), "faultproxy") {
			t.Errorf("Start(%q, %q): error %q does not say where it came from", tc.listen, tc.upstream, err)
		}
	}
	p, err := Start("localhost:0", "127.0.0.1:1")
	if err != nil {
		t.Fatalf("Start on localhost: %v", err)
	}
	p.Close()
}

// TestDialFailureResetsClient: with nothing listening upstream, a client is reset, not left hanging.
func TestDialFailureResetsClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := startProxy(t, dead)
	// The reset may even beat the end of the client's connect.
	if c, err := net.DialTimeout("tcp", p.Addr(), patience); err == nil {
		expectDropped(t, c)
		c.Close()
	}
	if s := p.Stats(); s.DialFailures != 1 {
		t.Errorf("DialFailures = %d, want 1", s.DialFailures)
	}
}

// TestPipeBackPressure: a push waits while the pipe holds its bound, and proceeds once the writer
// has delivered and removed the head; close releases both ends.
func TestPipeBackPressure(t *testing.T) {
	var held atomic.Int64
	pp := newPipe(1000, &held)
	if !pp.push(chunk{data: make([]byte, 900)}) {
		t.Fatal("push into an empty pipe failed")
	}
	pushed := make(chan bool)
	go func() { pushed <- pp.push(chunk{data: make([]byte, 100)}) }()
	select {
	case <-pushed:
		t.Fatal("push went over the bound instead of waiting")
	case <-time.After(50 * time.Millisecond):
	}
	if held.Load() != 900 {
		t.Fatalf("held = %d, want 900", held.Load())
	}
	if c, ok := pp.peek(); !ok || len(c.data) != 900 {
		t.Fatalf("peek = %d bytes, %v", len(c.data), ok)
	}
	select { // a chunk being delivered still counts against the bound
	case <-pushed:
		t.Fatal("push went over the bound while the head was only peeked")
	case <-time.After(50 * time.Millisecond):
	}
	pp.next()
	select {
	case ok := <-pushed:
		if !ok {
			t.Fatal("push reported a closed pipe")
		}
	case <-time.After(patience):
		t.Fatal("push still blocked after next made room")
	}
	// A chunk bigger than the bound still goes into an empty pipe.
	if c, ok := pp.peek(); !ok || len(c.data) != 100 {
		t.Fatalf("peek = %d bytes, %v", len(c.data), ok)
	}
	pp.next()
	if !pp.push(chunk{data: make([]byte, 5000)}) {
		t.Fatal("oversized push into an empty pipe failed")
	}
	go func() { pushed <- pp.push(chunk{data: []byte("x")}) }()
	popped := make(chan bool)
	pp.close()
	go func() { _, ok := pp.peek(); popped <- ok }()
	if <-pushed || <-popped {
		t.Fatal("push or peek succeeded on a closed pipe")
	}
	if held.Load() != 0 {
		t.Fatalf("held = %d after close, want 0", held.Load())
	}
}
