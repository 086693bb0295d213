// Command strata is the strata sidecar and its tools:
//
//	strata run [--config FILE]                  serve the API and sweep beside an executor
//	strata sweep --once [--json] [--config FILE] one full sweep from the command line; exits 1 if it failed
//	strata scan [--mode M] [--layer L]          list the agents a layer holds
//	strata inspect [--mode M] AGENT             where an agent's entries live, per layer
//	strata demo [--dir DIR]                     the whole story on embedded SQLite
//	strata config defaults|check FILE|print     the default file; validate a file; the config in effect
//	strata bench chaos [--quick]                the chaos benchmark (BENCHMARKS.md)
//	strata version [--json]                     the build: module version, commit, Go version
//	strata help [CMD]                           this overview, or one command's synopsis and flags
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/stratalog/strata/internal/redact"
)

const usage = `strata archives ephemeral oplogs down storage layers by sweeping the layers themselves.

Usage:
  strata run [--config FILE]                    serve the HTTP API and run the sweep beside an executor
  strata sweep --once [--json] [--config FILE] [--gap D] [--max-ticks N] [--shards S --shard-count N]
                                                one full sweep (two passes, --gap apart), then exit; exits 1
                                                if an archive failed, a key was unreadable, storage failed
                                                or the sweep did not complete in --max-ticks ticks
  strata scan [--config FILE] [--json] [--mode M] [--layer L] [--limit N]
                                                list the agents a layer holds, with their last index;
                                                exits 1 after the list if any could not be read
  strata inspect [--config FILE] [--json] [--mode M] AGENT
                                                each layer's first and last index and entry count for AGENT
                                                (scan and inspect create nothing: a missing store fails)
  strata demo [--dir DIR]                       an executor losing teardown drains, the sweep, a verification
  strata config defaults                        print the default configuration file, every key commented
  strata config check FILE                      validate FILE (with the STRATA_* variables); exit 1 if bad
  strata config print [--config FILE]           the configuration in effect, secrets redacted
  strata bench chaos [--quick] [--postgres URL] [--plot FILE]
                                                latency injected on PostgreSQL through a proxy: the sweep
                                                against registration on the commit path; exits non-zero
                                                if any entry was lost or doubled
  strata version [--json]                       module version, commit and Go version
  strata help [CMD]                             this overview, or CMD's synopsis, arguments and flags
                                                (as CMD -h does)

Usage errors exit 2. Configuration: a TOML file (--config) over the defaults, then STRATA_<SECTION>_<KEY> variables.
See docs/config.md.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	out := &errorSink{w: stderr}
	ctx, stop := signalContext(out)
	defer stop()
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], stderr, out)
	case "sweep":
		err = cmdSweep(ctx, args[1:], stdout, stderr, out)
	case "scan":
		err = cmdScan(ctx, args[1:], stdout, stderr, out)
	case "inspect":
		err = cmdInspect(ctx, args[1:], stdout, stderr, out)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout, stderr)
	case "config":
		err = cmdConfig(args[1:], stdout, stderr, out)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout, stderr)
	case "version":
		err = cmdVersion(args[1:], stdout, stderr)
	case "help":
		err = cmdHelp(args[1:], stdout, stderr)
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "strata: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var usageErr *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usageErr):
		out.fail(args[0], err)
		return 2
	}
	out.fail(args[0], err)
	return 1
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

// fail writes the error the command exits with.
func (s *errorSink) fail(command string, err error) {
	if log := s.log.Load(); log != nil {
		log.Error("strata "+command+" failed", "err", err)
		return
	}
	fmt.Fprintln(s.w, redact.String("strata "+command+": "+err.Error()))
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

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
