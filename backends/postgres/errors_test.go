package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	is "github.com/stratalog/strata/indexedstorage"
)

func TestClassify_MapsNativeErrorsToSentinels(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("query: %w", &pgconn.PgError{Code: code, Message: "from the server"})
	}
	cases := []struct {
		name string
		err  error
		want error // nil: none of the sentinels
	}{
		{"connection exception 08006", pg("08006"), is.ErrTransient},
		{"connection exception 08001", pg("08001"), is.ErrTransient},
		{"serialization failure", pg("40001"), is.ErrTransient},
		{"deadlock", pg("40P01"), is.ErrTransient},
		{"admin shutdown", pg("57P01"), is.ErrTransient},
		{"crash shutdown", pg("57P02"), is.ErrTransient},
		{"cannot connect now", pg("57P03"), is.ErrTransient},
		{"too many connections", pg("53300"), is.ErrTransient},
		{"statement timeout", pg("57014"), is.ErrTransient},
		{"lock timeout", pg("55P03"), is.ErrTransient},
		{"unique violation", pg("23505"), is.ErrConflict},
		{"invalid byte sequence", pg("22021"), is.ErrInvalidArgument},
		{"numeric out of range", pg("22003"), is.ErrInvalidArgument},
		{"undefined table", pg("42P01"), nil},
		{"deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), is.ErrTransient},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, is.ErrTransient},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), is.ErrTransient},
		{"plain error", errors.New("something else"), nil},
	}
	for _, c := range cases {
		got := classify(c.err)
		if !errors.Is(got, c.err) {
			t.Errorf("%s: classify(%v) = %v, which no longer wraps the cause", c.name, c.err, got)
		}
		for _, sentinel := range []error{is.ErrTransient, is.ErrConflict, is.ErrInvalidArgument, is.ErrClosed} {
			if errors.Is(got, sentinel) != (sentinel == c.want) {
				t.Errorf("%s: classify(%v) = %v; matches %v: %v, want %v", c.name, c.err, got, sentinel, errors.Is(got, sentinel), sentinel == c.want)
			}
		}
	}
}
