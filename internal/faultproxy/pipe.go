package faultproxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// chunkOverhead is what each queued chunk is charged beyond its payload, so that a stream of tiny
// reads is bounded by count as well as by bytes.
const chunkOverhead = 64

type chunkKind uint8

const (
	kindData  chunkKind = iota
	kindEOF             // the source half-closed: forward a FIN (CloseWrite)
	kindReset           // the source failed: drop the whole connection
)

// chunk is one read from a source, stamped with the time it may be delivered.
type chunk struct {
	kind chunkKind
	data []byte
	due  time.Time
}

func (c chunk) cost() int { return len(c.data) + chunkOverhead }

// pipe is the bounded FIFO between one direction's reader and writer. A push blocks while the queued
// bytes would exceed max (unless the queue is empty, so a single chunk always fits), which stops the
// reader and lets TCP flow control push back on the sender. close wakes both ends for good and
// discards whatever is queued.
type pipe struct {
	mu     sync.Mutex
	cond   sync.Cond
	q      []chunk
	bytes  int
	max    int
	closed bool
	held   *atomic.Int64 // payload bytes queued, summed over the proxy's pipes
}

func newPipe(max int, held *atomic.Int64) *pipe {
	p := &pipe{max: max, held: held}
	p.cond.L = &p.mu
	return p
}

// push queues c, waiting for room; it reports false if the pipe was closed.
func (p *pipe) push(c chunk) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && len(p.q) > 0 && p.bytes+c.cost() > p.max {
		p.cond.Wait()
	}
	if p.closed {
		return false
	}
	p.q = append(p.q, c)
	p.bytes += c.cost()
	p.held.Add(int64(len(c.data)))
	p.cond.Broadcast()
	return true
}

// peek returns the oldest chunk without removing it, waiting for one; it reports false once the
// pipe is closed. The chunk stays queued, and counted against the bound, until next removes it after
// delivery: a chunk waiting out its latency in the writer's hands is still held by the proxy.
func (p *pipe) peek() (chunk, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && len(p.q) == 0 {
		p.cond.Wait()
	}
	if p.closed {
		return chunk{}, false
	}
	return p.q[0], true
}

// next removes the chunk peek returned. It is a no-op on a closed pipe.
func (p *pipe) next() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.q) == 0 {
		return
	}
	c := p.q[0]
	p.q[0] = chunk{}
	p.q = p.q[1:]
	p.bytes -= c.cost()
	p.held.Add(-int64(len(c.data)))
	p.cond.Broadcast()
}

func (p *pipe) close() {
	p.mu.Lock()
	for _, c := range p.q {
		p.held.Add(-int64(len(c.data)))
	}
	p.closed = true
	p.q = nil
	p.bytes = 0
	p.cond.Broadcast()
	p.mu.Unlock()
}
