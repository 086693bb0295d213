// Package cloudblob is an archive.BlobStore on object storage through gocloud.dev/blob: Amazon S3 and
// any S3-protocol server (s3://), Google Cloud Storage (gs://), Azure Blob Storage (azblob://) and
// gocloud's in-process driver (mem://).
//
// A local directory is not opened through gocloud's fileblob: backends.OpenBlob gives file:/// and
// fs: to backends/fsblob, because fileblob cannot hold a 255-byte segment (its temporary file is the
// target's name plus a suffix, too long for the file system), does not fsync the file or directory
// before the archive step drops the layer above, lists its own temporary files when they sit beside
// the target (no_tmp_dir) and otherwise renames across file systems from os.TempDir. New accepts any
// bucket, fileblob's included, for a caller who wants it anyway.
//
// A blob path is the object's key as it is, under the URL's prefix: archive.ValidateBlobPath admits
// only segments of [A-Za-z0-9%._-] that do not start with '.', so no key needs a driver's escaping and
// the objects in the bucket have the names docs/storage-format.md gives. What the archive needs of a
// store holds on every driver:
//
//   - a reader never sees part of a Put: S3 (PutObject, or CompleteMultipartUpload above the part
//     size), GCS and Azure make an object visible only once its upload completes, and memblob swaps
//     the whole byte slice in when the writer closes; a Put whose context is cancelled part way
//     leaves the old object, never a prefix of the new one;
//   - Delete of a missing blob is nil (gocloud reports NotFound; S3 would not even say);
//   - a Put of the same bytes to the same path is a replacement with identical content;
//   - a ranged read (GetRange, a packed segment's chunk) is one GET with a Range header, checked
//     against the object's size the response gives; an S3-protocol server that ignores Range is
//     an error, not the object's first bytes.
//
// Errors: a missing blob is archive.ErrBlobNotFound; what a retry may cure — a network failure, a
// timeout, a 5xx, throttling (429, S3's SlowDown) — is marked indexedstorage.ErrTransient; anything
// else (permission denied, a bucket that does not exist, a bad argument) is returned as permanent.
package cloudblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/stratalog/strata/archive"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/redact"
)

// Schemes lists the URL schemes Open understands.
var Schemes = []string{"s3", "gs", "azblob", "mem"}

// Store is a blob store on one gocloud bucket.
type Store struct {
	bucket *blob.Bucket
	name   string // the URL, redacted, for errors
	closed atomic.Bool
}

var (
	_ archive.BlobStore   = (*Store)(nil)
	_ archive.RangeReader = (*Store)(nil)
)

// Open opens the bucket rawURL names, as gocloud's URL openers do, with one addition: for s3://, gs://
// and azblob:// the URL's path is a key prefix, so s3://bucket/strata/prod keeps every blob under
// "strata/prod/" (gocloud's own ?prefix= still works, and is used as it is). For example:
//
//	s3://bucket/prefix?region=us-east-1
//	s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true
//	gs://bucket/prefix
//	azblob://container/prefix
//	mem://
//
// Query parameters are gocloud's (for s3: region, endpoint, use_path_style, disable_https, profile,
// anonymous, ...); credentials come from the environment as each SDK reads it. An unknown parameter is
// an error. Opening does not contact the server: a wrong bucket or credentials fail on first use.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return nil, fmt.Errorf("cloudblob: blob store URL %q: %w", redact.URL(rawURL), err)
	}
	name := redact.URL(rawURL)
	var prefix string
	switch u.Scheme {
	case "s3", "gs", "azblob":
		if u.Host == "" {
			return nil, fmt.Errorf("cloudblob: blob store URL %q names no bucket: use %s://bucket[/prefix]", name, u.Scheme)
		}
		prefix = strings.Trim(u.Path, "/")
		if prefix != "" {
			if err := archive.ValidateBlobPath(prefix, true); err != nil {
				return nil, fmt.Errorf("cloudblob: blob store URL %q: key prefix %q: %w", name, prefix, err)
			}
			prefix += "/"
		}
		u.Path, u.RawPath = "", ""
	case "mem":
	default:
		return nil, fmt.Errorf("cloudblob: blob store URL %q: unknown scheme %q; want one of %s", name, u.Scheme, strings.Join(Schemes, ", "))
	}
	bucket, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		// gocloud's message may repeat the URL, query and all: hide its secrets.
		return nil, redact.Error(fmt.Errorf("cloudblob: open %s: %w", name, classify(err)))
	}
	if prefix != "" {
		bucket = blob.PrefixedBucket(bucket, prefix)
	}
	return &Store{bucket: bucket, name: name}, nil
}

// Options configures New. A nil *Options is the zero Options, and a zero field means its default.
type Options struct {
	// Name names the bucket in the Store's errors (Open uses the URL, secrets hidden); "bucket" when
	// empty.
	Name string
}

// New returns a Store on a bucket the caller opened (for a driver's options a URL cannot express).
// The Store owns the bucket: Close closes it. ctx goes unused: New contacts nothing. A nil bucket is
// ErrInvalidArgument.
func New(_ context.Context, bucket *blob.Bucket, opts *Options) (*Store, error) {
	if bucket == nil {
		return nil, fmt.Errorf("cloudblob: %w: nil bucket", is.ErrInvalidArgument)
	}
	name := "bucket"
	if opts != nil && opts.Name != "" {
		name = opts.Name
	}
	return &Store{bucket: bucket, name: name}, nil
}

// Bucket is the gocloud bucket under the store, for tests and tools.
func (s *Store) Bucket() *blob.Bucket { return s.bucket }

var errClosed = is.Classify(is.ErrClosed, errors.New("store is closed"))

// fail is the one place an operation's error takes its shape, the storage backends' (is.OpError):
// `cloudblob <op> (path "<path>"): <err>`, op being the blob metric's label (put, get, get_range,
// delete, list). The bucket is named where the service failed. A nil err returns nil.
func (s *Store) fail(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cloudblob %s (path %q): %w", op, path, err)
}

// failService is fail for an error of the service: classified, and naming the bucket.
func (s *Store) failService(op, path string, err error) error {
	return s.fail(op, path, fmt.Errorf("%s: %w", s.name, classify(err)))
}

// check refuses an operation on a closed store or a malformed path; its error has been through fail.
func (s *Store) check(op, path string, isPrefix bool) error {
	if s.closed.Load() {
		return s.fail(op, path, errClosed)
	}
	return s.fail(op, path, archive.ValidateBlobPath(path, isPrefix))
}

// writeOptions fix the content type, so that gocloud does not buffer the first 512 bytes to sniff one,
// and disable buffering beyond what the driver needs.
var writeOptions = &blob.WriterOptions{ContentType: "application/octet-stream"}

// Put uploads data as one object. The object appears whole when the upload completes; a failed or
// cancelled upload leaves what was there before.
func (s *Store) Put(ctx context.Context, path string, data []byte) error {
	if err := s.check("put", path, false); err != nil {
		return err
	}
	if err := s.bucket.WriteAll(ctx, path, data, writeOptions); err != nil {
		return s.failService("put", path, err)
	}
	return nil
}

func (s *Store) Get(ctx context.Context, path string) ([]byte, error) {
	if err := s.check("get", path, false); err != nil {
		return nil, err
	}
	data, err := s.bucket.ReadAll(ctx, path)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, s.fail("get", path, archive.ErrBlobNotFound)
	}
	if err != nil {
		return nil, s.failService("get", path, err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// GetRange reads the range with gocloud's range reader: one ranged GET. The reader's Size is the whole
// object's, so a range past the end fails before anything is allocated or read; a body that ends
// early after that is the transport's failure (the object was long enough), marked transient. A
// length of 0 is a HEAD (Attributes): S3 cannot GET zero bytes, and gocloud's one-byte stand-in fails
// on an empty object.
func (s *Store) GetRange(ctx context.Context, path string, offset, length int64) ([]byte, error) {
	if err := s.check("get_range", path, false); err != nil {
		return nil, err
	}
	if err := archive.ValidateBlobRange(offset, length); err != nil {
		return nil, s.fail("get_range", path, err)
	}
	if length == 0 {
		attrs, err := s.bucket.Attributes(ctx, path)
		if err != nil {
			return nil, s.failRead(path, err)
		}
		if err := archive.CheckBlobSize(offset, length, attrs.Size); err != nil {
			return nil, s.fail("get_range", path, err)
		}
		return []byte{}, nil
	}
	r, err := s.bucket.NewRangeReader(ctx, path, offset, length, nil)
	if err != nil {
		if gcerrors.Code(err) != gcerrors.NotFound {
			// A range that starts past the end is refused (S3: 416 InvalidRange), with a code that
			// varies by driver: the object's size tells whether that is why.
			if attrs, aerr := s.bucket.Attributes(ctx, path); aerr == nil {
				if serr := archive.CheckBlobSize(offset, length, attrs.Size); serr != nil {
					return nil, s.fail("get_range", path, serr)
				}
			}
		}
		return nil, s.failRead(path, err)
	}
	defer r.Close()
	for _, ignored := range rangeIgnored {
		if ignored(r) {
			return nil, s.failService("get_range", path, errRangeIgnored)
		}
	}
	if err := archive.CheckBlobSize(offset, length, r.Size()); err != nil {
		return nil, s.fail("get_range", path, err)
	}
	data := make([]byte, length)
	if n, err := io.ReadFull(r, data); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			err = is.Classify(is.ErrTransient, fmt.Errorf("the body ended after %d of the %d bytes at %d: %w", n, length, offset, err))
		}
		return nil, s.failService("get_range", path, err)
	}
	return data, nil
}

// failRead is failService for a read, with a missing object as archive.ErrBlobNotFound.
func (s *Store) failRead(path string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return s.fail("get_range", path, archive.ErrBlobNotFound)
	}
	return s.failService("get_range", path, err)
}

// Delete removes the object; a missing one is not an error.
func (s *Store) Delete(ctx context.Context, path string) error {
	if err := s.check("delete", path, false); err != nil {
		return err
	}
	err := s.bucket.Delete(ctx, path)
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return s.failService("delete", path, err)
	}
	return nil
}

// List pages through every key under prefix (no delimiter: a flat listing) and returns them in
// ascending byte order, whatever order the service used.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := s.check("list", prefix, true); err != nil {
		return nil, err
	}
	var paths []string
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			if err == io.EOF {
				break
			}
			return nil, s.failService("list", prefix, err)
		}
		if obj.IsDir || archive.ValidateBlobPath(obj.Key, false) != nil {
			// Not ours: a "directory" marker or an object some other tool wrote, which no blob
			// path can name.
			continue
		}
		paths = append(paths, obj.Key)
	}
	slices.Sort(paths)
	return paths, nil
}

// Close closes the bucket; later calls fail with indexedstorage.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.bucket.Close()
}

// classify marks err as transient when a retry may cure it. A caller's cancellation stays as it is.
func classify(err error) error {
	if err == nil {
		return nil
	}
	switch gcerrors.Code(err) {
	case gcerrors.DeadlineExceeded, gcerrors.ResourceExhausted, gcerrors.Internal:
		return is.Classify(is.ErrTransient, err)
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.InvalidArgument, gcerrors.FailedPrecondition,
		gcerrors.AlreadyExists, gcerrors.Unimplemented:
		return err
	}
	if transientStatus(err) {
		return is.Classify(is.ErrTransient, err)
	}
	if c, ok := is.ClassifyCommon(err); ok {
		return c
	}
	return err
}

// transientStatus reports an HTTP status or service error code that a retry may cure: 408, 429, 5xx,
// or one of the throttling and internal-error codes the object stores name. Each driver's file adds
// the way to read its SDK's errors, so a driver left out of the build leaves its SDK out too.
func transientStatus(err error) bool {
	for _, of := range statusOf {
		status, code, ok := of(err)
		if !ok {
			continue
		}
		if status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500 {
			return true
		}
		switch code {
		case "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeoutException",
			"InternalError", "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequestsException",
			"ServerBusy", "OperationTimedOut":
			return true
		}
	}
	return false
}

// rangeIgnored holds, for each driver built in that can tell, a check that a ranged read's response is
// not its range: a server that ignores the Range header answers with the whole object, whose first
// bytes would otherwise be read as the range's.
var rangeIgnored []func(r *blob.Reader) bool

var errRangeIgnored = errors.New("the server answered a ranged read with the whole object (it ignores the Range header)")

// statusOf holds, for each driver built in, a reader of its SDK's errors: the HTTP status and the
// service's error code, ok when err is one of its SDK's.
var statusOf []func(err error) (status int, code string, ok bool)
