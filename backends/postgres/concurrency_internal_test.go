package postgres

import "testing"

// The pool size and the operation limit New takes: what is set explicitly stands, and otherwise both
// leave room for the caller's MinConcurrentOps (EnsureConcurrency's rules before it was folded in).
func TestConcurrency_ExplicitStandsElseRoomForTheCaller(t *testing.T) {
	for _, c := range []struct {
		name                 string
		pool, maxOps, minOps int // pool 0: the connection string sets no pool_max_conns
		wantPool, wantLimit  int
	}{
		{"defaults", 0, 0, 0, DefaultPoolConns(0), DefaultPoolConns(0) - reservedConns},
		{"room for the caller", 0, 0, 64, DefaultPoolConns(64), DefaultPoolConns(64) - reservedConns},
		{"a small caller changes nothing", 0, 0, 4, DefaultPoolConns(0), DefaultPoolConns(0) - reservedConns},
		{"explicit limit, default pool", 0, 3, 64, DefaultPoolConns(0), 3},
		{"explicit pool too small", 7, 0, 64, 7, 64},
		{"explicit pool big enough", 40, 0, 8, 40, 38},
		{"one connection", 1, 0, 0, 1, 1},
	} {
		pool := c.pool
		if pool == 0 {
			pool = defaultPoolConns(c.maxOps, c.minOps)
		}
		if limit := opLimit(pool, c.maxOps, c.minOps); pool != c.wantPool || limit != c.wantLimit {
			t.Errorf("%s: pool %d, limit %d; want %d, %d", c.name, pool, limit, c.wantPool, c.wantLimit)
		}
	}
}

func TestPoolMaxConnsSet_ReadsURLsAndKeywordValueStrings(t *testing.T) {
	for s, want := range map[string]bool{
		"postgres://h/db?pool_max_conns=5":       true,
		"postgres://h/db?sslmode=disable":        false,
		"host=h dbname=db pool_max_conns=5":      true,
		"host=h dbname=db application_name=pool": false,
	} {
		if got := poolMaxConnsSet(s); got != want {
			t.Errorf("poolMaxConnsSet(%q) = %v, want %v", s, got, want)
		}
	}
}
