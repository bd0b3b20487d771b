// Package sis is the SIS flight-message pipeline: the inbox processor that
// turns the messages of the Unisys AODB "SIS" interface into flight state
// (FLIGHT_SCHD and its detail tables, PostgreSQL or SQLite) and into the
// events of two outbox targets — TargetMsg, one event per message that
// changed a flight, and TargetSchd, the newest full state of each flight
// (a tombstone when it is deleted) through a compacted lane.
//
// Dispatch is by kind (TYPE/STYP): SCHD DNLD/RESP (daily schedule snapshot,
// validated and applied as a whole), SCHD ADFT (flights added or replaced),
// FLOP (one flight's operational update, every subtype of the interface),
// FLOP FDEL or TYPE FDEL (soft delete). docs/sis.md says what each status
// and reason means.
package sis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// The outbox targets of the pipeline's events.
const (
	// TargetMsg carries one event per message that changed a flight, keyed
	// by FLID; relay it in a per-key lane.
	TargetMsg = "kafka:msg"
	// TargetSchd carries the newest full state of a flight, keyed by FLID
	// (a tombstone when it is deleted); relay it in a compacted lane.
	TargetSchd = "kafka:schd"
	// TargetRef carries one event per reference record added, changed or
	// deleted, keyed by RTYPE:RKEY; relay it in a per-key lane.
	TargetRef = "kafka:ref"
)

// Event schemas, the "schema" field of every event payload.
const (
	SchemaMsg  = "msgx.sis.msg/v1"
	SchemaSchd = "msgx.sis.schd/v1"
	SchemaRef  = "msgx.sis.ref/v1"
)

// Defaults.
const (
	DefaultMsgTopic    = "sis.msg"
	DefaultSchdTopic   = "sis.schd"
	DefaultRefTopic    = "sis.ref"
	DefaultFlushPeriod = 3 * time.Second
	DefaultFlushLimit  = 500
)

// DefaultIgnore is the default ignore list (the seed's): these kinds are
// SKIPPED with reason ignored:<kind>.
var DefaultIgnore = []string{"LDM", "REGN", "RSTA", "EROR"}

// ReferenceTypes are the reference-data message types, kept in
// sis_ref_master (RTYPE, RKEY). REGN is one of them but is on the default
// ignore list, which wins.
var ReferenceTypes = []string{"ABDG", "ABNR", "AIRC", "AIRL", "ARPT", "BLST", "CHLT", "CITY", "CLST",
	"COUL", "DLYL", "FLTL", "GLST", "HLTR", "ORGN", "PLST", "REGL", "REGN", "SLST", "STTS", "TLST", "VIPL", "VIPS"}

// Config is the pipeline's configuration. Zero values take the defaults.
type Config struct {
	// Location is the airport time zone of body times and DTTM
	// (airport.timezone; default Asia/Shanghai).
	Location *time.Location
	// Ignore lists the kinds SKIPPED as ignored: a TYPE ("LDM") or a
	// TYPE/STYP ("REGN/UPD"). Nil means DefaultIgnore; an empty non-nil
	// list ignores nothing.
	Ignore []string
	// RequestGuard, when true, accepts a RESP (SCHD or reference data)
	// only as the answer to an open request of its type (see Coordinator):
	// otherwise it is SKIPPED no-match:…. Off (the default, and the
	// behaviour of the system msgx replaces), a RESP is a snapshot like DNLD.
	RequestGuard bool
	// RequestSkew tolerates a RESP whose DTTM is up to this much before its
	// request was sent (clock skew between the AODB and msgx); such a match
	// is logged and noted on the request. Default 0: none.
	RequestSkew time.Duration
	// MsgTopic, SchdTopic and RefTopic are the broker topics of the three
	// targets (defaults sis.msg, sis.schd and sis.ref).
	MsgTopic, SchdTopic, RefTopic string
	// SchdFlushPeriod and SchdFlushLimit shape the compacted schd lane
	// (schd.flush-period, schd.flush-limit; defaults 3 s and 500).
	SchdFlushPeriod time.Duration
	SchdFlushLimit  int
	// MaxBytes bounds a payload (default: the codec's).
	MaxBytes int
	// IncludeDayBoundary adds the DTTM date (yyyyMMdd) to the identity
	// (identity.include-day-boundary): for senders whose SEQN restarts
	// every day, so that today's SEQN 1 is not a duplicate of yesterday's.
	IncludeDayBoundary bool
}

func (c *Config) defaults() {
	if c.Location == nil {
		c.Location = sisxml.DefaultLocation()
	}
	if c.Ignore == nil {
		c.Ignore = DefaultIgnore
	}
	if c.MsgTopic == "" {
		c.MsgTopic = DefaultMsgTopic
	}
	if c.SchdTopic == "" {
		c.SchdTopic = DefaultSchdTopic
	}
	if c.RefTopic == "" {
		c.RefTopic = DefaultRefTopic
	}
	if c.SchdFlushPeriod <= 0 {
		c.SchdFlushPeriod = DefaultFlushPeriod
	}
	if c.SchdFlushLimit <= 0 {
		c.SchdFlushLimit = DefaultFlushLimit
	}
}

// RelayTargets returns the relay options of the three targets, publishing
// through pub (a *broker.Broker): the msg and ref targets in per-key lanes,
// the schd target in a compacted lane with the configured flush period and
// limit.
func RelayTargets(pub outbox.Publisher, cfg Config) []outbox.Option {
	cfg.defaults()
	return []outbox.Option{
		outbox.Target(TargetMsg, pub, outbox.PerKey),
		outbox.Target(TargetSchd, pub, outbox.Compacted,
			outbox.FlushPeriod(cfg.SchdFlushPeriod), outbox.FlushLimit(cfg.SchdFlushLimit)),
		outbox.Target(TargetRef, pub, outbox.PerKey),
	}
}

// Option configures a Processor.
type Option func(*options)

type options struct {
	log        *slog.Logger
	reg        prometheus.Registerer
	failpoints *failpoint.Set
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the processor's metrics (default: not registered).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithFailpoints arms the processor's failpoint (failpoint.SISMidSnapshot;
// default none): a test setting of the reliability campaign.
func WithFailpoints(s *failpoint.Set) Option { return func(o *options) { o.failpoints = s } }

// Processor is the SIS inbox processor. Its messages decode into
// *sisxml.Message (an inbox.TypedProcessor): the engine takes it as
// inbox.Typed(p).
type Processor struct {
	cfg     Config
	log     *slog.Logger
	ignore  map[string]bool
	ref     map[string]bool
	results *prometheus.CounterVec
	fp      *failpoint.Set

	// mu serialises Prepare and Process around the transaction cache.
	mu    sync.Mutex
	cache txCache
}

var (
	_ inbox.TypedProcessor[*sisxml.Message] = (*Processor)(nil)
	_ inbox.TypedPreparer[*sisxml.Message]  = (*Processor)(nil)
)

// NewProcessor returns the processor for cfg.
func NewProcessor(cfg Config, opts ...Option) (*Processor, error) {
	cfg.defaults()
	o := options{log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	p := &Processor{cfg: cfg, log: o.log, ignore: map[string]bool{}, ref: map[string]bool{}, fp: o.failpoints}
	for _, k := range cfg.Ignore {
		p.ignore[strings.ToUpper(strings.TrimSpace(k))] = true
	}
	for _, t := range ReferenceTypes {
		p.ref[t] = true
	}
	p.results = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "msgx_sis_messages_total",
		Help: "SIS messages processed, by TYPE and result (changed, unchanged, skipped:<reason class>, failed:<class>).",
	}, []string{"type", "result"})
	if o.reg != nil {
		if err := o.reg.Register(p.results); err != nil {
			return nil, fmt.Errorf("sis: metrics: %w", err)
		}
	}
	return p, nil
}

// Config returns the configuration in effect (defaults filled in).
func (p *Processor) Config() Config { return p.cfg }

// OutboxTargets lists the outbox targets the processor enqueues to: the
// service refuses to start unless its relay serves all three.
func (p *Processor) OutboxTargets() []string { return []string{TargetMsg, TargetSchd, TargetRef} }

// CloudEvents describes the processor's events as CloudEvents (the relay
// sends them with the Kafka binding's ce_ headers, docs/events.md): source
// /msgx/sis, types msgx.sis.msg.v1, msgx.sis.schd.v1 and msgx.sis.ref.v1 (the
// payloads' schema, msgx.sis.msg/v1 …).
func (p *Processor) CloudEvents() map[string]outbox.CloudEvents {
	return map[string]outbox.CloudEvents{
		TargetMsg:  {Source: CloudEventsSource, Type: "msgx.sis.msg.v1"},
		TargetSchd: {Source: CloudEventsSource, Type: "msgx.sis.schd.v1"},
		TargetRef:  {Source: CloudEventsSource, Type: "msgx.sis.ref.v1"},
	}
}

// CloudEventsSource is the ce_source of the SIS events.
const CloudEventsSource = "/msgx/sis"

// Decode implements inbox.TypedProcessor: the codec's classification carries
// over (MALFORMED goes DEAD, CODEC_ERROR is retried). Identity is
// SNDR|TYPE|STYP|SEQN (|yyyyMMdd of DTTM with IncludeDayBoundary), kind
// TYPE/STYP.
func (p *Processor) Decode(payload []byte) (inbox.DecodedOf[*sisxml.Message], error) {
	// A payload read from a text column (the mailbox's CLOB) or received as
	// text is UTF-8 whatever its declaration says: the transport transcoded
	// it. Text in GBK is practically never valid UTF-8, so valid UTF-8 is
	// read as such and anything else as its declaration says.
	m, err := sisxml.Decode(payload, sisxml.Options{Location: p.cfg.Location, MaxBytes: p.cfg.MaxBytes,
		AlreadyUTF8: utf8.Valid(payload)})
	if err != nil {
		var ce *sisxml.Error
		if errors.As(err, &ce) && ce.Class == sisxml.Malformed {
			return inbox.DecodedOf[*sisxml.Message]{}, inbox.Fail(inbox.Malformed, err)
		}
		return inbox.DecodedOf[*sisxml.Message]{}, inbox.Fail(inbox.CodecError, err)
	}
	meta := m.Meta
	identity := meta.Sender + "|" + meta.Type + "|" + meta.Subtype + "|" + strconv.FormatInt(meta.Seq, 10)
	if p.cfg.IncludeDayBoundary {
		// The date as the sender wrote it (its own day), not converted.
		identity += "|" + meta.SentRaw[:8]
	}
	return inbox.DecodedOf[*sisxml.Message]{
		Identity: identity,
		Kind:     meta.Kind(),
		Value:    m,
	}, nil
}

// Prepare implements inbox.TypedPreparer: it reads and locks the flights
// the batch's messages name, in one query, before the first is processed.
func (p *Processor) Prepare(ctx context.Context, tx store.Tx, batch []*sisxml.Message) error {
	var flids []string
	for _, m := range batch {
		flids = appendFLIDs(flids, m, maxPrefetch)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cache.prefetch(ctx, tx, flids); err != nil {
		p.cache.reset() // the engine rolls the read back
		return err
	}
	return nil
}

// Process implements inbox.TypedProcessor: it dispatches m by kind.
func (p *Processor) Process(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message) (out inbox.Outcome, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	failed := true
	defer func() {
		if failed {
			// The engine rolls the message's savepoint back (also after a
			// panic): what the cache learnt from it is void.
			p.cache.reset()
		}
	}()
	out, changed, err := p.dispatch(ctx, tx, msg, m)
	failed = err != nil
	typ := m.Meta.Type
	switch {
	case err != nil:
		p.results.WithLabelValues(typ, "failed:"+string(inbox.ClassOf(err))).Inc()
	case out.Status == inbox.Skipped:
		reason, _, _ := strings.Cut(out.Reason, ":")
		p.results.WithLabelValues(typ, "skipped:"+reason).Inc()
		p.log.Info("sis: message skipped", "msg_id", msg.ID, "kind", m.Meta.Kind(), "reason", out.Reason)
	case changed:
		p.results.WithLabelValues(typ, "changed").Inc()
	default:
		p.results.WithLabelValues(typ, "unchanged").Inc()
	}
	return out, err
}

// dispatch runs the processing of m's kind; changed says whether any flight
// changed.
func (p *Processor) dispatch(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message) (inbox.Outcome, bool, error) {
	typ, styp := m.Meta.Type, m.Meta.Subtype
	kind := m.Meta.Kind()
	if p.ignore[typ] || p.ignore[kind] {
		return inbox.Skip("ignored:" + kind), false, nil
	}
	switch {
	case typ == "SCHD" && (styp == "DNLD" || styp == "RESP"):
		if styp == "RESP" && p.cfg.RequestGuard {
			return p.guarded(ctx, tx, msg, m, func() (inbox.Outcome, bool, error) { return p.schedule(ctx, tx, msg, m, true) })
		}
		return p.schedule(ctx, tx, msg, m, true)
	case typ == "SCHD" && styp == "ADFT":
		return p.schedule(ctx, tx, msg, m, false)
	case typ == "FDEL" || (typ == "FLOP" && styp == "FDEL"):
		return p.fdel(ctx, tx, msg, m)
	case typ == "FLOP":
		if !knownFlop(styp) {
			return inbox.Outcome{}, false, inbox.Failf(inbox.Unsupported, "sis: no processor for FLOP subtype %s", styp)
		}
		return p.flop(ctx, tx, msg, m)
	case p.ref[typ] && slices.Contains([]string{"DNLD", "RESP", "ADD", "UPD", "DEL"}, styp):
		if styp == "RESP" && p.cfg.RequestGuard {
			return p.guarded(ctx, tx, msg, m, func() (inbox.Outcome, bool, error) { return p.reference(ctx, tx, msg, m) })
		}
		return p.reference(ctx, tx, msg, m)
	case typ == "SCHS" && (styp == "DNLD" || styp == "RESP"):
		return p.season(ctx, tx, msg, m)
	}
	return inbox.Outcome{}, false, inbox.Failf(inbox.Unsupported, "sis: no processor for %s", kind)
}

// body returns the body element named name, or nil.
func body(m *sisxml.Message, name string) *sisxml.Element {
	for _, e := range m.Body {
		if e.Name == name {
			return e
		}
	}
	return nil
}
