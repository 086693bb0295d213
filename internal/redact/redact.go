// Package redact hides secrets in text that may reach a log line, an error or an API response: the
// password of a URL's user-info, the value of a secret query parameter (password, sslpassword, token,
// secret, access_key, secret_access_key, X-Amz-Security-Token, X-Amz-Signature, sig, …), and the
// password of a PostgreSQL keyword/value connection string (password=… or password='…').
//
// It works on the text rather than on a parsed URL, so that it also covers a URL quoted inside an
// error message (pgx and the URL parser echo the connection string) and a URL that does not parse.
package redact

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every secret.
const Mask = "xxxxx"

var (
	// userInfo is scheme://user:password@: the password is everything up to the @, never crossing a
	// space, a quote, a slash or another @.
	userInfo = regexp.MustCompile("([A-Za-z][A-Za-z0-9+.-]*://[^\\s/@:\"'`]*):[^\\s/@\"'`]*@")
	// param is key=value, in a query string or a keyword/value DSN, for a key that names a secret
	// (case-insensitive, any prefix: sslpassword, X-Amz-Security-Token, aws_session_token). Its value
	// runs to the next &, space or quote, or is single-quoted (the libpq form, with \' escapes).
	param = regexp.MustCompile("(?i)((?:^|[^A-Za-z0-9])[A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|access_key|accesskey|secret_key|api_key|apikey|signature|credential|sig)\\s*=\\s*)('(?:[^'\\\\]|\\\\.)*'|[^&\\s\"'`]*)")
)

// String is s with every secret replaced by Mask.
func String(s string) string {
	if s == "" {
		return s
	}
	s = userInfo.ReplaceAllString(s, "${1}:"+Mask+"@")
	s = param.ReplaceAllStringFunc(s, func(m string) string {
		sub := param.FindStringSubmatch(m)
		if sub[2] == "" {
			return m
		}
		return sub[1] + Mask
	})
	return s
}

// URL is a storage, blob or schedule URL (or a keyword/value DSN) fit for a log line: String, and a
// user-info password the text patterns missed (an unescaped character in it) hidden as url.Redacted
// hides it.
func URL(raw string) string {
	out := String(raw)
	if u, err := url.Parse(out); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != Mask {
			u.User = url.UserPassword(u.User.Username(), Mask)
			return String(u.String())
		}
	} else if err != nil && strings.Contains(out, "@") && strings.Contains(out, "://") {
		// A URL that does not parse keeps its scheme and loses everything up to its last @.
		scheme, _, _ := strings.Cut(out, "://")
		return scheme + "://" + Mask + out[strings.LastIndex(out, "@"):]
	}
	return out
}

// Error wraps err so that its message has every secret hidden; errors.Is and errors.As still see err.
// A nil err stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	var r *redacted
	if errors.As(err, &r) && r.msg == err.Error() {
		return err // already redacted, and nothing added since
	}
	msg := err.Error()
	return &redacted{err: err, msg: String(msg)}
}

type redacted struct {
	err error
	msg string
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// Handler wraps h so that every string and error attribute, and the message, is passed through String
// before h sees it: the last guard for a log line.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(*handler); ok {
		return h
	}
	return &handler{h: h}
}

type handler struct{ h slog.Handler }

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = attr(a)
	}
	return &handler{h: h.h.WithAttrs(clean)}
}

func (h *handler) WithGroup(name string) slog.Handler { return &handler{h: h.h.WithGroup(name)} }

func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, x := range g {
			clean[i] = attr(x)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, String(x.Error()))
		case interface{ String() string }:
			return slog.String(a.Key, String(x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
