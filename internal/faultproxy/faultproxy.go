// Package faultproxy is a loopback TCP proxy that injects network faults between strata and a real
// server (PostgreSQL, Redis) for the chaos benchmark and tests. It listens on a loopback address,
// forwards every accepted connection to a loopback upstream, and can be switched while running:
//
//   - SetLatency delays the bytes flowing in one or both directions by a fixed one-way latency,
//     per connection, preserving order and without one connection's delay holding up another;
//   - Reset drops every open connection with a TCP RST, and SetRefuse resets new ones on arrival;
//   - SetBlackhole swallows everything in both directions, as a partition would, until switched off;
//   - with nothing set it passes bytes straight through.
//
// Every switch applies to connections already open as well as to new ones. The proxy never panics on
// a network error and logs nothing unless given a logger (WithLogger).
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stratalog/strata/internal/backoff"
)

// Direction names which way the bytes a fault applies to are flowing.
type Direction int

const (
	// Downstream is server→client: every reply is delayed. It is the zero value.
	Downstream Direction = iota
	// Upstream is client→server: every request is delayed.
	Upstream
	// Both delays each way, so a round trip takes twice the latency.
	Both
)

func (d Direction) String() string {
	switch d {
	case Downstream:
		return "downstream"
	case Upstream:
		return "upstream"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// covers reports whether d includes x, which is Upstream or Downstream.
func (d Direction) covers(x Direction) bool { return d == Both || d == x }

const (
	readSize         = 32 << 10
	defaultMaxQueued = 1 << 20
	dialTimeout      = 10 * time.Second
)

// Option configures a Proxy at Start.
type Option func(*config)

type config struct {
	logger    *slog.Logger
	maxQueued int
}

// WithLogger sends the proxy's diagnostics (failed dials, accept errors) to l at debug level. By
// default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithMaxQueued bounds the bytes held in the proxy per connection and direction (default 1 MiB;
// values below 64 KiB are raised to it). When the bound is reached the proxy stops reading from that
// sender, so TCP flow control pushes back on it. Under latency L a connection's throughput in one
// direction is therefore at most n/L, as over a real link with a window of n bytes.
func WithMaxQueued(n int) Option {
	return func(c *config) { c.maxQueued = max(n, 64<<10) }
}

// Stats counts what the proxy has done since Start.
type Stats struct {
	Accepted     int64 // connections accepted by the listener, refused ones included
	Open         int64 // connections currently open through the proxy
	Refused      int64 // connections reset on arrival because SetRefuse was on
	Resets       int64 // open connections dropped on purpose: by Reset, or on leaving the black-hole
	DialFailures int64 // accepted connections whose upstream dial failed (the client was reset)
	BytesUp      int64 // client→server bytes delivered
	BytesDown    int64 // server→client bytes delivered
	Swallowed    int64 // bytes, either way, discarded by the black-hole
	Queued       int64 // bytes read and waiting in the proxy for their delivery time, either way
}

// Proxy is a running fault-injection proxy. Its methods are safe for concurrent use.
type Proxy struct {
	cfg      config
	ln       *net.TCPListener
	upstream string
	dialer   net.Dialer
	ctx      context.Context
	cancel   context.CancelFunc

	latency [2]atomic.Int64 // nanoseconds, indexed by Downstream and Upstream

	// modeMu orders the black-hole and refuse switches against the connections that observe them:
	// a connection that swallows a byte marks itself under the read lock, so switching the
	// black-hole off (under the write lock) can never miss it.
	modeMu    sync.RWMutex
	refuse    bool
	blackhole bool

	mu       sync.Mutex
	conns    map[*conn]struct{}
	closed   bool
	resetGen uint64 // incremented by Reset, so connections still dialing see they were dropped

	wg        sync.WaitGroup // the accept loop and every connection handler
	closeOnce sync.Once
	closeErr  error

	stats struct {
		accepted, refused, resets, dialFailures, swallowed, queued atomic.Int64
		bytes                                                      [2]atomic.Int64 // by Direction
	}
}

// Start listens on listen and forwards each accepted connection to upstream. Both must be loopback
// addresses ("127.0.0.1:0" picks a free port; "localhost" is accepted and checked once resolved);
// anything else is refused. upstream need not be reachable yet: it is dialed per connection, and a
// connection whose dial fails is reset.
func Start(listen, upstream string, opts ...Option) (*Proxy, error) {
	if err := checkLoopback("listen", listen); err != nil {
		return nil, err
	}
	if err := checkLoopback("upstream", upstream); err != nil {
		return nil, err
	}
	cfg := config{logger: slog.New(slog.DiscardHandler), maxQueued: defaultMaxQueued}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lc := net.ListenConfig{Control: loopbackOnly}
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("faultproxy: listen %s: %w", listen, err)
	}
	p := &Proxy{
		cfg:      cfg,
		ln:       ln.(*net.TCPListener),
		upstream: upstream,
		dialer:   net.Dialer{Timeout: dialTimeout, Control: loopbackOnly},
		ctx:      ctx,
		cancel:   cancel,
		conns:    make(map[*conn]struct{}),
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// checkLoopback refuses an address whose host is not a loopback IP or "localhost", without any
// name lookup. loopbackOnly then checks the address actually bound or dialed.
func checkLoopback(what, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("faultproxy: %s address %q: %w", what, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("faultproxy: %s address %q is not loopback; the proxy only ever touches loopback", what, addr)
	}
	return nil
}

// loopbackOnly is a socket Control hook refusing any resolved address that is not loopback.
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("faultproxy: %s is not a loopback address", address)
	}
	return nil
}

// Addr returns the address the proxy listens on, for clients to dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns the address connections are forwarded to.
func (p *Proxy) Upstream() string { return p.upstream }

// SetLatency delays the bytes flowing in dir by d (one way), and clears any latency in the other
// direction: each call describes the whole latency setting, and SetLatency(0, Both) turns it off.
// It takes effect at once on open connections, for bytes the proxy reads from then on; bytes
// already queued keep the delivery time they were given, and a connection's bytes are never
// reordered, so after lowering the latency new bytes wait behind older, later-due ones. A half-close
// or reset from one side is delayed like the bytes before it. A negative d counts as zero; a dir
// other than Downstream, Upstream or Both delays nothing.
func (p *Proxy) SetLatency(d time.Duration, dir Direction) {
	d = max(d, 0)
	for _, x := range []Direction{Downstream, Upstream} {
		v := time.Duration(0)
		if dir.covers(x) {
			v = d
		}
		p.latency[x].Store(int64(v))
	}
}

// Latency returns the current one-way latency of each direction.
func (p *Proxy) Latency() (down, up time.Duration) {
	return time.Duration(p.latency[Downstream].Load()), time.Duration(p.latency[Upstream].Load())
}

// Reset drops every open connection now, client and server side, with a TCP RST where the platform
// allows (SO_LINGER 0). Connections still being dialed are dropped too. New connections are
// unaffected unless SetRefuse is on.
func (p *Proxy) Reset() {
	p.mu.Lock()
	p.resetGen++
	victims := p.snapshotLocked(nil)
	p.mu.Unlock()
	p.abortAll(victims)
}

// SetRefuse, while on, resets every new connection as soon as it is accepted (the client's connect
// may succeed, but its first read or write fails). Open connections are unaffected; call Reset as
// well to drop them.
func (p *Proxy) SetRefuse(on bool) {
	p.modeMu.Lock()
	p.refuse = on
	p.modeMu.Unlock()
}

// SetBlackhole, while on, stops forwarding in both directions: everything read from either side,
// on open and new connections alike, is discarded and nothing answers; new connections are accepted
// but no upstream is dialed. Switching it off resets every connection that lost bytes or was opened
// meanwhile, since its stream can no longer be trusted; connections that stayed idle throughout
// carry on.
func (p *Proxy) SetBlackhole(on bool) {
	p.modeMu.Lock()
	was := p.blackhole
	p.blackhole = on
	var victims []*conn
	if was && !on {
		p.mu.Lock()
		victims = p.snapshotLocked(func(c *conn) bool { return c.holed.Load() })
		p.mu.Unlock()
	}
	p.modeMu.Unlock()
	p.abortAll(victims)
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := int64(len(p.conns))
	p.mu.Unlock()
	return Stats{
		Accepted:     p.stats.accepted.Load(),
		Open:         open,
		Refused:      p.stats.refused.Load(),
		Resets:       p.stats.resets.Load(),
		DialFailures: p.stats.dialFailures.Load(),
		BytesUp:      p.stats.bytes[Upstream].Load(),
		BytesDown:    p.stats.bytes[Downstream].Load(),
		Swallowed:    p.stats.swallowed.Load(),
		Queued:       p.stats.queued.Load(),
	}
}

// Close stops listening, drops every connection (with a reset) and waits for all of the proxy's
// goroutines to finish. It is idempotent: later calls wait for the first and return its result.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		conns := p.snapshotLocked(nil)
		p.mu.Unlock()
		p.closeErr = p.ln.Close()
		p.cancel()
		for _, c := range conns {
			c.abort()
		}
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) snapshotLocked(keep func(*conn) bool) []*conn {
	out := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		if keep == nil || keep(c) {
			out = append(out, c)
		}
	}
	return out
}

func (p *Proxy) abortAll(conns []*conn) {
	for _, c := range conns {
		if c.abort() {
			p.stats.resets.Add(1)
		}
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	pauses := backoff.Policy{Initial: 5 * time.Millisecond, Max: time.Second, Multiplier: 2}
	failures := 0
	for {
		nc, err := p.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return
			}
			// Out of descriptors or similar: wait and retry, as net/http does.
			failures++
			pause := pauses.Delay(failures)
			p.cfg.logger.Debug("faultproxy: accept failed", "addr", p.Addr(), "err", err, "retry_in", pause)
			if backoff.Wait(p.ctx, pause) != nil {
				return
			}
			continue
		}
		failures = 0
		p.stats.accepted.Add(1)
		p.wg.Add(1)
		go p.handle(nc)
	}
}

// handle runs one accepted connection to its end.
func (p *Proxy) handle(client *net.TCPConn) {
	defer p.wg.Done()
	p.mu.Lock()
	gen := p.resetGen
	p.mu.Unlock()

	p.modeMu.RLock()
	if p.refuse {
		p.modeMu.RUnlock()
		p.stats.refused.Add(1)
		resetConn(client)
		return
	}
	if p.blackhole {
		c := p.newConn(client, nil)
		c.holed.Store(true)
		ok := p.register(c, gen)
		p.modeMu.RUnlock()
		if ok {
			c.sink()
			p.unregister(c)
		}
		return
	}
	p.modeMu.RUnlock()

	nc, err := p.dialer.DialContext(p.ctx, "tcp", p.upstream)
	if err != nil {
		if p.ctx.Err() == nil {
			p.stats.dialFailures.Add(1)
		}
		p.cfg.logger.Debug("faultproxy: upstream dial failed", "upstream", p.upstream, "err", err)
		resetConn(client)
		return
	}
	c := p.newConn(client, nc.(*net.TCPConn))
	if !p.register(c, gen) {
		return
	}
	c.run()
	p.unregister(c)
}

// register adds c to the open connections, unless the proxy closed or was Reset since c was
// accepted, in which case c is dropped and register reports false.
func (p *Proxy) register(c *conn, gen uint64) bool {
	p.mu.Lock()
	closed, reset := p.closed, p.resetGen != gen
	if !closed && !reset {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if closed || reset {
		if c.abort() && reset && !closed {
			p.stats.resets.Add(1)
		}
		return false
	}
	return true
}

func (p *Proxy) unregister(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// swallow reports whether the black-hole is on, in which case n bytes (or an end of stream, n = 0)
// just read or due for delivery on c are discarded and c is marked as having lost them.
func (p *Proxy) swallow(c *conn, n int) bool {
	p.modeMu.RLock()
	defer p.modeMu.RUnlock()
	if !p.blackhole {
		return false
	}
	c.holed.Store(true)
	p.stats.swallowed.Add(int64(n))
	return true
}

// conn is one proxied connection: a reader and a writer goroutine per direction, joined by a bounded
// pipe that holds each chunk until its delivery time.
type conn struct {
	p      *Proxy
	client *net.TCPConn
	server *net.TCPConn // nil for a connection accepted during the black-hole
	pipes  [2]*pipe     // indexed by Direction: Downstream carries server→client
	holed  atomic.Bool  // lost bytes to the black-hole, or was opened inside it
	done   chan struct{}
	once   sync.Once // ends the connection, by abort or by an orderly close
}

func (p *Proxy) newConn(client, server *net.TCPConn) *conn {
	return &conn{
		p:      p,
		client: client,
		server: server,
		pipes:  [2]*pipe{newPipe(p.cfg.maxQueued, &p.stats.queued), newPipe(p.cfg.maxQueued, &p.stats.queued)},
		done:   make(chan struct{}),
	}
}

// run forwards both directions until each has ended (EOF forwarded as a half-close) or the
// connection is aborted, then closes both sockets.
func (c *conn) run() {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.read(c.client, Upstream) }()
	go func() { defer wg.Done(); c.write(c.server, Upstream) }()
	go func() { defer wg.Done(); c.read(c.server, Downstream) }()
	c.write(c.client, Downstream)
	wg.Wait()
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.server.Close()
	})
}

// sink holds a connection accepted during the black-hole: it reads and discards until the
// connection is dropped (leaving the black-hole, Reset, Close) or the client resets it.
func (c *conn) sink() {
	buf := make([]byte, readSize)
	for {
		n, err := c.client.Read(buf)
		c.p.stats.swallowed.Add(int64(n))
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.abort()
			}
			<-c.done
			return
		}
	}
}

// read moves what src sends into the pipe for dir, stamping each chunk with its delivery time.
func (c *conn) read(src *net.TCPConn, dir Direction) {
	pp := c.pipes[dir]
	buf := make([]byte, readSize)
	for {
		n, err := src.Read(buf)
		now := time.Now()
		if n > 0 && !c.p.swallow(c, n) {
			data := make([]byte, n)
			copy(data, buf[:n])
			if !pp.push(chunk{kind: kindData, data: data, due: c.due(now, dir)}) {
				return
			}
		}
		if err != nil {
			if c.p.swallow(c, 0) {
				return // the black-hole swallows the end of stream too
			}
			kind := kindEOF
			if !errors.Is(err, io.EOF) {
				kind = kindReset
			}
			pp.push(chunk{kind: kind, due: c.due(now, dir)})
			return
		}
	}
}

func (c *conn) due(readAt time.Time, dir Direction) time.Time {
	return readAt.Add(time.Duration(c.p.latency[dir].Load()))
}

// write delivers the pipe for dir to dst, each chunk no earlier than its delivery time.
func (c *conn) write(dst *net.TCPConn, dir Direction) {
	pp := c.pipes[dir]
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch, ok := pp.peek()
		if !ok {
			return
		}
		if wait := time.Until(ch.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-c.done:
				return
			}
		}
		if c.p.swallow(c, len(ch.data)) {
			if ch.kind != kindData {
				return
			}
			pp.next()
			continue
		}
		switch ch.kind {
		case kindData:
			n, err := dst.Write(ch.data)
			c.p.stats.bytes[dir].Add(int64(n))
			if err != nil {
				c.abort()
				return
			}
			pp.next()
		case kindEOF:
			if err := dst.CloseWrite(); err != nil {
				c.abort()
			}
			return
		default: // kindReset: the source failed, so fail the whole connection
			c.abort()
			return
		}
	}
}

// abort drops the connection with resets on both sides; it reports whether this call did it.
func (c *conn) abort() bool {
	did := false
	c.once.Do(func() {
		did = true
		close(c.done)
		for _, pp := range c.pipes {
			pp.close()
		}
		resetConn(c.client)
		if c.server != nil {
			resetConn(c.server)
		}
	})
	return did
}

// resetConn closes c so that the peer sees a RST rather than a FIN.
func resetConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}
