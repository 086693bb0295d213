package indexedstorage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// The closed set of error kinds a Storage returns. Callers branch with errors.Is, never on text.
var (
	// ErrInvalidArgument: the call itself is wrong (bad namespace, key, id, count or resume token).
	// Retrying cannot help.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrConflict: the write contradicts what the index holds (an id not above its last id).
	ErrConflict = errors.New("conflict")
	// ErrClosed: the Storage was closed. Permanent.
	ErrClosed = errors.New("storage closed")
	// ErrTransient: the engine failed in a way a retry may fix (connection refused or reset, timeout,
	// busy or locked, serialization failure, server starting or shutting down).
	ErrTransient = errors.New("transient storage error")
)

// Classify returns cause marked with kind, one of the sentinels above, so that errors.Is matches both
// kind and anything cause wraps (a *pgconn.PgError, a context error, ...). Backends call it from the
// single function where they translate native errors. A nil cause returns nil.
func Classify(kind, cause error) error {
	if cause == nil {
		return nil
	}
	if errors.Is(cause, kind) {
		return cause
	}
	return &classified{kind: kind, cause: cause}
}

type classified struct {
	kind  error
	cause error
}

func (e *classified) Error() string   { return fmt.Sprintf("%v: %v", e.kind, e.cause) }
func (e *classified) Unwrap() []error { return []error{e.kind, e.cause} }

// IsTransient reports whether err is worth retrying.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }

// ClassifyCommon classifies the failures every networked engine shares: a deadline (the caller's or a
// pool's) or a network failure (refused, reset, broken pipe, timeout, unexpected EOF) is transient. A
// caller's cancellation is returned as it is: it is neither retriable nor the storage's fault. ok is
// false when err is none of these, for the backend to classify itself.
func ClassifyCommon(err error) (classifiedErr error, ok bool) {
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, ErrTransient), errors.Is(err, ErrConflict), errors.Is(err, ErrClosed), errors.Is(err, ErrInvalidArgument):
		return err, true
	case errors.Is(err, context.Canceled):
		return err, true
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		// A failed dial, read or write, or a failed lookup. Any error with a Timeout method satisfies
		// net.Error (an *os.PathError does), so that interface counts only when it says timeout.
		errors.As(err, &opErr), errors.As(err, &dnsErr),
		errors.As(err, &netErr) && netErr.Timeout():
		return Classify(ErrTransient, err), true
	}
	return err, false
}
