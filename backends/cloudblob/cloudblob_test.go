//go:build !strata_nos3

package cloudblob_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/archive/blobtest"
	"github.com/stratalog/strata/backends/cloudblob"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/s3local"
	"github.com/stratalog/strata/internal/testenv"
)

func open(tb testing.TB, rawURL string) *cloudblob.Store {
	tb.Helper()
	s, err := cloudblob.Open(tb.Context(), rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformanceMem(t *testing.T) {
	blobtest.Run(t, func(tb testing.TB) archive.BlobStore { return open(tb, "mem://") })
}

// TestGocloudFileblobCannotHoldLongSegments is why file:/// is fsblob's, not gocloud's fileblob: a
// segment of archive.MaxSegmentLen bytes, which every store must hold, does not fit its temporary
// file's name. If this ever goes red, folding fsblob into fileblob is worth another look.
func TestGocloudFileblobCannotHoldLongSegments(t *testing.T) {
	bucket, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{NoTempDir: true, Metadata: fileblob.MetadataDontWrite})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cloudblob.New(t.Context(), bucket, &cloudblob.Options{Name: "fileblob"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := "a/" + strings.Repeat("x", archive.MaxSegmentLen)
	if err := s.Put(t.Context(), p, []byte("long")); err == nil {
		t.Fatalf("fileblob stored a %d-byte segment: see whether it now passes blobtest", archive.MaxSegmentLen)
	}
}

// startS3 serves the S3 API in process on 127.0.0.1, each bucket created on first use.
func startS3(tb testing.TB) *s3local.Server {
	tb.Helper()
	testenv.S3LocalEnv()
	srv, err := s3local.Start("127.0.0.1:0", true)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	return srv
}

var buckets atomic.Int64

// TestConformanceS3 runs the suite over the S3 protocol against the in-process server, each store in
// a bucket of its own.
func TestConformanceS3(t *testing.T) {
	srv := startS3(t)
	blobtest.Run(t, func(tb testing.TB) archive.BlobStore {
		return open(tb, srv.BucketURL(fmt.Sprintf("conformance-%d", buckets.Add(1)), ""))
	})
}

// TestConformanceS3External runs the suite against the server STRATA_TEST_S3_URL names, as CI starts
// it, each store under a key prefix of its own that is emptied when the test ends.
func TestConformanceS3External(t *testing.T) {
	raw := testenv.S3URL(t)
	blobtest.Run(t, func(tb testing.TB) archive.BlobStore { return open(tb, prefixed(tb, raw)) })
}

// prefixed returns raw with a key prefix of the test's own, whose objects are deleted at the end.
func prefixed(tb testing.TB, raw string) string {
	tb.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatal(err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + testenv.UniqueName("strata-test-")
	tb.Cleanup(func() {
		s, err := cloudblob.Open(tb.Context(), u.String())
		if err != nil {
			tb.Error(err)
			return
		}
		defer s.Close()
		ctx, cancel := testenv.Context()
		defer cancel()
		paths, err := s.List(ctx, "")
		if err != nil {
			tb.Errorf("clean up %s: %v", u.Path, err)
		}
		for _, p := range paths {
			if err := s.Delete(ctx, p); err != nil {
				tb.Errorf("clean up %s: %v", p, err)
			}
		}
	})
	return u.String()
}

// TestPathIsTheObjectKey checks a blob's object key in the bucket is the URL's prefix and the blob
// path, as they are, and that the prefix confines List.
func TestPathIsTheObjectKey(t *testing.T) {
	srv := startS3(t)
	s := open(t, srv.BucketURL("keys", "strata/prod"))
	other := open(t, srv.BucketURL("keys", "strata/other"))
	whole := open(t, srv.BucketURL("keys", ""))
	ctx := t.Context()
	path := "ephemeral/0/" + archive.PathSegment("shop") + "/" + archive.PathSegment("cart/1 ü") + "/00000000000000000007"
	if err := s.Put(ctx, path, []byte("chunk")); err != nil {
		t.Fatal(err)
	}
	if err := other.Put(ctx, "x/1", []byte("other")); err != nil {
		t.Fatal(err)
	}
	got, err := whole.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"strata/other/x/1", "strata/prod/" + path}; !slices.Equal(got, want) {
		t.Fatalf("bucket holds %q, want %q", got, want)
	}
	if got, err := s.List(ctx, ""); err != nil || !slices.Equal(got, []string{path}) {
		t.Fatalf("List under the prefix: %q %v", got, err)
	}
	// The object is there for any S3 client, under that key.
	obj, ok := srv.Backend().HeadObject("keys", "strata/prod/"+path)
	if ok != nil || obj == nil || obj.Size != 5 {
		t.Fatalf("HeadObject through the backend: %+v %v", obj, ok)
	}
}

func TestOpenRejects(t *testing.T) {
	for _, raw := range []string{
		"s3://",                                // no bucket
		"s3://b/a/../c",                        // a prefix that climbs
		"s3://b/.hidden",                       // a prefix segment starting with '.'
		"s3://b?no_such_parameter=1",           // gocloud rejects unknown parameters
		"file://",                              // no directory
		"file://host/dir",                      // a host
		"ftp://b",                              // not a scheme of ours
		"s3://b?region=x&use_path_style=maybe", // a bad value
	} {
		if s, err := cloudblob.Open(t.Context(), raw); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", raw)
		}
	}
}

func TestOpenErrorsHideSecrets(t *testing.T) {
	for _, raw := range []string{
		"azblob://c?sas_token=SECRET1&bogus=1",
		"s3://b?bogus=1&aws_secret_access_key=SECRET2",
		"s3://user:SECRET3@b?bogus=1",
	} {
		_, err := cloudblob.Open(t.Context(), raw)
		if err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("Open(%q): the error shows a secret: %v", raw, err)
		}
	}
}

// TestErrorsAreClassified: a missing blob is ErrBlobNotFound; a 5xx, throttling and a refused
// connection are transient; permission denied and a missing bucket are permanent.
func TestErrorsAreClassified(t *testing.T) {
	ctx := t.Context()
	testenv.S3LocalEnv()
	srv := startS3(t)
	s := open(t, srv.BucketURL("present", ""))
	if _, err := s.Get(ctx, "no/such"); !errors.Is(err, archive.ErrBlobNotFound) {
		t.Fatalf("Get of a missing blob: %v", err)
	}

	// A bucket that does not exist, on a server that does not create buckets.
	strict, err := s3local.Start("127.0.0.1:0", false, "present")
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	missing := open(t, strict.BucketURL("absent", ""))
	if err := missing.Put(ctx, "a/b", []byte("x")); err == nil || is.IsTransient(err) {
		t.Fatalf("Put to a missing bucket: %v, want a permanent error", err)
	}
	if _, err := missing.List(ctx, ""); err == nil || is.IsTransient(err) {
		t.Fatalf("List of a missing bucket: %v, want a permanent error", err)
	}

	for _, tc := range []struct {
		status    int
		code      string
		transient bool
	}{
		{http.StatusServiceUnavailable, "SlowDown", true},
		{http.StatusInternalServerError, "InternalError", true},
		{http.StatusTooManyRequests, "TooManyRequests", true},
		{http.StatusForbidden, "AccessDenied", false},
	} {
		var calls atomic.Int64
		fail := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(tc.status)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>m</Message></Error>`, tc.code)
		}))
		// The first case goes through the URL, as configured, the SDK's three attempts and their
		// backoff included (ten seconds: the long run only); the others use a client that does not
		// retry, to keep the test short.
		var st *cloudblob.Store
		if tc.code == "SlowDown" && testenv.Long() {
			st = open(t, s3local.BucketURL(fail.URL, "b", ""))
		} else {
			st = noRetryStore(t, fail.URL)
		}
		for name, err := range map[string]error{
			"put":       st.Put(ctx, "a/b", []byte("x")),
			"list":      func() error { _, err := st.List(ctx, ""); return err }(),
			"get":       func() error { _, err := st.Get(ctx, "a/b"); return err }(),
			"get_range": func() error { _, err := st.GetRange(ctx, "a/b", 1, 2); return err }(),
		} {
			if err == nil || is.IsTransient(err) != tc.transient || errors.Is(err, archive.ErrBlobNotFound) {
				t.Errorf("%s answered %d %s: %v, want transient=%v", name, tc.status, tc.code, err, tc.transient)
			}
		}
		fail.Close()
		if calls.Load() == 0 {
			t.Fatalf("the failing server was never called")
		}
	}

	// Nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	down := noRetryStore(t, "http://"+addr)
	if err := down.Put(ctx, "a/b", []byte("x")); !is.IsTransient(err) {
		t.Fatalf("Put with nothing listening: %v, want transient", err)
	}
}

func TestClosedStoreFails(t *testing.T) {
	s, err := cloudblob.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "a", nil); !errors.Is(err, is.ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// noRetryStore is a store on bucket b at endpoint whose S3 client makes one attempt per call.
func noRetryStore(t *testing.T, endpoint string) *cloudblob.Store {
	t.Helper()
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("strata-test", "strata-test-secret", ""),
		Retryer:      aws.NopRetryer{},
	})
	bucket, err := s3blob.OpenBucket(t.Context(), client, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cloudblob.New(t.Context(), bucket, &cloudblob.Options{Name: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestGetRangeIsOneRangedGET: a range is read with one GET carrying its Range header, and no LIST or
// HEAD (issue 23: at most one GET per segment a read touches); a length of 0 is one HEAD.
func TestGetRangeIsOneRangedGET(t *testing.T) {
	h, _, err := s3local.Handler(true)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, strings.Join(strings.Fields(r.Method+" "+r.URL.Query().Get("list-type")+" "+r.Header.Get("Range")), " "))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	s := noRetryStore(t, srv.URL)
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i)
	}
	if err := s.Put(t.Context(), "seg/a", data); err != nil {
		t.Fatal(err)
	}
	requests := func(f func()) []string {
		mu.Lock()
		seen = nil
		mu.Unlock()
		f()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	got := requests(func() {
		if b, err := s.GetRange(t.Context(), "seg/a", 100, 50); err != nil || !slices.Equal(b, data[100:150]) {
			t.Fatalf("GetRange(100, 50): %d bytes, %v", len(b), err)
		}
	})
	if want := []string{"GET bytes=100-149"}; !slices.Equal(got, want) {
		t.Fatalf("GetRange(100, 50) made requests %q, want %q", got, want)
	}
	got = requests(func() {
		if b, err := s.GetRange(t.Context(), "seg/a", 1000, 0); err != nil || len(b) != 0 {
			t.Fatalf("GetRange(1000, 0): %q, %v", b, err)
		}
	})
	if want := []string{"HEAD"}; !slices.Equal(got, want) {
		t.Fatalf("GetRange(1000, 0) made requests %q, want %q", got, want)
	}
}

// TestGetRangeCutBodyIsTransient: a body that ends before the range does, from an object long enough
// to hold it, is the connection's failure, which a retry may cure: transient, not ErrBlobTooShort.
func TestGetRangeCutBodyIsTransient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Range", "bytes 100-149/1000")
		w.Header().Set("Content-Length", "50")
		w.WriteHeader(http.StatusPartialContent)
		w.Write(make([]byte, 10)) // and the server closes the connection: it declared 50
	}))
	defer srv.Close()
	s := noRetryStore(t, srv.URL)
	_, err := s.GetRange(t.Context(), "seg/a", 100, 50)
	if !is.IsTransient(err) || errors.Is(err, archive.ErrBlobTooShort) {
		t.Fatalf("GetRange of a cut body: %v, want transient and not ErrBlobTooShort", err)
	}
}

// TestGetRangeIgnoredRangeFails: a server that answers a ranged GET with the whole object (200, no
// Content-Range) must not have the object's first bytes read as the range's.
func TestGetRangeIgnoredRangeFails(t *testing.T) {
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data)
	}))
	defer srv.Close()
	s := noRetryStore(t, srv.URL)
	if got, err := s.GetRange(t.Context(), "seg/a", 100, 50); err == nil {
		t.Fatalf("GetRange(100, 50) from a server that ignores Range: %v (data[100:150] is %v)", got, data[100:150])
	}
}
