package indexedstorage_test

import (
	"errors"
	"fmt"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
)

func TestOpError_PrintsOneShapeAndUnwrapsToKindAndCause(t *testing.T) {
	cause := &nativeErr{code: "23505"}
	err := is.NewOpError("redis", is.OpAppend, "n", "k", is.Classify(is.ErrConflict, cause))
	if got, want := err.Error(), `redis append (ns "n", key "k"): conflict: native 23505`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	var op *is.OpError
	var native *nativeErr
	wrapped := fmt.Errorf("context: %w", err)
	if !errors.As(wrapped, &op) || op.Backend != "redis" || op.Op != is.OpAppend || op.Namespace != "n" || op.Key != "k" {
		t.Fatalf("errors.As(%v, *OpError) = %+v", wrapped, op)
	}
	if !errors.Is(wrapped, is.ErrConflict) || !errors.As(wrapped, &native) {
		t.Fatalf("%v lost its kind or its cause", wrapped)
	}
}

func TestOpError_LeavesOutWhatIsEmpty(t *testing.T) {
	for _, c := range []struct {
		ns, key, want string
	}{
		{"n", "", `memory scan (ns "n"): storage closed`},
		{"", "k", `memory scan (key "k"): storage closed`},
		{"", "", `memory scan: storage closed`},
	} {
		if got := is.NewOpError("memory", is.OpScan, c.ns, c.key, is.ErrClosed).Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestNewOpError_RenamesAnOpErrorInsteadOfNestingIt(t *testing.T) {
	inner := is.NewOpError("sqlite", is.OpFirst, "n", "k", is.ErrClosed)
	err := is.NewOpError("multisqlite", is.OpFirst, "n", "k", inner)
	if got, want := err.Error(), `multisqlite first (ns "n", key "k"): storage closed`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if is.NewOpError("memory", is.OpAppend, "n", "k", nil) != nil {
		t.Fatal("NewOpError of nil must be nil")
	}
}
