package broker

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	published     *prometheus.CounterVec
	publishErrors *prometheus.CounterVec
	received      *prometheus.CounterVec
	settledVec    *prometheus.CounterVec
	settleErrors  *prometheus.CounterVec
	handler       *prometheus.HistogramVec
	events        prometheus.Counter
	eventsDropped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, adapter string) *metrics {
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
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "msgx_broker_handler_seconds",
			Help: "Handler run time.", ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"topic", "group"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "msgx_broker_events_total",
			Help: "Asynchronous errors reported on the lifecycle channel.", ConstLabels: cl}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "msgx_broker_events_dropped_total",
			Help: "Lifecycle events dropped because nobody read them.", ConstLabels: cl}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.publishErrors, m.received, m.settledVec, m.settleErrors, m.handler, m.events, m.eventsDropped)
	}
	return m
}

// listenerMetrics are curried once per listener so the hot path does no label lookups.
type listenerMetrics struct {
	received       prometheus.Counter
	handlerSeconds prometheus.Observer
	settleErrors   prometheus.Counter
	byDisposition  [Conflict + 1]prometheus.Counter
}

func (m *metrics) forListener(topic, group string) listenerMetrics {
	lm := listenerMetrics{
		received:       m.received.WithLabelValues(topic, group),
		handlerSeconds: m.handler.WithLabelValues(topic, group),
		settleErrors:   m.settleErrors.WithLabelValues(topic, group),
	}
	for d := Ack; d <= Conflict; d++ {
		lm.byDisposition[d] = m.settledVec.WithLabelValues(topic, group, d.String())
	}
	return lm
}

func (lm listenerMetrics) settled(d Disposition, n int) { lm.byDisposition[d].Add(float64(n)) }
