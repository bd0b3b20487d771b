package broker

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/broker/driver"
)

type metrics struct {
	published     *prometheus.CounterVec
	publishErrors *prometheus.CounterVec
	received      *prometheus.CounterVec
	settledVec    *prometheus.CounterVec
	settleErrors  *prometheus.CounterVec
	released      *prometheus.CounterVec
	stuck         *prometheus.GaugeVec
	parked        *prometheus.GaugeVec
	oldest        *oldestUnsettled
	handler       *handlerHistogram
	events        prometheus.Counter
	eventsDropped prometheus.Counter
	deadByRef     *prometheus.CounterVec
	// adapterDropped reads the adapter's own count of errors its Errors
	// channel dropped; nil when the adapter keeps none.
	adapterDropped prometheus.CounterFunc
}

// newMetrics builds the port's metrics and registers them with reg (when
// not nil). A registration that fails (another broker of the same name on
// the same registry) registers nothing and is returned.
func newMetrics(reg prometheus.Registerer, adapter string, drv driver.Broker) (*metrics, error) {
	cl := prometheus.Labels{"adapter": adapter}
	m := &metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_broker_published_total",
			Help: "Messages confirmed by the broker.", ConstLabels: cl}, []string{"topic"}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_broker_publish_errors_total",
			Help: "Confirmed sends that failed.", ConstLabels: cl}, []string{"topic"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_broker_received_total",
			Help: "Deliveries received.", ConstLabels: cl}, []string{"topic", "group"}),
		settledVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_broker_settled_total",
			Help: "Deliveries by disposition.", ConstLabels: cl}, []string{"topic", "group", "disposition"}),
		settleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_broker_settle_errors_total",
			Help: "Settlements the adapter failed to carry out (left unsettled).", ConstLabels: cl}, []string{"topic", "group"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_broker_released_total",
			Help: "Deliveries whose settlement kept failing, given back to the broker for redelivery.", ConstLabels: cl}, []string{"topic", "group"}),
		stuck: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgx_broker_stuck_deliveries",
			Help: "Deliveries whose settlement and release both failed, held until their listener stops.", ConstLabels: cl}, []string{"topic", "group"}),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgx_broker_parked_deliveries",
			Help: "Deliveries waiting in the port-local scheduler for their not-before time.", ConstLabels: cl}, []string{"topic", "group"}),
		oldest: &oldestUnsettled{desc: prometheus.NewDesc("msgx_broker_oldest_unsettled_seconds",
			"Age of the oldest delivery a listener holds unsettled (handled, being settled, or held after a failed release; not parked), by the broker's clock.",
			[]string{"topic", "group"}, cl)},
		handler: &handlerHistogram{
			desc:   prometheus.NewDesc("msgx_broker_handler_seconds", "Handler run time; for deliveries handled back to back, from the end of the previous handler (so with its acknowledgement, a fraction of a microsecond).", []string{"topic", "group"}, cl),
			series: map[[2]string]*histogramSeries{},
		},
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "msgx_broker_events_total",
			Help: "Asynchronous errors reported on the lifecycle channel.", ConstLabels: cl}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "msgx_broker_events_dropped_total",
			Help: "Lifecycle events dropped because nobody read them.", ConstLabels: cl}),
		deadByRef: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_broker_dead_letter_by_reference_total",
			Help: "Dead-letter copies sent without their payload (by reference: size, SHA-256, source position) because whole they exceeded the adapter's or the broker's limit.", ConstLabels: cl}, []string{"topic"}),
	}
	if dc, ok := drv.(driver.DroppedErrorCounter); ok {
		m.adapterDropped = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "msgx_broker_adapter_errors_dropped_total",
			Help: "Asynchronous adapter errors that did not fit its error channel (each was logged instead).", ConstLabels: cl},
			func() float64 { return float64(dc.DroppedErrors()) })
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.published, m.publishErrors, m.received, m.settledVec, m.settleErrors, m.released, m.stuck, m.parked, m.oldest, m.handler, m.events, m.eventsDropped, m.deadByRef}
	if m.adapterDropped != nil {
		cs = append(cs, m.adapterDropped)
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return m, fmt.Errorf("register metrics of adapter %q: %w", adapter, err)
		}
	}
	return m, nil
}

// The upper bounds of the handler histogram, 0.5 ms × 4^i, in seconds as
// exposed and as durations for the hot path.
var (
	handlerBucketSeconds = prometheus.ExponentialBuckets(0.0005, 4, 10)
	handlerBuckets       = func() (b [10]time.Duration) {
		for i, ub := range handlerBucketSeconds {
			b[i] = time.Duration(ub * float64(time.Second))
		}
		return b
	}()
)

// handlerHistogram is the handler run-time histogram. Listeners add to it in
// bulk from the tallies of their goroutines: a prometheus Observe per message
// costs four atomic operations, as much as the rest of an acknowledgement.
type handlerHistogram struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	series map[[2]string]*histogramSeries
}

type histogramSeries struct {
	labels [2]string
	counts [len(handlerBuckets) + 1]uint64 // per bucket, not cumulative; the last is +Inf
	count  uint64
	sum    float64
}

// forLabels returns the series of a topic and group, shared by every listener
// on them.
func (h *handlerHistogram) forLabels(topic, group string) *histogramSeries {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := [2]string{topic, group}
	s := h.series[k]
	if s == nil {
		s = &histogramSeries{labels: k}
		h.series[k] = s
	}
	return s
}

func (h *handlerHistogram) add(s *histogramSeries, t *tally) {
	h.mu.Lock()
	for i, n := range t.counts {
		s.counts[i] += n
	}
	s.count += t.n
	s.sum += t.sum
	h.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (h *handlerHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector.
func (h *handlerHistogram) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.series {
		buckets := make(map[float64]uint64, len(handlerBuckets))
		var cum uint64
		for i, ub := range handlerBucketSeconds {
			cum += s.counts[i]
			buckets[ub] = cum
		}
		ch <- prometheus.MustNewConstHistogram(h.desc, s.count, s.sum, buckets, s.labels[0], s.labels[1])
	}
}

// listenerMetrics are curried once per listener so the hot path does no label lookups.
type listenerMetrics struct {
	received      prometheus.Counter
	handler       *handlerHistogram
	series        *histogramSeries
	settleErrors  prometheus.Counter
	released      prometheus.Counter
	stuck         prometheus.Gauge
	parked        prometheus.Gauge
	byDisposition [Conflict + 1]prometheus.Counter
}

func (m *metrics) forListener(topic, group string) listenerMetrics {
	lm := listenerMetrics{
		received:     m.received.WithLabelValues(topic, group),
		handler:      m.handler,
		series:       m.handler.forLabels(topic, group),
		settleErrors: m.settleErrors.WithLabelValues(topic, group),
		released:     m.released.WithLabelValues(topic, group),
		stuck:        m.stuck.WithLabelValues(topic, group),
		parked:       m.parked.WithLabelValues(topic, group),
	}
	for d := Ack; d <= Conflict; d++ {
		lm.byDisposition[d] = m.settledVec.WithLabelValues(topic, group, d.String())
	}
	return lm
}

// tally is what one listener goroutine counted since it last flushed: plain
// increments per message instead of shared atomic ones.
type tally struct {
	counts  [len(handlerBuckets) + 1]uint64
	n       uint64
	sum     float64
	settled [Conflict + 1]uint64
	elapsed time.Duration // handler time since the last flush
}

// Flush bounds: a scrape sees a listener's counts at most this much handler
// time, or this many messages, late (and at once when the listener is idle).
const (
	tallyMaxElapsed = 10 * time.Millisecond
	tallyMaxCount   = 256
)

// observe tallies one handler run and reports whether the tally is due for a
// flush.
func (t *tally) observe(d time.Duration) bool {
	i := 0
	for i < len(handlerBuckets) && d > handlerBuckets[i] {
		i++
	}
	t.counts[i]++
	t.n++
	t.sum += d.Seconds()
	t.elapsed += d
	return t.elapsed >= tallyMaxElapsed || t.n >= tallyMaxCount
}

// flush publishes t to the shared metrics and resets it.
func (lm *listenerMetrics) flush(t *tally) {
	if t.n > 0 {
		lm.handler.add(lm.series, t)
	}
	for d, n := range t.settled {
		if n > 0 {
			lm.byDisposition[d].Add(float64(n))
		}
	}
	*t = tally{}
}
