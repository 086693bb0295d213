// Package s3local is an S3-protocol server on loopback for tests and CI: gofakes3 on an in-memory
// backend, served over plain HTTP. It accepts any credentials and keeps nothing on disk. Nothing in
// the library or the sidecar imports it; tests start it in process (Start) and CI runs its command,
// internal/s3local/cmd/s3local, from .ci/services.d/s3.sh.
package s3local

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is a running S3-protocol server.
type Server struct {
	requests requestCounts
	backend  *s3mem.Backend
	srv      *http.Server
	ln       net.Listener
	done     chan error
}

// Handler returns the S3 API on a fresh in-memory backend with buckets created, and the backend (to
// create more buckets). With autoBucket, a request to a bucket that does not exist creates it, so each
// test can use a bucket of its own without a CreateBucket call.
func Handler(autoBucket bool, buckets ...string) (http.Handler, *s3mem.Backend, error) {
	backend := s3mem.New()
	for _, b := range buckets {
		if err := backend.CreateBucket(b); err != nil {
			return nil, nil, fmt.Errorf("s3local: create bucket %q: %w", b, err)
		}
	}
	var served gofakes3.Backend = backend
	if autoBucket {
		served = autoBuckets{backend}
	}
	// No time-skew limit: the tests' clock is the server's clock, and a slow CI host must not turn
	// signed requests into RequestTimeTooSkewed.
	faker := gofakes3.New(served, gofakes3.WithTimeSkewLimit(0))
	return faker.Server(), backend, nil
}

// autoBuckets is the backend with every bucket a request names made on first use, in one step.
// gofakes3's own WithAutoBucket checks and then creates, so of two first requests racing to a new bucket
// the loser's create failed and it answered NoSuchBucket (a batch's first list and first put go out
// together). Here a bucket that a racing request made first counts as made.
type autoBuckets struct{ *s3mem.Backend }

func (b autoBuckets) BucketExists(name string) (bool, error) {
	if ok, err := b.Backend.BucketExists(name); ok || err != nil {
		return ok, err
	}
	if err := b.Backend.CreateBucket(name); err != nil && !gofakes3.HasErrorCode(err, gofakes3.ErrBucketAlreadyExists) {
		return false, err
	}
	return true, nil
}

// Start serves the S3 API on addr (host:port; port 0 picks one), which must be a loopback address.
func Start(addr string, autoBucket bool, buckets ...string) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("s3local: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("s3local: %q is not a loopback address", host)
	}
	h, backend, err := Handler(autoBucket, buckets...)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("s3local: %w", err)
	}
	s := &Server{backend: backend, ln: ln, done: make(chan error, 1)}
	s.srv = &http.Server{Handler: s.requests.counting(h), ReadHeaderTimeout: 30 * time.Second}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// Endpoint is the server's base URL, http://127.0.0.1:PORT.
func (s *Server) Endpoint() string { return "http://" + s.ln.Addr().String() }

// Backend is the in-memory store behind the server.
func (s *Server) Backend() *s3mem.Backend { return s.backend }

// BucketURL is a blob store URL (for backends.OpenBlob and config blob.url) naming bucket on this
// server, with prefix (may be empty) as its key prefix.
func (s *Server) BucketURL(bucket, prefix string) string {
	return BucketURL(s.Endpoint(), bucket, prefix)
}

// BucketURL is the s3:// URL of bucket/prefix on the S3-protocol server at endpoint, with what a
// local server needs: the endpoint, a region, path-style addressing.
func BucketURL(endpoint, bucket, prefix string) string {
	q := url.Values{}
	q.Set("endpoint", endpoint)
	q.Set("region", "us-east-1")
	q.Set("use_path_style", "true")
	u := url.URL{Scheme: "s3", Host: bucket, RawQuery: q.Encode()}
	if prefix != "" {
		u.Path = "/" + prefix
	}
	return u.String()
}

// Wait blocks until the server stops and returns why.
func (s *Server) Wait() error { return <-s.done }

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Requests returns how many requests of each kind the server has answered: "PUT" (an object upload),
// "GET" (an object read, whole or ranged), "LIST" (a GET of a bucket), "HEAD", "DELETE", "POST" and
// "OTHER". A benchmark counts what reached the server this way, not what a client says it sent.
func (s *Server) Requests() map[string]int64 { return s.requests.snapshot() }

type requestCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *requestCounts) counting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := r.Method
		// Path style: /bucket or /bucket/ is the bucket, /bucket/key an object.
		if _, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/"); r.Method == http.MethodGet && key == "" {
			kind = "LIST"
		}
		switch kind {
		case "LIST", http.MethodGet, http.MethodPut, http.MethodHead, http.MethodDelete, http.MethodPost:
		default:
			kind = "OTHER"
		}
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int64{}
		}
		c.n[kind]++
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (c *requestCounts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}
