package indexedstorage

import (
	"strconv"
	"strings"
)

// OpError is the one shape of every error a backend's Storage operation returns: which backend, which
// operation (as the metrics label it), which index, and what went wrong. Err is already classified
// (Classify), so errors.Is matches the sentinel (ErrConflict, ErrInvalidArgument, ErrClosed,
// ErrTransient) and anything the engine's error wraps, through the OpError.
//
// It prints as
//
//	<backend> <op> (ns "<namespace>", key "<key>"): <err>
//
// for example `redis append (ns "n", key "k"): conflict: id 5 is not above the index's last id 7`.
// An empty Namespace or Key is left out of the parenthesis, and the parenthesis with both. A scan
// names its namespace only; its prefix or range is part of Err.
type OpError struct {
	Backend   string    // "memory", "sqlite", "multisqlite", "postgres", "redis"
	Op        Operation // the operation label of the metrics: "append", "last_id", "drop_prefix", ...
	Namespace string
	Key       string
	Err       error
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString(e.Backend)
	b.WriteByte(' ')
	b.WriteString(string(e.Op))
	switch {
	case e.Namespace != "" && e.Key != "":
		b.WriteString(" (ns " + strconv.Quote(e.Namespace) + ", key " + strconv.Quote(e.Key) + ")")
	case e.Namespace != "":
		b.WriteString(" (ns " + strconv.Quote(e.Namespace) + ")")
	case e.Key != "":
		b.WriteString(" (key " + strconv.Quote(e.Key) + ")")
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Err, which matches both its sentinel and the engine's error.
func (e *OpError) Unwrap() error { return e.Err }

// NewOpError is the constructor backends call from their one choke point, after classifying err. A
// nil err returns nil. An err that is itself an *OpError (not wrapped) is renamed rather than nested,
// so that the outermost layer names the operation once: a store built on another's says its own
// name, and a helper that already failed through the choke point does not print the index twice.
func NewOpError(backend string, op Operation, ns, key string, err error) error {
	if err == nil {
		return nil
	}
	if inner, ok := err.(*OpError); ok {
		err = inner.Err
	}
	return &OpError{Backend: backend, Op: op, Namespace: ns, Key: key, Err: err}
}
