package faultproxy

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stratalog/strata/internal/testenv"
)

// TestRedisThroughProxy speaks RESP to the real Redis named by STRATA_TEST_REDIS_URL through the
// proxy: PING works, a Reset makes the next command fail with a network error, and a new connection
// works again. Raw RESP rather than a client library, whose retries would hide the reset.
func TestRedisThroughProxy(t *testing.T) {
	raw := testenv.RedisURL(t) // skips naming STRATA_TEST_REDIS_URL when unset; fails under CI=true
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	if port == "" {
		port = "6379"
	}
	host := u.Hostname()
	if host == "" {
		host = "127.0.0.1"
	}
	p := startProxy(t, net.JoinHostPort(host, port))

	c := redisDial(t, p.Addr(), u)
	if got, err := c.do("PING"); err != nil || got != "+PONG" {
		t.Fatalf("PING through the proxy = %q, %v", got, err)
	}

	p.Reset()
	got, err := c.do("PING")
	if err == nil {
		t.Fatalf("PING after Reset answered %q; want a network error", got)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("PING after Reset timed out instead of failing: %v", err)
	}

	c2 := redisDial(t, p.Addr(), u)
	if got, err := c2.do("PING"); err != nil || got != "+PONG" {
		t.Fatalf("PING on a new connection after Reset = %q, %v", got, err)
	}
}

type redisConn struct {
	net.Conn
	r *bufio.Reader
}

func redisDial(t *testing.T, addr string, u *url.URL) *redisConn {
	t.Helper()
	c := &redisConn{Conn: dial(t, addr)}
	c.r = bufio.NewReader(c.Conn)
	if pw, ok := u.User.Password(); ok {
		args := []string{"AUTH", pw}
		if name := u.User.Username(); name != "" {
			args = []string{"AUTH", name, pw}
		}
		if got, err := c.do(args...); err != nil || got != "+OK" {
			t.Fatalf("AUTH through the proxy = %q, %v", got, err)
		}
	}
	return c
}

// do sends a command and returns the first line of the reply.
func (c *redisConn) do(args ...string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(patience)); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
