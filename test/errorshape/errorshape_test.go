// Package errorshape checks that every backend returns its errors in the one shape, is.OpError: the
// same Append conflict, invalid argument and operation after Close print the same text on memory,
// SQLite, multi-SQLite, PostgreSQL, Redis and Redis Cluster, once the backend's name is set aside.
package errorshape

import (
	"errors"
	"strings"
	"testing"

	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/test/backendtest"
)

// errorName is the name a backend's errors carry: a Redis Cluster is Redis.
var errorName = map[string]string{
	"memory": "memory", "sqlite": "sqlite", "multisqlite": "multisqlite",
	"postgres": "postgres", "redis": "redis", "redis-cluster": "redis",
}

// failure is one error every backend must shape alike.
type failure struct {
	name     string
	op       is.Operation
	ns, key  string
	sentinel error
	// provoke makes st fail; st is fresh, and provoke may close it.
	provoke func(t *testing.T, st is.Storage) error
}

const ns, key = "errorshape/ns", "agent:7"

var failures = []failure{
	{
		name: "conflict", op: is.OpAppend, ns: ns, key: key, sentinel: is.ErrConflict,
		provoke: func(t *testing.T, st is.Storage) error {
			if err := st.Append(t.Context(), ns, key, 7, []byte("v")); err != nil {
				t.Fatal(err)
			}
			return st.Append(t.Context(), ns, key, 5, []byte("v"))
		},
	},
	{
		// A namespace outside [A-Za-z0-9/._-] (validate.go).
		name: "invalid argument", op: is.OpLastID, ns: "bad ns", key: key, sentinel: is.ErrInvalidArgument,
		provoke: func(t *testing.T, st is.Storage) error {
			_, _, err := st.LastID(t.Context(), "bad ns", key)
			return err
		},
	},
	{
		name: "closed", op: is.OpDropPrefix, ns: ns, key: key, sentinel: is.ErrClosed,
		provoke: func(t *testing.T, st is.Storage) error {
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			_, err := st.DropPrefix(t.Context(), ns, key, 3)
			return err
		},
	},
}

func TestEveryBackendShapesItsErrorsAlike(t *testing.T) {
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			shapes := map[string][]string{} // the text with the backend's name set aside → backends
			for _, b := range backendtest.All() {
				t.Run(b.Name, func(t *testing.T) {
					err := f.provoke(t, b.Open(t))
					t.Logf("%s", err)
					var op *is.OpError
					if !errors.As(err, &op) {
						t.Fatalf("%v (%T) is no *is.OpError", err, err)
					}
					if op.Backend != errorName[b.Name] || op.Op != f.op || op.Namespace != f.ns || op.Key != f.key {
						t.Errorf("OpError names backend %q, op %q, ns %q, key %q; want %q, %q, %q, %q",
							op.Backend, op.Op, op.Namespace, op.Key, errorName[b.Name], f.op, f.ns, f.key)
					}
					if !errors.Is(err, f.sentinel) {
						t.Errorf("%v does not match %v", err, f.sentinel)
					}
					shape, found := strings.CutPrefix(err.Error(), op.Backend+" ")
					if !found {
						t.Errorf("%q does not start with the backend's name", err)
					}
					shapes["<backend> "+shape] = append(shapes["<backend> "+shape], b.Name)
				})
			}
			if len(shapes) > 1 {
				t.Errorf("the %s prints %d ways, want one: %v", f.name, len(shapes), shapes)
			}
		})
	}
}
