// Package app wires the msgx service from its configuration: the store, the
// brokers, the mailboxes and their pollers, the inbox streams with the
// processors a Registry names, the pipelines, the outbox relay, the HTTP
// ingress and the admin listener (admin API, web console, /metrics,
// /healthz, /readyz); and it stops them in order: intake first, then the
// work in flight.
package app

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/admin/console"
	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/buildinfo"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/httpserve"
	"github.com/msgx/msgx/internal/tlsfiles"
	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/source/brokersource"
	"github.com/msgx/msgx/source/httpingress"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

// Unavailable is the admin's answer for the queries no pipeline provides.
const Unavailable = "not available: the SIS pipeline is not enabled"

// App is a wired service. New opens and starts the connections; Run serves
// until its context ends.
type App struct {
	cfg *config.Config
	// cloudEvents are the CloudEvents descriptions of the targets whose
	// processors give one (CloudEventsWriter).
	cloudEvents map[string]outbox.CloudEvents
	log         *slog.Logger
	clock       clock.Clock
	fp          *failpoint.Set
	db          *store.DB
	metrics     *prometheus.Registry
	tracing     *tracing.Provider
	// owner is the lease owner of this process's streams: the configured
	// instance id and a token of this run (inbox.OwnerFor).
	owner string

	brokers   map[string]*broker.Broker
	health    []*brokerHealth
	closers   []func()
	mailboxes map[string]*mailbox.Table
	mysql     map[string]*sql.DB
	streams   []*stream
	relay     *outbox.Relay
	// wal is the WAL relay (outbox.mode wal); relay is then its table relay.
	wal       *outbox.WALRelay
	pipelines []namedPipeline
	admin     *admin.Server
	console   *console.Console

	adminSrv, ingSrv *httpserve.Server
	// stopping makes /readyz fail from the moment a stop begins, so that a
	// load balancer stops sending before the ingress closes.
	stopping atomic.Bool
}

type stream struct {
	name        string
	targets     []string // the outbox targets its processor enqueues to
	engine      *inbox.Engine
	poller      *mailbox.Poller
	table       *mailbox.Table
	lastSuccess atomic.Int64 // unix nanoseconds
}

type namedPipeline struct {
	name string
	p    *Pipeline
}

// Option configures New.
type Option func(*options)

type options struct {
	logOut io.Writer
	env    func(string) string
	tp     trace.TracerProvider
	clock  clock.Clock
	fp     *failpoint.Set
	build  buildinfo.Info
}

// WithLogOutput sets where logs go (default stderr).
func WithLogOutput(w io.Writer) Option { return func(o *options) { o.logOut = w } }

// WithTracerProvider traces with tp instead of the provider the
// configuration and the OTEL_* variables select (the caller flushes and
// shuts it down).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tp = tp } }

// WithClock sets the host clock every component reads (default the wall
// clock). The reliability campaign runs instances on shifted clocks
// (clock.Offset) to show that what several hosts compare comes from the
// database's clock.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithFailpoints arms failpoints in the components (default none): a test
// setting with which the reliability campaign makes the process kill itself
// inside the windows that matter. The set logs through the service's logger.
func WithFailpoints(s *failpoint.Set) Option { return func(o *options) { o.fp = s } }

// WithBuildInfo sets what the binary knows of its build, exported as
// msgx_build_info (default: the build read from the binary, no adapters).
func WithBuildInfo(in buildinfo.Info) Option { return func(o *options) { o.build = in } }

// New wires the service: it opens (and migrates) the store, starts the
// brokers, opens the mailboxes, builds every stream, pipeline and the relay,
// and binds the listeners. On error everything opened is closed again.
func New(ctx context.Context, cfg *config.Config, reg *Registry, opts ...Option) (_ *App, err error) {
	o := options{logOut: os.Stderr, env: os.Getenv, clock: clock.Real{}}
	for _, opt := range opts {
		opt(&o)
	}
	a := &App{cfg: cfg, log: newLogger(cfg.Log, o.logOut), clock: o.clock, owner: inbox.OwnerFor(cfg.InstanceID), brokers: map[string]*broker.Broker{}, mailboxes: map[string]*mailbox.Table{}, mysql: map[string]*sql.DB{}}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout.D())
			defer cancel()
			a.close(cctx)
		}
	}()
	a.fp = o.fp.With(failpoint.WithLogger(a.log))
	a.metrics = prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "msgx_service_info", Help: "1, labelled with the configuration's profile and shadow mode.",
		ConstLabels: prometheus.Labels{"profile": cfg.Profile, "shadow": strconv.FormatBool(cfg.Shadow)}})
	info.Set(1)
	if o.build.GoVersion == "" {
		o.build = buildinfo.Read("", nil)
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "msgx_build_info",
		Help: "1, labelled with the binary's version, VCS revision, whether its tree was modified, its Go version and the broker adapters compiled in.",
		ConstLabels: prometheus.Labels{"version": o.build.Version, "revision": o.build.Revision, "modified": strconv.FormatBool(o.build.Modified),
			"goversion": o.build.GoVersion, "adapters": strings.Join(o.build.Adapters, ",")}})
	build.Set(1)
	a.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), info, build)

	if o.tp != nil {
		a.tracing = tracing.Wrap(o.tp)
	} else if a.tracing, err = tracing.New(ctx, tracing.Enabled(cfg.Tracing.Enabled, o.env), cfg.Tracing.ServiceName); err != nil {
		return nil, err
	}
	sopts := []store.Option{store.WithLogger(a.log)}
	if cfg.Store.MaxConns > 0 {
		sopts = append(sopts, store.WithMaxConns(int32(cfg.Store.MaxConns)))
	}
	if *cfg.Store.Migrate {
		sopts = append(sopts, store.WithMigrate(Schema(cfg, reg)...))
	}
	if a.db, err = a.openStore(ctx, sopts); err != nil {
		return nil, err
	}
	if err := a.openBrokers(ctx); err != nil {
		return nil, err
	}
	deps := Deps{DB: a.db, Brokers: a.brokers, Registerer: a.metrics, Logger: a.log, Tracer: a.tracing.Tracer(), Shadow: cfg.Shadow, Clock: a.clock, Failpoints: a.fp}
	if cfg.Outbox.Mode == "wal" {
		deps.OutboxMode = outbox.ModeWAL
	}
	if err := a.openMailboxes(ctx); err != nil {
		return nil, err
	}
	if err := a.buildStreams(ctx, reg, deps); err != nil {
		return nil, err
	}
	if err := a.buildPipelines(ctx, reg, deps); err != nil {
		return nil, err
	}
	if err := a.checkRelayed(); err != nil {
		return nil, err
	}
	if err := a.buildRelay(ctx); err != nil {
		return nil, err
	}
	if err := a.buildAdmin(reg, deps); err != nil {
		return nil, err
	}
	if err := a.buildIngress(); err != nil {
		return nil, err
	}
	return a, nil
}

// openStore opens the store, retrying a server that cannot be reached with
// backoff for store.start-timeout: the store is the one thing the service
// cannot work without, and it may be restarting too. Any other failure (a
// refused login, a failed migration) ends the start at once.
func (a *App) openStore(ctx context.Context, sopts []store.Option) (*store.DB, error) {
	deadline := a.clock.Now().Add(a.cfg.Store.StartTimeout.D())
	retry := backoff.Policy{Initial: time.Second, Max: 15 * time.Second, Multiplier: 2}
	for attempt := 1; ; attempt++ {
		db, err := store.Open(ctx, a.cfg.Store.DSN, sopts...)
		if err == nil {
			if attempt > 1 {
				a.log.Info("store reached", "attempts", attempt)
			}
			return db, nil
		}
		wait := retry.Delay(attempt)
		left := deadline.Sub(a.clock.Now())
		if ctx.Err() != nil || !storeUnreachable(err) || left <= 0 {
			if attempt > 1 {
				return nil, fmt.Errorf("%w (gave up after %d attempts in store.start-timeout %s)", err, attempt, a.cfg.Store.StartTimeout.D())
			}
			return nil, err
		}
		wait = min(wait, left)
		a.log.Warn("store unreachable at start; retrying", "attempt", attempt, "retry_in", wait, "gives_up_in", left.Round(time.Second), "err", err)
		t := a.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (start cancelled while waiting for the store)", err)
		case <-t.C():
		}
	}
}

// storeUnreachable reports whether a failure to open the store says that
// the server could not be reached or is not accepting connections now
// (starting, shutting down), as opposed to refusing us.
func storeUnreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exceptions; 57P01-57P03: shutting down,
		// crashed, starting up.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED)
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	ho := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// Logger is the service's logger.
func (a *App) Logger() *slog.Logger { return a.log }

// AdminAddr is the admin listener's address ("" when disabled).
func (a *App) AdminAddr() string { return addr(a.adminSrv) }

// IngressAddr is the HTTP ingress's address ("" when disabled).
func (a *App) IngressAddr() string { return addr(a.ingSrv) }

func addr(s *httpserve.Server) string {
	if s == nil {
		return ""
	}
	return s.Addr().String()
}

// listener binds one of the HTTP listeners with its limits, its TLS (the
// certificate reloaded when its files change; client certificates verified
// when given, against clientCAs) or the proxies trusted to terminate TLS in
// front of it.
func (a *App) listener(name, listen string, tc config.ListenerTLS, proxies []string, l config.HTTPLimits, h http.Handler) (*httpserve.Server, error) {
	trusted, err := config.ParsePrefixes(proxies)
	if err != nil {
		return nil, fmt.Errorf("%s.trusted-proxies: %w", name, err)
	}
	limits := httpserve.DefaultLimits()
	limits.ReadHeaderTimeout, limits.ReadTimeout = l.ReadHeaderTimeout.D(), l.ReadTimeout.D()
	limits.WriteTimeout, limits.IdleTimeout = l.WriteTimeout.D(), l.IdleTimeout.D()
	limits.MinBodyRate, limits.MaxConnsPerClient = l.MinBodyRate, l.MaxConnsPerClient
	cfg := httpserve.Config{Name: name, Handler: h, Limits: limits, TrustedProxies: trusted, Logger: a.log, Registerer: a.metrics, Clock: a.clock}
	if tc.On() {
		cert, err := tlsfiles.Load(tc.CertFile, tc.KeyFile, tlsfiles.WithName(name), tlsfiles.WithLogger(a.log), tlsfiles.WithRegisterer(a.metrics), tlsfiles.WithClock(a.clock))
		if err != nil {
			return nil, fmt.Errorf("%s.tls: %w", name, err)
		}
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert.GetCertificate}
		if tc.ClientCAFile != "" {
			if cfg.TLS.ClientCAs, err = tlsfiles.LoadCAPool(tc.ClientCAFile); err != nil {
				return nil, fmt.Errorf("%s.tls.client-ca-file: %w", name, err)
			}
			// Senders without certificates (by address or token) still
			// connect; a certificate given must verify.
			cfg.TLS.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("%s.listen: %w", name, err)
	}
	return httpserve.New(ln, cfg), nil
}

// openBrokers builds every broker and tries to start it once. A broker that
// does not start (unreachable, or refusing the login: the two look alike) is
// kept, not ready with the reason, and Run keeps starting it in the
// background (connect): everything that does not need it runs meanwhile,
// the relay holds its events pending, and its consumers start when it does.
func (a *App) openBrokers(ctx context.Context) error {
	connected := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgx_broker_connected",
		Help: "1 once the broker has started (connected), 0 while the service keeps trying to start it."}, []string{"broker"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_broker_start_failures_total",
		Help: "Failed attempts to start (connect) the broker, at the service's start and in the background after."}, []string{"broker"})
	if err := errors.Join(a.metrics.Register(connected), a.metrics.Register(failures)); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Brokers)) {
		c := a.cfg.Brokers[name]
		drv, err := newDriver(name, c, a.cfg.InstanceID, a.log, a.metrics)
		if err != nil {
			return fmt.Errorf("broker %s: %w", name, err)
		}
		b := broker.New(name, drv, broker.WithLogger(a.log), broker.WithRegisterer(a.metrics), broker.WithClock(a.clock))
		h := &brokerHealth{b: b, window: 30 * time.Second, pingTimeout: 2 * time.Second, clock: a.clock,
			connected: connected.WithLabelValues(name), failures: failures.WithLabelValues(name), log: a.log, hint: startHint(c)}
		a.brokers[name] = b
		a.health = append(a.health, h)
		if err := h.start(ctx); err != nil {
			if ctx.Err() != nil {
				return err
			}
			a.log.Warn("broker did not start; the service starts without it and keeps trying in the background",
				"broker", name, "err", err)
		}
	}
	return nil
}

func (a *App) openMailboxes(ctx context.Context) error {
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Mailboxes)) {
		c := a.cfg.Mailboxes[name]
		opts := []mailbox.Option{mailbox.WithTable(c.Table), mailbox.WithProcessedValue(c.ProcessedValue)}
		var (
			t   *mailbox.Table
			err error
		)
		if c.Kind == config.MailboxMySQL {
			dsn := c.DSN
			if !strings.Contains(dsn, "parseTime=") {
				dsn += map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + "parseTime=true"
			}
			var db *sql.DB
			if db, err = sql.Open("mysql", dsn); err != nil {
				return fmt.Errorf("mailbox %s: %w", name, err)
			}
			a.mysql[name] = db
			if perr := db.PingContext(ctx); perr != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("mailbox %s: %w", name, perr)
				}
				// Only the store is needed to work: the streams on this
				// mailbox wait for it (their pollers retry with backoff
				// and /readyz names it), the rest runs.
				a.log.Warn("mailbox unreachable; the service starts without it and its pollers keep trying", "mailbox", name, "err", perr)
			}
			t, err = mailbox.NewMySQL(db, opts...)
		} else {
			t, err = mailbox.NewStore(a.db, opts...)
		}
		if err != nil {
			return fmt.Errorf("mailbox %s: %w", name, err)
		}
		a.mailboxes[name] = t
	}
	return nil
}

// latePolicy translates a mailbox's late-rows setting (validated: refuse
// or process).
func latePolicy(v string) mailbox.LatePolicy {
	if v == config.LateRowsProcess {
		return mailbox.ProcessLate
	}
	return mailbox.RefuseLate
}

// startPosition translates a mailbox's configured start into the poller's
// option; it only matters for a stream that has no watermark yet. Without
// one the poller refuses to guess and fails with mailbox.ErrNoStart.
// from-now is the newest mailbox id when the service starts, read here
// rather than at the poller's first scan, so that every row written once
// the service reports it is serving is processed.
func (a *App) startPosition(ctx context.Context, stream, mbName string) ([]mailbox.PollerOption, error) {
	c := a.cfg.Mailboxes[mbName]
	if c.Start == "" {
		return nil, nil
	}
	pos, err := config.ParseStart(c.Start)
	if err != nil {
		return nil, err
	}
	switch pos.Mode {
	case "from-id":
		return []mailbox.PollerOption{mailbox.WithStart(mailbox.FromID(pos.After))}, nil
	case "from-now":
		if _, ok, err := inbox.LoadCursor(ctx, a.db, stream); err != nil || ok {
			return []mailbox.PollerOption{mailbox.WithStart(mailbox.FromNow())}, err
		}
		max, err := a.mailboxes[mbName].MaxID(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("mailbox %s: newest id: %w", mbName, err)
			}
			// The mailbox is unreachable: the poller reads the newest id
			// at its first scan that reaches it instead.
			a.log.Warn("mailbox unreachable: the stream's from-now start is the newest id when the mailbox is first read", "stream", stream, "mailbox", mbName, "err", err)
			return []mailbox.PollerOption{mailbox.WithStart(mailbox.FromNow())}, nil
		}
		return []mailbox.PollerOption{mailbox.WithStart(mailbox.FromID(max))}, nil
	}
	return []mailbox.PollerOption{mailbox.WithStart(mailbox.FromBeginning())}, nil
}

func (a *App) buildStreams(ctx context.Context, reg *Registry, deps Deps) error {
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Streams)) {
		c := a.cfg.Streams[name]
		factory := reg.processors[c.Processor]
		if factory == nil {
			if a.cfg.Defaulted {
				a.log.Warn("stream skipped: its processor is not part of this build", "stream", name, "processor", c.Processor)
				continue
			}
			return fmt.Errorf("streams.%s.processor: no processor %q in this build (registered: %s)", name, c.Processor, strings.Join(reg.Processors(), ", "))
		}
		proc, err := factory(ctx, deps, name, c.Options)
		if err != nil {
			return fmt.Errorf("stream %s: processor %s: %w", name, c.Processor, err)
		}
		s := &stream{name: name}
		// A typed processor says so on itself, not on its adapter.
		if tw, ok := inbox.As[TargetWriter](proc); ok {
			s.targets = tw.OutboxTargets()
		}
		if cw, ok := inbox.As[CloudEventsWriter](proc); ok {
			if a.cloudEvents == nil {
				a.cloudEvents = map[string]outbox.CloudEvents{}
			}
			maps.Copy(a.cloudEvents, cw.CloudEvents())
		}
		opts := []inbox.Option{
			inbox.WithLogger(a.log), inbox.WithRegisterer(a.metrics), inbox.WithClock(a.clock), inbox.WithOwner(a.owner),
			inbox.WithGroupSize(c.GroupSize), inbox.WithMaxAttempts(c.MaxAttempts),
			inbox.WithBackoff(streamBackoff(c)),
			inbox.WithHeadDeadline(c.HeadDeadline.D()), inbox.WithPollInterval(c.PollInterval.D()), inbox.WithLease(c.Lease.D()),
			inbox.WithShadow(a.cfg.Shadow), inbox.WithFailpoints(a.fp),
			inbox.WithOnCommit(func(cm inbox.Committed) {
				if len(cm.IDs) > 0 {
					s.lastSuccess.Store(a.clock.Now().UnixNano())
				}
			}),
		}
		if c.ArchiveAfter > 0 {
			opts = append(opts, inbox.WithArchive(c.ArchiveAfter.D(), inbox.DefaultArchiveEvery, inbox.DefaultArchiveBatch))
		}
		if c.Mailbox != "" {
			mc := a.cfg.Mailboxes[c.Mailbox]
			s.table = a.mailboxes[c.Mailbox]
			start, err := a.startPosition(ctx, name, c.Mailbox)
			if err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			s.poller = mailbox.NewPoller(s.table, a.db, name, append([]mailbox.PollerOption{mailbox.WithPollerLogger(a.log), mailbox.WithPollerClock(a.clock),
				mailbox.WithPollInterval(mc.PollInterval.D()), mailbox.WithClaimBatch(mc.ClaimBatch),
				mailbox.WithScansPerCommit(mc.ScansPerCommit), mailbox.WithMaxCommitDelay(mc.MaxCommitDelay.D()),
				mailbox.WithLateRows(latePolicy(mc.LateRows), 0),
				mailbox.WithUnreadableAfter(mc.UnreadableAfter.D())}, start...)...)
			if err := a.metrics.Register(s.poller); err != nil {
				return fmt.Errorf("stream %s: poller metrics: %w", name, err)
			}
			opts = append(opts, inbox.WithSource(s.poller))
			if *c.Backfill && !a.cfg.Shadow {
				opts = append(opts, inbox.WithBackfill(s.table), inbox.WithBackfillSweep(c.BackfillEvery.D(),
					inbox.DefaultBackfillRetry(), c.OverdueBackfill.D(), c.BackfillBatch))
			}
		}
		for _, sn := range slices.Sorted(maps.Keys(c.Sources)) {
			src, err := a.brokerSource(name, sn, c.Sources[sn], s, deps)
			if err != nil {
				return fmt.Errorf("stream %s: source %s: %w", name, sn, err)
			}
			opts = append(opts, inbox.WithSource(src))
		}
		if s.engine, err = inbox.New(a.db, name, proc, append(opts, inbox.WithTracer(deps.Tracer))...); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		a.streams = append(a.streams, s)
	}
	return nil
}

// brokerSource builds a broker listener feeding stream s: through the
// stream's mailbox when it has one, as the HTTP ingress does, or with ids of
// the stream's own.
func (a *App) brokerSource(streamName, name string, c config.Source, s *stream, deps Deps) (*brokersource.Source, error) {
	opts := []brokersource.Option{brokersource.WithName(name), brokersource.WithMaxBytes(c.MaxBytes),
		brokersource.WithLogger(a.log), brokersource.WithRegisterer(a.metrics), brokersource.WithTracer(deps.Tracer),
		brokersource.WithStopTimeout(workBudget(a.cfg.ShutdownTimeout.D())), brokersource.WithClock(a.clock)}
	if s.table != nil {
		opts = append(opts, brokersource.WithMailbox(s.table, s.poller.Nudge))
	}
	return brokersource.New(a.brokers[c.Broker], broker.Subscription{Topic: c.Topic, Group: c.Group}, a.db, streamName, opts...)
}

func (a *App) buildPipelines(ctx context.Context, reg *Registry, deps Deps) error {
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Pipelines)) {
		c := a.cfg.Pipelines[name]
		if !*c.Enabled {
			continue
		}
		factory := reg.pipelines[name]
		if factory == nil {
			return fmt.Errorf("pipelines.%s: no pipeline %q in this build (registered: %s)", name, name, strings.Join(reg.Pipelines(), ", "))
		}
		p, err := factory(ctx, deps, PipelineSpec{Name: name, Broker: a.brokers[c.Broker], Options: c.Options})
		if err != nil {
			return fmt.Errorf("pipeline %s: %w", name, err)
		}
		a.pipelines = append(a.pipelines, namedPipeline{name: name, p: p})
	}
	return nil
}

// checkRelayed refuses to start when a stream's processor or a pipeline
// enqueues outbox events for a target that relay.targets lacks: nothing
// would ever publish them, and they would pile up PENDING without an error
// anywhere. Refusing at start puts the reason where an operator looks first.
func (a *App) checkRelayed() error {
	var problems []string
	missing := func(who string, targets []string) {
		for _, t := range targets {
			if _, ok := a.cfg.Relay.Targets[t]; !ok {
				problems = append(problems, fmt.Sprintf("%s enqueues events for outbox target %q, but relay.targets has no %q: they would stay PENDING for ever; add relay.targets.%q (broker, lane)",
					who, t, t, t))
			}
		}
	}
	for _, s := range a.streams {
		missing(fmt.Sprintf("streams.%s (processor %s)", s.name, a.cfg.Streams[s.name].Processor), s.targets)
	}
	for _, p := range a.pipelines {
		missing("pipelines."+p.name, p.p.Targets)
	}
	if len(problems) > 0 {
		return fmt.Errorf("no relay for the events of %d target(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return nil
}

// streamBackoff is the inbox's retry delays with the attempts and delays the
// configuration sets; the rest of the policy (the growth) is the inbox's.
func streamBackoff(c config.Stream) backoff.Policy {
	p := inbox.DefaultBackoff()
	p.MaxAttempts, p.Initial, p.Max = c.MaxAttempts, c.Backoff.Initial.D(), c.Backoff.Max.D()
	return p
}

// relayRetry is the relay's retry policy with the attempts and delays the
// configuration sets; the rest of it (growth, jitter) is the relay's.
func relayRetry(rc config.Relay) backoff.Policy {
	p := outbox.DefaultRetry()
	p.MaxAttempts, p.Initial, p.Max = rc.MaxAttempts, rc.Backoff.Initial.D(), rc.Backoff.Max.D()
	return p
}

// relayPolicy is the relay's retry budget, lease, timeouts and periods as
// the configuration sets them.
func relayPolicy(rc config.Relay) []outbox.Option {
	return []outbox.Option{
		outbox.WithRetry(relayRetry(rc)),
		outbox.WithLease(rc.Lease.D()), outbox.WithPublishTimeout(rc.PublishTimeout.D()),
		outbox.WithPollInterval(rc.PollInterval.D()), outbox.WithRetention(rc.Retention.D()),
	}
}

func (a *App) buildRelay(ctx context.Context) error {
	rc := a.cfg.Relay
	var brought []outbox.Option
	for _, p := range a.pipelines {
		brought = append(brought, p.p.Relay...)
	}
	if len(rc.Targets) == 0 && len(brought) == 0 {
		return nil
	}
	opts := append([]outbox.Option{
		outbox.WithLogger(a.log), outbox.WithRegisterer(a.metrics), outbox.WithClock(a.clock), outbox.WithFailpoints(a.fp),
		outbox.WithTracer(a.tracing.Tracer()),
	}, relayPolicy(rc)...)
	opts = append(opts, brought...)
	for _, name := range slices.Sorted(maps.Keys(rc.Targets)) {
		t := rc.Targets[name]
		kind, err := outbox.ParseLaneKind(t.Lane)
		if err != nil {
			return err
		}
		opts = append(opts, outbox.Target(name, a.brokers[t.Broker], kind, outbox.Batch(t.Batch), outbox.Workers(t.Workers),
			outbox.FlushPeriod(t.FlushPeriod.D()), outbox.FlushLimit(t.FlushLimit), outbox.WithCloudEvents(a.cloudEvents[name])))
	}
	if a.cfg.Outbox.Mode == "wal" {
		return a.buildWALRelay(ctx, opts)
	}
	var err error
	a.relay, err = outbox.NewRelay(a.db, opts...)
	return err
}

func (a *App) buildAdmin(reg *Registry, deps Deps) error {
	cfg := admin.Config{
		DB: a.db, ReadToken: a.cfg.Admin.ReadToken, OperatorToken: a.cfg.Admin.OperatorToken, Tokens: adminTokens(a.cfg.Admin),
		Hosts: adminHosts(a.cfg.Admin), OpenNetwork: a.cfg.Admin.AllowOpenNetwork,
		Gatherer: a.metrics, Logger: a.log, Queries: map[string]admin.QueryFunc{}, HostClock: a.clock,
		Unavailable: map[string]string{"requests": Unavailable, "flights": Unavailable,
			"flight-history": Unavailable, "message-effects": Unavailable},
	}
	if a.cfg.Admin.AllowOpenNetwork && a.cfg.Admin.NoAdminToken() {
		a.log.Warn("admin: admin.allow-open-network: the admin listener has no token and serves every client that reaches it, replays included",
			"listen", a.cfg.Admin.Listen)
	}
	for _, s := range a.streams {
		st := admin.Stream{Name: s.name, Engine: s.engine, Overdue: a.cfg.Streams[s.name].OverdueBackfill.D(),
			LastSuccess: func() time.Time {
				if n := s.lastSuccess.Load(); n != 0 {
					return time.Unix(0, n)
				}
				return time.Time{}
			}}
		if s.poller != nil {
			st.Mailbox = s.poller.Unreadable
		}
		cfg.Streams = append(cfg.Streams, st)
	}
	for _, s := range a.streams {
		// A stream whose lease a live twin of this instance id took over is
		// no longer pumped here (inbox.ErrSuperseded).
		cfg.Checks = append(cfg.Checks, admin.Check{Name: "stream " + s.name, Check: func(context.Context) error { return s.engine.Superseded() }})
	}
	for _, name := range slices.Sorted(maps.Keys(a.mailboxes)) {
		cfg.Checks = append(cfg.Checks, admin.Check{Name: "mailbox " + name, Check: a.mailboxCheck(name)})
	}
	for _, h := range a.health {
		cfg.Checks = append(cfg.Checks, admin.Check{Name: "broker " + h.b.Name(), Check: h.check})
	}
	for _, p := range a.pipelines {
		if p.p.Check != nil {
			cfg.Checks = append(cfg.Checks, admin.Check{Name: "pipeline " + p.name, Check: p.p.Check})
		}
	}
	cfg.Checks = append(cfg.Checks, admin.Check{Name: "serving", Check: func(context.Context) error {
		if a.stopping.Load() {
			return errors.New("stopping")
		}
		return nil
	}})
	if a.relay != nil {
		cfg.Targets = slices.Sorted(maps.Keys(a.cfg.Relay.Targets))
		cfg.Lag = a.relay.Lag
		cfg.TargetStates = a.relay.Targets
	}
	configured := lineNames(Schema(a.cfg, reg))
	if a.wal != nil {
		cfg.WAL = a.wal.Status
	}
	for name, f := range reg.queries {
		if !containsLines(configured, reg.querySchema[name]) {
			continue // its tables are not this configuration's: Unavailable
		}
		cfg.Queries[name] = f(deps)
	}
	srv, err := admin.New(cfg)
	if err != nil {
		return err
	}
	a.admin = srv
	if err := a.metrics.Register(srv.Collector()); err != nil {
		return err
	}
	if a.cfg.Admin.Listen == "" {
		return nil
	}
	if a.console, err = console.New(srv, console.WithLogger(a.log), console.WithGatherer(a.metrics), console.WithClock(a.clock)); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", srv)
	mux.Handle(console.Prefix, a.console)
	mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusSeeOther))
	for _, p := range a.pipelines {
		for pattern, h := range p.p.Handlers {
			mux.Handle(pattern, srv.RequireOperator(h))
		}
	}
	c := a.cfg.Admin
	a.adminSrv, err = a.listener("admin", c.Listen, c.TLS, c.TrustedProxies, c.Limits, mux)
	return err
}

// adminTokens are the configuration's named admin tokens.
func adminTokens(c config.Admin) []admin.Token {
	var out []admin.Token
	for _, name := range slices.Sorted(maps.Keys(c.Tokens)) {
		t := c.Tokens[name]
		scope := admin.Read
		if t.Scope == "operator" {
			scope = admin.Operator
		}
		out = append(out, admin.Token{Name: name, Scope: scope, Secret: t.Secret})
	}
	return out
}

// adminHosts are the names a request to the admin listener may carry in its
// Host: admin.hosts and the listen address's own name.
func adminHosts(c config.Admin) []string {
	hosts := slices.Clone(c.Hosts)
	if host, _, err := net.SplitHostPort(c.Listen); err == nil && host != "" {
		hosts = append(hosts, host)
	}
	return hosts
}

// mailboxCheck is the readiness of a mailbox: its server answers, and no
// stream polling it has failed to read it for its unreadable-after (a
// missing table or a refused login still answers a ping).
func (a *App) mailboxCheck(name string) func(context.Context) error {
	var pollers []*mailbox.Poller
	for _, s := range a.streams {
		if s.poller != nil && a.cfg.Streams[s.name].Mailbox == name {
			pollers = append(pollers, s.poller)
		}
	}
	t := a.mailboxes[name]
	return func(ctx context.Context) error {
		errs := []error{t.Ping(ctx)}
		for _, p := range pollers {
			errs = append(errs, p.CheckReadable(ctx))
		}
		return errors.Join(errs...)
	}
}

func (a *App) buildIngress() error {
	c := a.cfg.Ingress
	if c.Listen == "" {
		return nil
	}
	var s *stream
	for _, st := range a.streams {
		if st.name == c.Stream {
			s = st
		}
	}
	if s == nil {
		if a.cfg.Defaulted {
			a.log.Warn("HTTP ingress off: its stream is not running", "stream", c.Stream)
			return nil
		}
		return fmt.Errorf("ingress.stream: stream %q is not running", c.Stream)
	}
	senders, err := ingressSenders(c.Senders)
	if err != nil {
		return err
	}
	if len(senders) == 0 {
		a.log.Warn("HTTP ingress open: any client that reaches it may post any message, under any SNDR; configure ingress.senders", "addr", c.Listen, "open", c.Open)
	}
	h := httpingress.New(s.table, httpingress.WithEnqueuer(s.engine), httpingress.WithNudge(s.poller.Nudge),
		httpingress.WithMaxBytes(c.MaxBytes), httpingress.WithTimeout(c.Timeout.D()), httpingress.WithLogger(a.log), httpingress.WithClock(a.clock),
		httpingress.WithSenders(senders...), httpingress.WithRegisterer(a.metrics))
	mux := http.NewServeMux()
	mux.Handle(httpingress.Path, tracing.WrapIngest(a.tracing.Tracer(), h))
	a.ingSrv, err = a.listener("ingress", c.Listen, c.TLS, c.TrustedProxies, c.Limits, mux)
	return err
}

// ingressSenders translates ingress.senders (validated).
func ingressSenders(m map[string]config.IngressSender) ([]httpingress.Sender, error) {
	var out []httpingress.Sender
	for _, name := range slices.Sorted(maps.Keys(m)) {
		c := m[name]
		nets, err := config.ParsePrefixes(c.Addresses)
		if err != nil {
			return nil, fmt.Errorf("ingress.senders.%s.addresses: %w", name, err)
		}
		out = append(out, httpingress.Sender{Name: name, Networks: nets, Token: c.Token, CertNames: c.CertNames, SNDR: c.SNDR, MaxPerMinute: c.MaxPerMinute})
	}
	return out, nil
}

// Run serves until ctx ends, then stops: the HTTP ingress first (no new
// messages), then the streams, pipelines and relay (work in flight finishes
// or is given back unsettled), then the brokers and the admin listener. The
// whole stop is bounded by one shutdown-timeout, of which the work may take
// all but a reserve kept for closing the brokers. It returns nil after a stop
// asked for by ctx, or the error of a component that failed on its own.
func (a *App) Run(ctx context.Context) error {
	var fatalOnce sync.Once
	fatal := make(chan error, 1)
	fail := func(what string, err error) {
		if err != nil {
			fatalOnce.Do(func() { fatal <- fmt.Errorf("%s: %w", what, err) })
		}
	}
	serve := func(srv *httpserve.Server, what string) {
		if srv == nil {
			return
		}
		a.log.Info(what+" listening", "addr", srv.Addr().String())
		go func() {
			if err := srv.Serve(); !errors.Is(err, http.ErrServerClosed) {
				fail(what, err)
			}
		}()
	}
	serve(a.adminSrv, "admin")

	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var wg sync.WaitGroup
	for _, h := range a.health {
		wg.Go(func() { h.follow(workCtx) })
		wg.Go(func() {
			h.connect(workCtx, backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2})
		})
	}
	if a.console != nil {
		wg.Go(func() { a.console.Sample(workCtx) })
	}
	for _, s := range a.streams {
		wg.Go(func() { fail("stream "+s.name, s.engine.Run(workCtx)) })
	}
	for _, p := range a.pipelines {
		wg.Go(func() { fail("pipeline "+p.name, p.p.Run(workCtx)) })
	}
	switch {
	case a.wal != nil:
		wg.Go(func() { fail("relay", a.wal.Run(workCtx)) })
	case a.relay != nil:
		wg.Go(func() { fail("relay", a.relay.Run(workCtx)) })
	}
	serve(a.ingSrv, "ingress")
	if a.admin != nil {
		// Events already waiting for a target no relay serves (left by an
		// earlier configuration or another build): an ERROR line now, and
		// msgx_relay_unserved_pending at every scrape.
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := a.admin.Unserved(uctx); err != nil {
			a.log.Warn("the outbox could not be checked for targets no relay serves", "err", err)
		}
		cancel()
	}
	a.log.Info("msgx serving", "instance", a.cfg.InstanceID, "lease_owner", a.owner, "profile", a.cfg.Profile, "shadow", a.cfg.Shadow, "streams", len(a.streams),
		"pipelines", len(a.pipelines), "admin", a.AdminAddr(), "ingress", a.IngressAddr())

	var err error
	select {
	case <-ctx.Done():
		a.log.Info("stopping: signal received")
	case err = <-fatal:
		a.log.Error("stopping: a component failed", "err", err)
	}
	a.stopping.Store(true)
	budget := a.cfg.ShutdownTimeout.D()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()
	defer a.close(stopCtx)
	workStop, cancelWork := context.WithTimeout(stopCtx, workBudget(budget))
	defer cancelWork()
	if a.ingSrv != nil {
		if e := a.ingSrv.Shutdown(workStop); e != nil {
			a.log.Warn("ingress: requests still running at the stop deadline", "err", e)
		}
	}
	stopWork()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-workStop.Done():
		a.log.Error("stop deadline passed with work still running; it is abandoned unsettled")
	}
	a.log.Info("stopped")
	return err
}

// workBudget is the part of a stop budget the work may take; the rest, a
// quarter and at most 5 s, is kept for closing the brokers and the store.
func workBudget(budget time.Duration) time.Duration {
	return budget - min(budget/4, 5*time.Second)
}

// close releases everything New opened, in reverse order, within stopCtx:
// what is still closing at its end is abandoned.
func (a *App) close(stopCtx context.Context) {
	if a.adminSrv != nil {
		_ = a.adminSrv.Shutdown(stopCtx)
	}
	if a.ingSrv != nil {
		// Shut down in Run; a listener bound by a New that failed later,
		// or never served, is closed here.
		_ = a.ingSrv.Close()
	}
	if a.relay != nil {
		a.relay.Close()
	}
	for _, n := range slices.Sorted(maps.Keys(a.brokers)) {
		if err := a.brokers[n].Stop(stopCtx); err != nil {
			a.log.Warn("broker stop", "broker", n, "err", err)
		}
	}
	a.brokers = map[string]*broker.Broker{}
	for _, c := range a.closers {
		c()
	}
	a.closers = nil
	for _, db := range a.mysql {
		_ = db.Close()
	}
	a.mysql = map[string]*sql.DB{}
	if a.tracing != nil {
		if err := a.tracing.Shutdown(stopCtx); err != nil {
			a.log.Warn("tracing: flush at stop failed", "err", err)
		}
		a.tracing = nil
	}
	if a.db != nil {
		a.db.Close()
		a.db = nil
	}
}
