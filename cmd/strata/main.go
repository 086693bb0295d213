// Command strata is the strata sidecar and its tools, one command per file (command_<name>.go):
//
//	strata run                        serve the API and sweep beside an executor
//	strata sweep --once               one full sweep from the command line; exits non-zero unless it archived all it found
//	strata scan                       list the agents a layer holds
//	strata inspect AGENT              where an agent's entries live, per layer
//	strata migrate status|up          the stores' schema versions and pending migrations; apply them
//	strata demo                       the whole story on embedded SQLite
//	strata config defaults|check|print the default file; validate a file; the configuration in effect
//	strata bench chaos                the chaos benchmark (BENCHMARKS.md)
//	strata version                    the build: module version, commit, Go version
//	strata completion SHELL           a completion script for bash, zsh, fish or powershell
//	strata help [CMD]                 the overview, or one command's help
//
// Flags go anywhere on the line. Usage errors exit 2 with one message on stderr; a command that fails
// exits 1.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/internal/redact"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs a command line and returns the exit code: 0, 1 when the command failed, 2 for a usage
// error.
func run(args []string, stdout, stderr io.Writer) int {
	if args == nil {
		args = []string{} // cobra reads os.Args for nil
	}
	out := &errorSink{w: stderr}
	ctx, stop := signalContext(out)
	defer stop()
	a := &app{stdout: stdout, stderr: stderr, out: out}
	root := a.rootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	return a.exitCode(cmd, err)
}

// errorSink is where the process's own messages go (the error it exits with, the drain notice): plain
// lines on stderr until a command has built its logger, then that logger, so that a JSON log stays
// JSON to its last line. Every message is redacted: an error may echo a storage URL.
type errorSink struct {
	w   io.Writer
	log atomic.Pointer[slog.Logger]
}

// use makes log, when it writes JSON, the sink of the messages that follow.
func (s *errorSink) use(log *slog.Logger, format string) {
	if format == "json" {
		s.log.Store(log)
	}
}

// notice writes a line of the process's own.
func (s *errorSink) notice(line string) {
	if log := s.log.Load(); log != nil {
		log.Warn(line)
		return
	}
	fmt.Fprintln(s.w, redact.String(line))
}

// fail writes the error command ("sweep", "config print"; "" for strata itself) exits with, as one
// line (or one JSON log record).
func (s *errorSink) fail(command string, err error) {
	name := strings.TrimSpace("strata " + command)
	if log := s.log.Load(); log != nil {
		log.Error(name+" failed", "err", err)
		return
	}
	fmt.Fprintln(s.w, redact.String(name+": "+err.Error()))
}

// signalContext is cancelled by the first SIGINT or SIGTERM, so that work drains; a second signal exits
// at once.
func signalContext(out *errorSink) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
			return
		}
		out.notice("strata: draining (the agents under way get sweep.shutdown_grace to finish); signal again to exit now")
		cancel()
		<-sigs
		out.notice("strata: exiting now")
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}

// routeLibraryLogs sends what libraries log on their own (the log package's default logger, go-redis's
// pool) through log, so that every line has the configured format and is redacted.
func routeLibraryLogs(log *slog.Logger) {
	slog.SetDefault(log)
	goredis.SetLogger(redisLogger{log.With("component", "redis")})
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...))
}

// newLogger builds the process logger from the configuration's [log] section.
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(redact.Handler(slog.NewJSONHandler(w, opts)))
	}
	return slog.New(redact.Handler(slog.NewTextHandler(w, opts)))
}

// redactingWriter redacts each write: a storage error a report or a row shows may echo a URL. Every
// write of the commands that use it is a whole line or more.
type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
