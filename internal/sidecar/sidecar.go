// Package sidecar is `strata run`: the storage, blob and schedule stores a config names, the layer
// stack over them, the sweep and the scheduler, the executor's feed (shard assignment and resident
// agents) and the HTTP API that carries it.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends"
	"github.com/stratalog/strata/config"
	is "github.com/stratalog/strata/indexedstorage"
	"github.com/stratalog/strata/internal/redact"
	"github.com/stratalog/strata/internal/telemetry"
	"github.com/stratalog/strata/oplog"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/sweeper"
)

// Sidecar is one strata process beside one executor.
type Sidecar struct {
	cfg       config.Config
	log       *slog.Logger
	now       func() time.Time
	storage   is.Storage
	blobs     archive.BlobStore
	schedules schedule.Store
	stack     *oplog.Stack
	sweeper   *sweeper.Sweeper
	scheduler *schedule.Scheduler
	feed      *feed
	metrics   http.Handler
	provider  *sdkmetric.MeterProvider

	// limits reports the storage's own concurrency limit (postgres's max_concurrent_ops), nil when the
	// backend has none.
	limits is.Limited

	// residencyTurn holds a token while a PUT /v1/residency is read: one at a time, the others waiting
	// their turn in arrival order (putResidency).
	residencyTurn chan struct{}
	// residencyWaiting counts the PUT /v1/residency requests waiting for their turn.
	residencyWaiting atomic.Int64
	// boundAddr is the address Serve's listener bound, which the Host check also allows.
	boundAddr string

	// gcMetrics are the segment collector's instruments; collectTicks, when set, replaces its ticker
	// and afterCollect, when set, is told of each run (tests drive and watch the loop with them).
	gcMetrics *gcMetrics
	// scrubMetrics are the scrub's; scrubTicks and afterScrub drive and watch its loop in tests.
	scrubMetrics *scrubMetrics
	scrubTicks   <-chan time.Time
	afterScrub   func([]archive.VerifyReport, error)
	collectTicks <-chan time.Time
	afterCollect func([]archive.CollectReport, error)

	// baseCtx bounds work the API starts (POST /v1/sweep): cancelled when Run's context is.
	baseCtx    context.Context
	baseCancel context.CancelFunc
	closeOnce  sync.Once
}

// Open opens everything cfg names and builds the sweep over it. Nothing runs until Run.
func Open(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...Option) (_ *Sidecar, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	// Every line the sidecar, the sweep and the scheduler log passes through redaction: a storage
	// error may echo its connection string.
	log = slog.New(redact.Handler(log.Handler()))
	s := &Sidecar{cfg: cfg, log: log, now: time.Now, residencyTurn: make(chan struct{}, 1)}
	s.baseCtx, s.baseCancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	if s.provider, s.metrics, err = telemetry.New(); err != nil {
		return nil, err
	}

	// The sweep's archives share the store's concurrency slots with the executor: a default below
	// max_concurrency would queue the sweep on its own slots.
	st, err := backends.Open(ctx, cfg.Storage.URL, &backends.Options{MinConcurrentOps: cfg.Sweep.MaxConcurrency})
	if err != nil {
		return nil, fmt.Errorf("storage.url: %w", redact.Error(err))
	}
	s.storage = st
	if limited, ok := st.(is.Limited); ok {
		s.limits = limited
		if err := observeLimiter(s.provider, limited); err != nil {
			return nil, err
		}
	}
	if s.blobs, err = backends.OpenBlob(ctx, cfg.Blob.URL); err != nil {
		return nil, fmt.Errorf("blob.url: %w", redact.Error(err))
	}
	// The stack's layers, and the sidecar's own probes, go through the same metrics.
	s.storage, s.blobs = (&archive.StackOptions{MeterProvider: s.provider}).Stores(s.storage, s.blobs)
	s.checkStores(ctx)
	if s.schedules, err = backends.OpenSchedule(ctx, cfg.Schedule.URL); err != nil {
		return nil, fmt.Errorf("schedule.url: %w", redact.Error(err))
	}
	if s.stack, err = archive.DefaultStack(s.storage, s.blobs, &archive.StackOptions{CompressedLevels: cfg.Stack.CompressedLevels,
		BlobLayout: cfg.Blob.Layout, SegmentGrace: cfg.Blob.GCGrace,
		Now: func() time.Time { return s.now() }}); err != nil { // s.now, which tests move, read at each call
		return nil, err
	}
	if s.scrubMetrics, err = newScrubMetrics(s.provider); err != nil {
		return nil, err
	}
	if s.gcMetrics, err = newGCMetrics(s.provider); err != nil {
		return nil, err
	}
	s.checkLayout(ctx, cfg.Stack.CompressedLevels)
	s.feed = newFeed(cfg.Residency.TTL, s.now)
	sweepOpts := sweeper.Options{
		Residency:        s.feed.isResident,
		Shards:           s.feed.shards,
		StandDown:        s.feed.standDown,
		StandDownReasons: []string{StandDownResidencyStale},
		MeterProvider:    s.provider,
		Logger:           log.With("component", "sweep"),
		Now:              func() time.Time { return s.now() }, // the lag's ages on the clock tests move
	}
	if built(opts).noExecutor {
		// No executor: nothing is resident and no feed can go stale.
		sweepOpts.Residency, sweepOpts.StandDown, sweepOpts.StandDownReasons = nil, nil, nil
	}
	if s.sweeper, err = sweeper.New(cfg.SweeperConfig(), s.stack, sweepOpts); err != nil {
		return nil, err
	}
	handler := &schedule.ArchiveHandler{Stack: s.stack, Store: s.schedules}
	schedCfg := cfg.ScheduleConfig(owner())
	schedCfg.MeterProvider = s.provider
	if s.scheduler, err = schedule.NewScheduler(s.schedules, handler.Run, schedule.OwnedShards(s.feed.ownedShards), schedCfg, log.With("component", "scheduler")); err != nil {
		return nil, err
	}
	return s, nil
}

// startupCheckTimeout bounds the start-up look at the stores.
const startupCheckTimeout = 3 * time.Second

// checkStores makes one read of the indexed storage and one of the blob store, through their
// instruments, and logs a warning if either fails: an operator learns at once that a store does not
// answer, and /metrics shows the latency histograms (with their buckets) from start-up rather than
// from the first sweep. A store that is down does not stop the start: the sweep stands down and
// retries on its own.
func (s *Sidecar) checkStores(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, startupCheckTimeout)
	defer cancel()
	if _, err := s.storage.Exists(ctx, "strata", "startup"); err != nil {
		s.log.Warn("storage does not answer at start-up", "err", err)
	}
	if _, err := s.blobs.List(ctx, "strata-startup/"); err != nil {
		s.log.Warn("blob store does not answer at start-up", "err", err)
	}
}

// checkLayout looks, once at start-up, for keys of the layout before buckets in the namespaces the
// stack keeps: they are never swept or read, and an operator must drain them with the release that
// wrote them. A store that does not answer was logged by checkStores already.
func (s *Sidecar) checkLayout(ctx context.Context, levels int) {
	ctx, cancel := context.WithTimeout(ctx, startupCheckTimeout)
	defer cancel()
	var namespaces []string
	for _, m := range oplog.Modes {
		namespaces = append(namespaces, oplog.PrimaryNamespace(m))
		for l := 1; l <= levels; l++ {
			namespaces = append(namespaces, oplog.CompressedNamespace(m, l))
		}
	}
	if ns, key, found, err := UnbucketedKey(ctx, s.storage, namespaces); err == nil && found {
		s.log.Error("storage holds keys without a bucket prefix, of the layout before buckets (DESIGN §11): strata never "+
			"reads or sweeps them; drain them with the release that wrote them (strata sweep --once), see docs/storage-format.md",
			"namespace", ns, "key", key)
	}
}

// UnbucketedKey returns the first key of the namespaces that sorts outside every bucket's range (below
// "0000/" or at "4000/" and above): a key no agent of the bucketed layout is stored under. Keys inside
// the range that still lack a prefix are the sweep's unparseable ones, met as it walks.
func UnbucketedKey(ctx context.Context, st is.Storage, namespaces []string) (ns, key string, found bool, err error) {
	outside := []is.KeyRange{{End: is.BucketPrefix(0)}, {Start: is.BucketPrefix(is.Buckets)}}
	for _, ns := range namespaces {
		for _, r := range outside {
			for from := (is.Resume{}); ; {
				page, err := st.ScanStable(ctx, ns, r, from, 1)
				if err != nil {
					return "", "", false, err
				}
				if len(page.Keys) > 0 {
					return ns, page.Keys[0], true, nil
				}
				if page.Done {
					break
				}
				from = page.Next
			}
		}
	}
	return "", "", false, nil
}

// owner names this process in scheduled rows' leases.
func owner() string {
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid())
}

// observeLimiter exports the storage limiter's wait and occupancy.
func observeLimiter(mp metric.MeterProvider, lim is.Limited) error {
	meter := mp.Meter("github.com/stratalog/strata/sidecar")
	wait, err := meter.Float64ObservableCounter("strata_storage_limiter_wait", metric.WithUnit("s"),
		metric.WithDescription("Time operations spent queued for a storage concurrency slot (max_concurrent_ops)."))
	if err != nil {
		return err
	}
	inFlight, err := meter.Int64ObservableGauge("strata_storage_limiter_in_flight",
		metric.WithDescription("Storage operations holding a concurrency slot now."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := lim.LimiterStats()
		o.ObserveFloat64(wait, st.WaitTotal.Seconds())
		o.ObserveInt64(inFlight, st.InFlight)
		return nil
	}, wait, inFlight)
	return err
}

func (s *Sidecar) storageStatus() map[string]any {
	out := map[string]any{}
	if s.limits != nil {
		st := s.limits.LimiterStats()
		out["max_concurrent_ops"] = st.Limit
		out["in_flight"] = st.InFlight
		out["waiting"] = st.Waiting
		out["wait_seconds_total"] = st.WaitTotal.Seconds()
	}
	return out
}

// Stack is the oplog stack the sidecar sweeps.
func (s *Sidecar) Stack() *oplog.Stack { return s.stack }

// Sweeper is the sidecar's sweep.
func (s *Sidecar) Sweeper() *sweeper.Sweeper { return s.sweeper }

// Schedules is the scheduled_actions store.
func (s *Sidecar) Schedules() schedule.Store { return s.schedules }

// Storage is the (instrumented) indexed storage.
func (s *Sidecar) Storage() is.Storage { return s.storage }

// Run serves the API on http.listen and runs the sweep, the scheduler and the segment collector (every
// blob.gc_interval) until ctx is cancelled. It
// refuses to serve writes on a non-loopback listener without a token. On cancellation it stops taking
// requests, gives the agents being archived sweep.shutdown_grace to finish (then cuts them), and returns.
func (s *Sidecar) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on a listener of the caller's.
func (s *Sidecar) Serve(ctx context.Context, ln net.Listener) error {
	if s.cfg.HTTP.Token == "" && !config.IsLoopback(ln.Addr().String()) {
		ln.Close()
		return fmt.Errorf("http.listen %s is not a loopback address and http.token is empty: refusing to serve writes without a token", ln.Addr())
	}
	s.boundAddr = ln.Addr().String()
	if h := s.cfg.HTTP; 2*h.BodyTimeout >= s.cfg.Residency.TTL {
		s.log.Warn("a PUT /v1/residency may wait up to twice http.body_timeout behind a slow one, which is not under residency.ttl: "+
			"one slow client could let the residency feed go stale and stand the sweep down", "body_timeout", h.BodyTimeout, "ttl", s.cfg.Residency.TTL)
	}
	// Every stage of a request is bounded, so that a client that stalls holds nothing but its own
	// connection: its headers by readHeaderTimeout, its body by http.body_timeout (bodyDeadline, set
	// per request so that a PUT waiting its turn is not charged for the wait), the wait for its next
	// request by http.idle_timeout. There is no write timeout: POST /v1/sweep answers when its tick
	// ends. The server's own complaints (a bad request line, a handler's panic) go to the sidecar's
	// log, so a JSON log stays JSON.
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: s.cfg.HTTP.IdleTimeout,
		ErrorLog: slog.NewLogLogger(s.log.With("component", "http").Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	s.log.Info("strata is serving", "listen", ln.Addr().String(), "storage", redact.URL(s.cfg.Storage.URL),
		"sweep", s.cfg.Sweep.Enabled, "routes", len(s.sweeper.Routes()))

	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.sweeper.Run(ctx); err != nil {
			s.log.Error("sweep stopped", "err", err)
		}
	})
	wg.Go(func() {
		if err := s.scheduler.Run(ctx); err != nil {
			s.log.Error("scheduler stopped", "err", err)
		}
	})
	wg.Go(func() { s.collectLoop(ctx) })
	wg.Go(func() { s.scrubLoop(ctx) })

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server failed", "err", err)
		}
	}
	s.log.Info("draining: the agents under way get sweep.shutdown_grace to finish", "grace", s.cfg.Sweep.ShutdownGrace)
	s.baseCancel()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	wg.Wait()
	s.log.Info("stopped")
	return err
}

// readHeaderTimeout bounds how long a request's line and headers may take to arrive.
const readHeaderTimeout = 10 * time.Second

// closeTimeout bounds Close: a store whose server stopped answering may take far longer to close
// (pgxpool waits up to 15 s for each connection it cancelled), and a process on its way out has
// nothing to wait for. Nothing is lost by not waiting: every operation has returned by then, and a
// healthy store closes in milliseconds.
const closeTimeout = 2 * time.Second

// Close releases the stores, waiting at most closeTimeout for them. Call it after Run returns.
func (s *Sidecar) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.baseCancel()
		closers := []interface{ Close() error }{s.storage, s.blobs, s.schedules}
		if s.provider != nil {
			closers = append(closers, closerFunc(func() error { return s.provider.Shutdown(context.Background()) }))
		}
		errs := make(chan error, len(closers))
		for _, c := range closers {
			if c == nil {
				errs <- nil
				continue
			}
			go func() { errs <- c.Close() }()
		}
		timeout := time.NewTimer(closeTimeout)
		defer timeout.Stop()
		var all []error
		for range closers {
			select {
			case e := <-errs:
				all = append(all, e)
			case <-timeout.C:
				all = append(all, fmt.Errorf("gave up closing the stores after %s (a server that stopped answering?)", closeTimeout))
				err = errors.Join(all...)
				return
			}
		}
		err = errors.Join(all...)
	})
	return err
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
