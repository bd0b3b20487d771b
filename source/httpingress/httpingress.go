// Package httpingress is the legacy HTTP entry point POST /cminmsgs/send: the
// raw message body is inserted into the mailbox table, then enqueued in the
// inbox, and the mailbox id is answered as text/plain. A 200 always means the
// message is stored in the mailbox; the enqueue that follows is not atomic
// with it, and the mailbox poller repairs a missing one, while business
// identity deduplication absorbs client retries.
//
// Bodies in GBK, GB18030 (GB2312-labelled ones too) or UTF-16 are transcoded
// to UTF-8, the mailbox column being text; the received bytes are kept
// byte-exact beside the inbox, and so is the request's W3C trace context,
// which the processing continues. Concurrent requests are limited (503 beyond).
//
// With senders configured (WithSenders) every request must be one of them —
// by client address, bearer token or verified client certificate — before it
// takes a request slot, and its message may only claim the SNDR values of
// that sender, at most its MaxPerMinute; the rest is answered 401, 403 or
// 429, counted and logged. The
// server around the handler (timeouts, body rate, connection limits, TLS) is
// internal/httpserve's.
package httpingress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/httpserve"
	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/source/mailbox"
)

// Path is the legacy endpoint.
const Path = "/cminmsgs/send"

// DefaultMaxBytes is the largest body accepted by default: what a MEDIUMTEXT
// mailbox column holds.
const DefaultMaxBytes = 16<<20 - 1

// Mailbox stores a message and returns its id; *mailbox.Table implements it.
// An Insert error wrapping mailbox.ErrTooLarge (answered 413) or
// mailbox.ErrUnstorable (400) says the message can never be stored; any
// other is answered 503.
type Mailbox interface {
	Insert(ctx context.Context, msg []byte, received time.Time, meta mailbox.Meta) (int64, error)
}

// metaReader reads the subsystem columns from a message; *mailbox.Table
// implements it.
type metaReader interface {
	MetaOf(doc []byte) mailbox.Meta
}

// Enqueuer puts a stored message in the inbox; *inbox.Engine implements it.
type Enqueuer interface {
	Enqueue(ctx context.Context, msgs ...inbox.Incoming) (int, error)
}

type options struct {
	enqueuer   Enqueuer
	nudge      func()
	maxBytes   int64
	mediaTypes []string
	clock      clock.Clock
	log        *slog.Logger
	meta       func([]byte) mailbox.Meta
	timeout    time.Duration
	concurrent int
	senders    []sender
	registerer prometheus.Registerer
}

// Option configures the handler.
type Option func(*options)

// WithEnqueuer enqueues each stored message right away (default: the poller
// alone picks it up).
func WithEnqueuer(e Enqueuer) Option { return func(o *options) { o.enqueuer = e } }

// WithNudge is called after each stored message (e.g. the poller's Nudge).
func WithNudge(f func()) Option { return func(o *options) { o.nudge = f } }

// WithMaxBytes sets the body limit (default DefaultMaxBytes); larger bodies get 413.
func WithMaxBytes(n int64) Option { return func(o *options) { o.maxBytes = n } }

// WithMediaTypes sets the accepted Content-Types (default application/xml,
// text/xml, text/plain); others get 415. A request without a Content-Type
// is accepted, as legacy clients send none.
func WithMediaTypes(types ...string) Option { return func(o *options) { o.mediaTypes = types } }

// WithClock sets the clock that stamps CMINMSGS_DATE_RECEIVED.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMeta fills the mailbox's subsystem columns from the body (default: the
// mailbox's own reading of the message header, when it has one —
// *mailbox.Table's MetaOf —, else NULL).
func WithMeta(f func([]byte) mailbox.Meta) Option { return func(o *options) { o.meta = f } }

// WithTimeout bounds the mailbox insert and the enqueue (default 10 s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithMaxConcurrent bounds the requests served at once (default 32); one
// more is answered 503 with Retry-After at once, so a flood costs neither
// memory (each request may hold a body of up to the size limit) nor mailbox
// connections.
func WithMaxConcurrent(n int) Option { return func(o *options) { o.concurrent = n } }

// WithRegisterer registers msgx_ingress_refused_total{reason} (default:
// none).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.registerer = r } }

// Handler serves POST /cminmsgs/send.
type Handler struct {
	mb      Mailbox
	o       options
	slots   chan struct{}
	refused *prometheus.CounterVec
	logs    *httpserve.Sampler
}

// New returns the handler.
func New(mb Mailbox, opts ...Option) *Handler {
	o := options{
		maxBytes:   DefaultMaxBytes,
		mediaTypes: []string{"application/xml", "text/xml", "text/plain"},
		clock:      clock.Real{},
		log:        slog.Default(),
		timeout:    10 * time.Second,
		concurrent: 32,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if mm, ok := mb.(metaReader); ok && o.meta == nil {
		// The columns a legacy sender fills, filled as it does.
		o.meta = mm.MetaOf
	}
	if o.concurrent < 1 {
		o.concurrent = 1
	}
	h := &Handler{mb: mb, o: o, slots: make(chan struct{}, o.concurrent), logs: httpserve.NewSampler(o.clock, time.Minute),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_ingress_refused_total",
			Help: "Ingress requests refused: unauthenticated (no configured sender matches), sndr (a META/SNDR the sender may not claim) or rate (over the sender's max-per-minute)."}, []string{"reason"})}
	for i := range h.o.senders {
		if n := h.o.senders[i].MaxPerMinute; n > 0 {
			h.o.senders[i].bucket = &bucket{size: float64(n), tokens: float64(n), last: o.clock.Now()}
		}
	}
	for _, r := range []string{refusedUnauthenticated, refusedSNDR, refusedRate} {
		h.refused.WithLabelValues(r)
	}
	if o.registerer != nil {
		o.registerer.MustRegister(h.refused)
	}
	return h
}

// refuse answers a refused request, counts it and logs it (one line per
// reason and client a minute, with the count of those held back).
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, reason string, status int, msg string, args ...any) {
	h.refused.WithLabelValues(reason).Inc()
	client := httpserve.ClientAddr(r).String()
	h.logs.Warn(h.o.log, reason+" "+client, "httpingress: request refused", append([]any{"reason", reason, "client", client}, args...)...)
	http.Error(w, msg, status)
}

// Register adds the endpoint to mux.
func (h *Handler) Register(mux *http.ServeMux) { mux.Handle(Path, h) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var senders []*sender
	if len(h.o.senders) > 0 {
		var hasToken bool
		if senders, hasToken = h.authenticate(r); len(senders) == 0 {
			if !hasToken && slices.ContainsFunc(h.o.senders, func(s sender) bool { return s.Token != "" }) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="msgx ingress"`)
				h.refuse(w, r, refusedUnauthenticated, http.StatusUnauthorized, "not an authorized sender")
				return
			}
			h.refuse(w, r, refusedUnauthenticated, http.StatusForbidden, "not an authorized sender")
			return
		}
		if ok, wait := h.admit(senders); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(wait.Seconds()+0.999))))
			h.refuse(w, r, refusedRate, http.StatusTooManyRequests, "over this sender's messages a minute", "sender", senders[0].Name)
			return
		}
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many requests at once", http.StatusServiceUnavailable)
		return
	}
	charset, status, msg := h.checkMediaType(r.Header.Get("Content-Type"))
	if status != 0 {
		http.Error(w, msg, status)
		return
	}
	if r.ContentLength > h.o.maxBytes {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.maxBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	if len(body) == 0 {
		http.Error(w, "empty body", http.StatusBadRequest)
		return
	}
	// The mailbox column is text: what is stored is UTF-8.
	doc, err := toUTF8(body, charset)
	if errors.Is(err, errUnknownCharset) {
		http.Error(w, err.Error(), http.StatusUnsupportedMediaType)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if senders != nil {
		for _, sndr := range claimedSenders(doc.text) {
			if !mayClaim(senders, sndr) {
				names := make([]string, len(senders))
				for i, s := range senders {
					names[i] = s.Name
				}
				h.refuse(w, r, refusedSNDR, http.StatusForbidden, "this sender may not send SNDR "+strconv.Quote(sndr), "sender", strings.Join(names, ","), "sndr", sndr)
				return
			}
		}
	}
	in := inbox.Incoming{Payload: doc.text}
	// The request's trace context (the ingest span, when tracing wraps the
	// handler) goes with the message, so its processing continues the trace.
	in.TraceParent, in.TraceState = tracing.Context(r.Context())
	if doc.charset != "" {
		in.Original, in.Charset = body, doc.charset
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.timeout)
	defer cancel()
	var meta mailbox.Meta
	if h.o.meta != nil {
		meta = h.o.meta(doc.text)
	}
	id, err := h.mb.Insert(ctx, doc.text, h.o.clock.Now(), meta)
	// A message the mailbox can never store is the sender's to fix: a 503
	// would make a legacy sender retry it for ever.
	if errors.Is(err, mailbox.ErrTooLarge) || errors.Is(err, mailbox.ErrUnstorable) {
		status := http.StatusBadRequest
		if errors.Is(err, mailbox.ErrTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		h.o.log.Warn("httpingress: message refused: the mailbox cannot store it", "err", err, "bytes", len(body), "stored_bytes", len(doc.text))
		http.Error(w, err.Error(), status)
		return
	}
	if err != nil {
		h.o.log.Error("httpingress: mailbox insert failed", "err", err, "bytes", len(body))
		http.Error(w, "mailbox unavailable", http.StatusServiceUnavailable)
		return
	}
	if h.o.enqueuer != nil {
		// Stored is what the answer promises; a failed enqueue is repaired by
		// the poller (without the original bytes, which only this request had).
		in.ID = id
		if _, err := h.o.enqueuer.Enqueue(ctx, in); err != nil {
			h.o.log.Warn("httpingress: enqueue failed; the mailbox poller will pick the message up", "msg_id", id, "err", err)
		}
	}
	if h.o.nudge != nil {
		h.o.nudge()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, strconv.FormatInt(id, 10))
}

// checkMediaType returns the charset a Content-Type names, or a non-zero
// status for an unacceptable one.
func (h *Handler) checkMediaType(ct string) (string, int, string) {
	if ct == "" {
		return "", 0, ""
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", http.StatusUnsupportedMediaType, "malformed Content-Type"
	}
	ok := false
	for _, t := range h.o.mediaTypes {
		if strings.EqualFold(mt, t) {
			ok = true
			break
		}
	}
	if !ok {
		return "", http.StatusUnsupportedMediaType, "unsupported media type " + mt
	}
	cs := params["charset"]
	if !isUTF8Label(cs) {
		if _, err := lookupCharset(cs); err != nil {
			return "", http.StatusUnsupportedMediaType, err.Error()
		}
	}
	return cs, 0, ""
}
