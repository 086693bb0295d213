package indexedstorage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

type nativeErr struct{ code string }

func (e *nativeErr) Error() string { return "native " + e.code }

func TestClassify_KeepsBothTheKindAndTheCause(t *testing.T) {
	cause := &nativeErr{code: "40001"}
	err := fmt.Errorf("postgres append: %w", is.Classify(is.ErrTransient, cause))
	var native *nativeErr
	if !errors.Is(err, is.ErrTransient) || !errors.As(err, &native) || native.code != "40001" {
		t.Fatalf("classified error %v lost its kind or its cause", err)
	}
	if is.Classify(is.ErrTransient, nil) != nil {
		t.Fatal("Classify of nil must be nil")
	}
}

func TestClassifyCommon(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind error
	}{
		{context.DeadlineExceeded, is.ErrTransient},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), is.ErrTransient},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, is.ErrTransient},
		{io.ErrUnexpectedEOF, is.ErrTransient},
		{is.ErrConflict, is.ErrConflict},
	} {
		got, ok := is.ClassifyCommon(c.err)
		if !ok || !errors.Is(got, c.kind) {
			t.Fatalf("ClassifyCommon(%v) = %v, %v; want %v", c.err, got, ok, c.kind)
		}
	}
	got, ok := is.ClassifyCommon(context.Canceled)
	if !ok || is.IsTransient(got) || !errors.Is(got, context.Canceled) {
		t.Fatalf("a caller's cancellation must not become transient: %v", got)
	}
	if _, ok := is.ClassifyCommon(errors.New("syntax error")); ok {
		t.Fatal("an engine-specific error must be left to the backend")
	}
	// An *os.PathError has a Timeout method, so it satisfies net.Error; a name too long is no network
	// fault and retrying it cannot help.
	long := &os.PathError{Op: "open", Path: "x", Err: syscall.ENAMETOOLONG}
	if got, _ := is.ClassifyCommon(long); is.IsTransient(got) {
		t.Fatalf("ClassifyCommon(%v) made a file system error transient", long)
	}
	dns := &net.DNSError{Err: "no such host", Name: "db.invalid"}
	if got, ok := is.ClassifyCommon(dns); !ok || !is.IsTransient(got) {
		t.Fatalf("ClassifyCommon(%v) = %v, %v; want transient", dns, got, ok)
	}
}

func TestErrorKind(t *testing.T) {
	for err, want := range map[error]string{
		nil: "", is.ErrTransient: "transient", is.ErrConflict: "conflict", is.ErrInvalidArgument: "invalid_argument",
		is.ErrClosed: "closed", context.Canceled: "canceled", errors.New("x"): "other",
	} {
		if got := is.ErrorKind(err); got != want {
			t.Fatalf("ErrorKind(%v) = %q, want %q", err, got, want)
		}
	}
}
