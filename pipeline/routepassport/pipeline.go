package routepassport

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

//go:embed sql
var sqlFS embed.FS

// Pipeline consumes route passports and stores them with their events.
type Pipeline struct {
	cfg    config
	db     *store.DB
	b      *broker.Broker
	q      store.Queries
	parser *Parser
	met    *metrics
	log    *slog.Logger
	relay  *outbox.Relay // nil WithRelay(false)
	// wal is the relay in the outbox's WAL mode (WithWALRelay); relay is
	// then its table relay.
	wal *outbox.WALRelay
	// eventLimit is the largest output event the broker can take, as
	// broker.MessageBytes counts it, less the relay's headers (0: no limit).
	eventLimit int

	running atomic.Bool
	// listener is the running subscription (nil between runs), for Check.
	listener atomic.Pointer[broker.Listener]
	// retryMu guards retrying: the records in a transient retry now.
	retryMu  sync.Mutex
	retrying map[*retryState]struct{}
}

// retryState is one retry loop of records that failed transiently.
type retryState struct {
	step     string
	records  string // the first record's identity, and how many more
	since    time.Time
	failures int
	last     error
}

// New builds a pipeline over a migrated PostgreSQL database and a started
// broker.
func New(db *store.DB, b *broker.Broker, opts ...Option) (*Pipeline, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	var errs []error
	if db == nil || b == nil {
		errs = append(errs, errors.New("a database and a broker are required"))
	}
	if cfg.inputTopic == "" || cfg.dlqTopic == "" || cfg.inTopic == "" || cfg.georefTopic == "" || cfg.group == "" {
		errs = append(errs, errors.New("topics and group must not be empty"))
	}
	if cfg.batchSize < 1 || cfg.concurrency < 1 || cfg.ingestWorkers < 1 || cfg.parseWorkers < 1 || cfg.maxRecordBytes < 1 || cfg.dbTimeout <= 0 || cfg.stopTimeout <= 0 || cfg.sourceRetention <= 0 {
		errs = append(errs, errors.New("batch size, concurrency, workers, record limit, timeouts and retention must be positive"))
	}
	if cfg.logger == nil || cfg.clock == nil {
		errs = append(errs, errors.New("logger and clock must not be nil"))
	}
	var limit int
	if b != nil {
		_, limit = b.MessageBytes(&broker.Message{})
	}
	if limit > 0 && cfg.maxRecordBytes > limit-DeadLetterRoom {
		errs = append(errs, fmt.Errorf("the record limit of %d bytes (max-record-bytes) leaves no room for the dead-letter headers "+
			"(%d bytes) under the broker's message limit of %d bytes (max-message-bytes): refused records near the limit "+
			"would reach the dead-letter topic without their payload; lower the record limit to at most %d bytes, "+
			"or raise the broker's limit with its topics' max.message.bytes", cfg.maxRecordBytes, DeadLetterRoom, limit, limit-DeadLetterRoom))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("routepassport: %w", err)
	}
	// PostgreSQL only: the pipeline runs as many instances over one
	// database, which the embedded SQLite store is not for.
	if db.Dialect() != store.Postgres {
		return nil, fmt.Errorf("routepassport: needs PostgreSQL, not %s", db.Dialect())
	}
	q, err := store.LoadQueries(sqlFS, "sql", store.Postgres)
	if err != nil {
		return nil, fmt.Errorf("routepassport: %w", err)
	}
	parser, err := NewParser(cfg.maxRecordBytes, cfg.limits)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg, db: db, b: b, q: q, parser: parser,
		log: cfg.logger.With("pipeline", "route-passport"), retrying: map[*retryState]struct{}{}}
	p.met = newMetrics(cfg.registerer, p.consecutiveFailures, p.oldestUnacknowledged)
	if limit > 0 {
		p.eventLimit = limit - EventHeaderRoom
	}
	if cfg.relay {
		p.met.relay = newRelayMetrics(map[string]string{RouteInTarget: cfg.inTopic, GeoreferenceTarget: cfg.georefTopic})
		// The relay polls rather than wake on each commit (Enqueue's
		// wake-up): see WithWakeOnCommit and docs/routepassport.md.
		ropts := append([]outbox.Option{outbox.WithLogger(p.log), outbox.WithClock(cfg.clock),
			outbox.WithRegisterer(p.met.relay.reg), outbox.WithWakeOnCommit(false)}, cfg.relayOptions...)
		if err := p.buildRelay(db, append(ropts, p.RelayTargets()...)); err != nil {
			return nil, fmt.Errorf("routepassport: relay: %w", err)
		}
		if cfg.registerer != nil {
			if err := cfg.registerer.Register(p.met.relay); err != nil {
				p.relay.Close()
				return nil, fmt.Errorf("routepassport: register relay metrics: %w", err)
			}
		}
	}
	return p, nil
}

// Close releases the relay's database connections. Call it after Run
// returned.
func (p *Pipeline) Close() {
	if p.relay != nil {
		p.relay.Close()
	}
}

// RelayTargets returns the outbox relay targets of the two output topics:
// per-key lanes (key routeId) publishing through the pipeline's broker.
// A service that relays every target in one relay passes them to
// outbox.NewRelay and builds the pipeline WithRelay(false).
func (p *Pipeline) RelayTargets(opts ...outbox.LaneOption) []outbox.Option {
	return []outbox.Option{
		outbox.Target(RouteInTarget, p.b, outbox.PerKey, opts...),
		outbox.Target(GeoreferenceTarget, p.b, outbox.PerKey, opts...),
	}
}

// Run consumes until ctx ends, then stops gracefully: the records in flight
// finish (for at most the stop timeout; unfinished ones are redelivered) and
// the relay gives its claims back. It returns nil after a graceful stop.
func (p *Pipeline) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("routepassport: already running")
	}
	defer p.running.Store(false)
	// A broker the service is still trying to start (unreachable at start):
	// its capabilities and listeners wait for it.
	select {
	case <-p.b.Started():
	default:
		p.log.Warn("route-passport pipeline waiting for its broker to connect", "broker", p.b.Name())
		select {
		case <-p.b.Started():
		case <-ctx.Done():
			return nil
		}
	}
	if err := p.prepareWAL(ctx); err != nil {
		return err
	}
	sub := broker.Subscription{Topic: p.cfg.inputTopic, Group: p.cfg.group, DeadLetterTopic: p.cfg.dlqTopic,
		Concurrency: p.cfg.concurrency, BatchSize: p.cfg.batchSize}
	var (
		l   *broker.Listener
		err error
	)
	if p.cfg.batchSize > 1 && p.b.Capabilities().Batch {
		l, err = p.b.ListenBatch(ctx, sub, p.handle)
	} else {
		l, err = p.b.Listen(ctx, sub, func(ctx context.Context, d *broker.Delivery) error {
			return p.handle(ctx, []*broker.Delivery{d})
		})
	}
	if err != nil {
		return fmt.Errorf("routepassport: listen: %w", err)
	}
	p.listener.Store(l)
	defer p.listener.Store(nil)
	p.log.Info("route-passport pipeline started", "topic", p.cfg.inputTopic, "group", p.cfg.group, "relay", p.cfg.relay)
	var (
		wg       sync.WaitGroup
		relayErr error
	)
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	switch {
	case p.wal != nil:
		wg.Go(func() { relayErr = p.wal.Run(bg) })
	case p.relay != nil:
		wg.Go(func() { relayErr = p.relay.Run(bg) })
	}
	wg.Go(func() { p.cleanSources(bg) })
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.stopTimeout)
	defer cancel()
	stopErr := l.Stop(stopCtx)
	stopBG()
	wg.Wait()
	p.log.Info("route-passport pipeline stopped")
	return errors.Join(stopErr, relayErr)
}

// item is one delivery on its way through the handler.
type item struct {
	d         *broker.Delivery
	sourceID  string
	partition *int32
	offset    *int64
	rec       *Record
	err       error
}

// handle processes a batch. It returns nil only when every record is either
// stored with its events (transaction committed) or on the dead-letter topic
// (send confirmed), so the port acknowledges (commits the offsets) only then.
// Transient failures are retried here, with backoff, without settling.
func (p *Pipeline) handle(ctx context.Context, ds []*broker.Delivery) error {
	items := p.parseAll(ds)
	var good, bad []*item
	for i := range items {
		if it := &items[i]; it.err != nil {
			bad = append(bad, it)
		} else {
			good = append(good, it)
		}
	}
	if len(bad) > 0 {
		if err := p.deadLetter(withRecords(ctx, bad), bad); err != nil {
			return err
		}
	}
	// The records are split by routeId into parts that are stored in
	// parallel transactions: a route's records stay in one part, in order,
	// and parts lock disjoint rows and keys, so they never wait for each
	// other. Each part retries on its own; the batch is done when all are.
	parts := p.split(good)
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() { errs[i] = p.store(ctx, part) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// store ingests a part of a batch, retrying transient failures. Records
// whose output event could never be sent (larger than the broker takes) are
// refused (class size) and dead-lettered, and the rest stored without them:
// nothing is stored half-deliverable.
func (p *Pipeline) store(ctx context.Context, part []*item) error {
	for len(part) > 0 {
		var fresh, oversize []*item
		err := p.retry(withRecords(ctx, part), "ingest", len(part), func(ctx context.Context) error {
			var err error
			fresh, err = p.ingest(ctx, part)
			var o *oversizeError
			if errors.As(err, &o) {
				oversize = o.items
				return nil
			}
			return err
		})
		if err != nil {
			return err
		}
		if len(oversize) == 0 {
			p.met.success.Add(float64(len(fresh)))
			p.logIngested(part, fresh)
			return nil
		}
		if err := p.deadLetter(ctx, oversize); err != nil {
			return err
		}
		part = slices.DeleteFunc(part, func(it *item) bool { return slices.Contains(oversize, it) })
	}
	return nil
}

// parseAll identifies and parses the deliveries of a batch. Parsing is
// the batch's CPU work, and nothing is stored until all of it is done, so
// the records are parsed on up to cfg.parseWorkers goroutines, each taking
// the next unparsed record; items keep the order of ds.
func (p *Pipeline) parseAll(ds []*broker.Delivery) []item {
	items := make([]item, len(ds))
	n := min(p.cfg.parseWorkers, len(ds)/minParseShare)
	if n <= 1 {
		for i, d := range ds {
			p.parseOne(d, &items[i])
		}
		return items
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(ds); i = int(next.Add(1) - 1) {
				p.parseOne(ds[i], &items[i])
			}
		})
	}
	wg.Wait()
	return items
}

// minParseShare is the fewest records worth a parsing goroutine of their
// own.
const minParseShare = 8

func (p *Pipeline) parseOne(d *broker.Delivery, it *item) {
	it.d = d
	if part, off, ok := d.Position(); ok {
		it.partition, it.offset = &part, &off
		it.sourceID = d.Topic + "/" + strconv.FormatInt(int64(part), 10) + "/" + strconv.FormatInt(off, 10)
	} else {
		// No log position (brokers other than Kafka): the record's
		// content is its identity.
		h := sha256.New()
		h.Write([]byte(d.Topic))
		h.Write([]byte{0})
		h.Write([]byte(d.Key))
		h.Write([]byte{0})
		h.Write(d.Payload)
		it.sourceID = "sha256:" + hex.EncodeToString(h.Sum(nil))
	}
	it.rec, it.err = p.parser.Parse(d.Payload)
}

// split divides records into at most cfg.ingestWorkers parts by routeId,
// keeping their order within a part.
func (p *Pipeline) split(good []*item) [][]*item {
	n := min(p.cfg.ingestWorkers, (len(good)+minPart-1)/minPart)
	if n <= 1 {
		if len(good) == 0 {
			return nil
		}
		return [][]*item{good}
	}
	parts := make([][]*item, n)
	for _, it := range good {
		h := fnv.New32a()
		_, _ = h.Write([]byte(it.rec.RouteID))
		k := h.Sum32() % uint32(n)
		parts[k] = append(parts[k], it)
	}
	return slices.DeleteFunc(parts, func(p []*item) bool { return len(p) == 0 })
}

// minPart is the fewest records worth a transaction of their own.
const minPart = 16

// retry runs fn until it succeeds or ctx ends, waiting with backoff between
// attempts; each failure is logged and counted. When the listener begins to
// stop (broker.Stopping) a retry gives up at once, its wait (broker.Pause) and
// a repeated attempt alike, and returns an error wrapping broker.ErrStopping:
// the deliveries stay unsettled and are redelivered, and the stop does not
// wait out its deadline for a database or broker that is down.
func (p *Pipeline) retry(ctx context.Context, what string, records int, fn func(context.Context) error) error {
	stopping := broker.Stopping(ctx)
	var st *retryState
	defer func() {
		if st != nil {
			p.retryMu.Lock()
			delete(p.retrying, st)
			p.retryMu.Unlock()
		}
	}()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, p.cfg.dbTimeout)
		unwatch := func() {}
		if attempt > 1 {
			// A first attempt finishes (a stop is graceful); a repeated
			// one waits for what failed before, so a stop ends it.
			unwatch = afterStop(stopping, cancel)
		}
		err := fn(actx)
		unwatch()
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// Stopping: leave the deliveries unsettled, they are redelivered.
			return ctx.Err()
		}
		if isClosed(stopping) {
			p.log.Info("retry given up: stopping; offsets stay uncommitted, the records are redelivered", "step", what, "records", records)
			return fmt.Errorf("routepassport: %s: %w (last failure: %w)", what, broker.ErrStopping, err)
		}
		p.met.failure.WithLabelValues("transient").Add(float64(records))
		p.retryMu.Lock()
		if st == nil {
			st = &retryState{step: what, records: recordsOf(ctx), since: p.cfg.clock.Now()}
			p.retrying[st] = struct{}{}
		}
		st.failures, st.last = attempt, err
		p.retryMu.Unlock()
		if attempt == p.cfg.stuckFailures {
			p.log.Error("stuck on a record: transient failures in a row; /readyz fails until it is stored", "step", what,
				"first_record", st.records, "failures", attempt, "since", st.since, "exception_class", rootClass(err), "exception_message", err.Error())
		}
		delay := p.cfg.retry.Delay(attempt)
		p.log.Warn("transient failure, retrying; offsets stay uncommitted", "step", what, "records", records,
			"attempt", attempt, "retry_in", delay, "exception_class", rootClass(err), "exception_message", err.Error())
		if perr := broker.Pause(ctx, p.cfg.clock, delay); perr != nil {
			p.log.Info("retry given up: stopping; offsets stay uncommitted, the records are redelivered", "step", what, "records", records)
			return fmt.Errorf("routepassport: %s: %w (last failure: %w)", what, perr, err)
		}
	}
}

// afterStop calls cancel when stopping closes, until the returned function
// is called.
func afterStop(stopping <-chan struct{}, cancel context.CancelFunc) (stop func()) {
	if stopping == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-stopping:
			cancel()
		case <-done:
		}
	}()
	return func() { close(done) }
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Check is the pipeline's readiness: an error naming the records it is stuck
// on, once a record has failed stuck-after-failures times in a row with
// transient errors, or its oldest unacknowledged record is older than
// stuck-after.
func (p *Pipeline) Check(context.Context) error {
	var errs []error
	p.retryMu.Lock()
	var retrying []string
	for st := range p.retrying {
		retrying = append(retrying, st.records)
		if st.failures >= p.cfg.stuckFailures {
			errs = append(errs, fmt.Errorf("%s of record %s: %d transient failures in a row since %s: %w", st.step, st.records,
				st.failures, st.since.UTC().Format(time.RFC3339), st.last))
		}
	}
	p.retryMu.Unlock()
	if at, ok := p.oldestUnsettled(); ok {
		if age := p.cfg.clock.Now().Sub(at); age >= p.cfg.stuckAfter {
			e := fmt.Errorf("a record of %s unacknowledged for %s (received %s)", p.cfg.inputTopic, age.Round(time.Second), at.UTC().Format(time.RFC3339))
			if len(retrying) > 0 {
				slices.Sort(retrying)
				e = fmt.Errorf("%w; retrying %s", e, strings.Join(retrying, ", "))
			}
			errs = append(errs, e)
		}
	}
	return errors.Join(errs...)
}

// oldestUnsettled is when the oldest record the listener holds
// unacknowledged was received (false: none, or not running).
func (p *Pipeline) oldestUnsettled() (time.Time, bool) {
	if l := p.listener.Load(); l != nil {
		return l.OldestUnsettled()
	}
	return time.Time{}, false
}

// oldestUnacknowledged is route_passport_oldest_unacknowledged_seconds.
func (p *Pipeline) oldestUnacknowledged() float64 {
	if at, ok := p.oldestUnsettled(); ok {
		return max(0, p.cfg.clock.Now().Sub(at).Seconds())
	}
	return 0
}

// consecutiveFailures is route_passport_consecutive_failures.
func (p *Pipeline) consecutiveFailures() float64 {
	p.retryMu.Lock()
	defer p.retryMu.Unlock()
	n := 0
	for st := range p.retrying {
		n = max(n, st.failures)
	}
	return float64(n)
}

type recordsKey struct{}

// withRecords names the records a retry in ctx is about: the first one's
// identity (topic/partition/offset) and how many more.
func withRecords(ctx context.Context, items []*item) context.Context {
	if len(items) == 0 {
		return ctx
	}
	desc := items[0].sourceID
	if len(items) > 1 {
		desc += fmt.Sprintf(" and %d more", len(items)-1)
	}
	return context.WithValue(ctx, recordsKey{}, desc)
}

func recordsOf(ctx context.Context) string {
	s, _ := ctx.Value(recordsKey{}).(string)
	return s
}

// rootClass names the type of the innermost error of a chain, the nearest to
// an exception class (e.g. *pgconn.ConnectError).
func rootClass(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
	}
}

func (p *Pipeline) logIngested(good, fresh []*item) {
	isFresh := make(map[*item]bool, len(fresh))
	for _, it := range fresh {
		isFresh[it] = true
	}
	for _, it := range good {
		if !isFresh[it] {
			p.met.duplicates.Inc()
			p.log.Info("record already ingested: acknowledged without new events", p.sourceAttrs(it)...)
			continue
		}
		p.log.Info("route passport ingested", append(p.sourceAttrs(it),
			"event_id_route_in", eventID(it.sourceID, RouteInTarget), "event_id_georeference", eventID(it.sourceID, GeoreferenceTarget),
			"geometry_type", it.rec.Geometry.Type)...)
	}
}

// sourceAttrs are the log fields of a record: where it came from and who it
// is, never its payload.
func (p *Pipeline) sourceAttrs(it *item) []any {
	a := []any{"source_topic", it.d.Topic, "source_key", it.d.Key, "payload_size", len(it.d.Payload), "source_id", it.sourceID}
	if it.partition != nil {
		a = append(a, "source_partition", *it.partition, "source_offset", *it.offset)
	}
	if it.rec != nil {
		a = append(a, "route_id", it.rec.RouteID, "route_name_full", it.rec.RouteNameFull,
			"trace_id", it.rec.TraceID, "correlation_id", it.rec.CorrelationID)
	}
	return a
}

// eventID is stable per record and output: a redelivered record would get
// the same ids (it gets none: route_passport_sources stops it first).
func eventID(sourceID, target string) string {
	h := sha256.Sum256([]byte(sourceID + "\x00" + target))
	return hex.EncodeToString(h[:16])
}

// cleanSources deletes the identities of records older than the retention.
func (p *Pipeline) cleanSources(ctx context.Context) {
	for {
		t := p.cfg.clock.NewTimer(p.cfg.cleanupInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if _, err := p.deleteExpiredSources(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("cleaning route_passport_sources failed", "exception_message", err.Error())
		}
	}
}

// deleteExpiredSources deletes the identities older than the retention, in
// chunks, and returns how many.
func (p *Pipeline) deleteExpiredSources(ctx context.Context) (int64, error) {
	const chunk = 10_000
	var total int64
	for {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.dbTimeout)
		n, err := p.db.Exec(cctx, p.q.Get("CleanSources"), p.cfg.sourceRetention.Seconds(), chunk)
		cancel()
		total += n
		if err != nil || n < chunk {
			return total, err
		}
	}
}
