package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// replyError is an error reply as go-redis hands it back: an error with a RedisError method.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want error // nil: no sentinel
	}{
		{replyError("LOADING Redis is loading the dataset in memory"), is.ErrTransient},
		{replyError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), is.ErrTransient},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), is.ErrTransient},
		{replyError("CLUSTERDOWN The cluster is down"), is.ErrTransient},
		{replyError("MOVED 3999 127.0.0.1:7002"), is.ErrTransient},
		{replyError("ASK 3999 127.0.0.1:7002"), is.ErrTransient},
		{replyError("READONLY You can't write against a read only replica."), is.ErrTransient},
		{replyError("NOREPLICAS Not enough good replicas to write."), is.ErrTransient},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), is.ErrTransient},
		{fmt.Errorf("wrapped: %w", replyError("LOADING x")), is.ErrTransient},
		{replyError(conflictCode + " 000000000000002a"), is.ErrConflict},
		{replyError("BUSYKEY Target key name already exists."), nil},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), nil},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), nil},
		{goredis.ErrPoolTimeout, is.ErrTransient},
		{goredis.ErrClosed, is.ErrClosed},
		{refused, is.ErrTransient},
		{context.DeadlineExceeded, is.ErrTransient},
		{errors.New("something else"), nil},
	} {
		got := classify(c.err)
		for _, sentinel := range []error{is.ErrTransient, is.ErrConflict, is.ErrClosed, is.ErrInvalidArgument} {
			if errors.Is(got, sentinel) != (sentinel == c.want) {
				t.Errorf("classify(%v) = %v: matches %v is %v", c.err, got, sentinel, errors.Is(got, sentinel))
			}
		}
	}
}

func TestEscapeGlob(t *testing.T) {
	for in, want := range map[string]string{
		"plain:":    "plain:",
		`a*b?c[d]\`: `a\*b\?c\[d\]\\`,
		"":          "",
	} {
		if got := escapeGlob(in); got != want {
			t.Errorf("escapeGlob(%q) = %q, want %q", in, got, want)
		}
	}
}
