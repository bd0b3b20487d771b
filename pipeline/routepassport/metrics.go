package routepassport

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

type metrics struct {
	// retrying is route_passport_consecutive_failures: set by the pipeline
	// once it is built.
	retrying   prometheus.GaugeFunc
	oldest     prometheus.GaugeFunc
	success    prometheus.Counter
	failure    *prometheus.CounterVec
	duplicates prometheus.Counter
	relay      *relayMetrics
}

func newMetrics(reg prometheus.Registerer, consecutiveFailures, oldestUnacknowledged func() float64) *metrics {
	m := &metrics{
		success: prometheus.NewCounter(prometheus.CounterOpts{Name: "route_passport_ingest_success_total",
			Help: "Route passports stored with their two outbox events."}),
		failure: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "route_passport_ingest_failure_total",
			Help: "Records refused (class size, json, schema, geometry: sent to the dead-letter topic) and failed attempts of transient failures (class transient)."},
			[]string{"class"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "route_passport_ingest_duplicate_total",
			Help: "Records delivered again after they were ingested: acknowledged without a second pair of events."}),
		retrying: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "route_passport_consecutive_failures",
			Help: "Transient failures in a row of the record retried longest now (0: none is being retried)."}, consecutiveFailures),
		oldest: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "route_passport_oldest_unacknowledged_seconds",
			Help: "Age of the oldest input record this instance holds unacknowledged, by the pipeline's clock (0: none)."}, oldestUnacknowledged),
	}
	// Every class exists from the start, at zero, so that alert rules on
	// increase() see the first failure.
	for _, class := range []string{"transient", ClassSize, ClassJSON, ClassSchema, ClassGeometry} {
		m.failure.WithLabelValues(class)
	}
	if reg != nil {
		reg.MustRegister(m.success, m.failure, m.duplicates, m.retrying, m.oldest)
	}
	return m
}

// relayMetrics exposes the counters of the pipeline's own relay under the
// names of the spec. The relay counts per target on a registry of its own
// (so that it never collides with another relay of the process); this
// collector reads them at scrape time.
type relayMetrics struct {
	reg                      *prometheus.Registry
	topics                   map[string]string // target -> topic
	published, retry, failed *prometheus.Desc
}

func newRelayMetrics(topics map[string]string) *relayMetrics {
	return &relayMetrics{
		reg:    prometheus.NewRegistry(),
		topics: topics,
		published: prometheus.NewDesc("route_passport_outbox_published_total",
			"Outbox events confirmed by the broker.", []string{"topic"}, nil),
		retry: prometheus.NewDesc("route_passport_outbox_retry_total",
			"Failed sends of outbox events scheduled for another attempt (back to PENDING with backoff).", []string{"topic"}, nil),
		failed: prometheus.NewDesc("route_passport_outbox_failed_total",
			"Outbox events that exhausted their attempts (FAILED: kept as DEAD rows, replayable).", []string{"topic"}, nil),
	}
}

func (r *relayMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.published
	ch <- r.retry
	ch <- r.failed
}

func (r *relayMetrics) Collect(ch chan<- prometheus.Metric) {
	fams, _ := r.reg.Gather()
	from := map[string]*prometheus.Desc{
		"msgx_outbox_published_total": r.published,
		"msgx_outbox_retried_total":   r.retry,
		"msgx_outbox_dead_total":      r.failed,
	}
	seen := map[*prometheus.Desc]map[string]bool{}
	for _, f := range fams {
		desc, ok := from[f.GetName()]
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			topic, ok := r.topics[label(m, "target")]
			if !ok {
				continue
			}
			if seen[desc] == nil {
				seen[desc] = map[string]bool{}
			}
			seen[desc][topic] = true
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, m.GetCounter().GetValue(), topic)
		}
	}
	// Before the relay's first event a counter of a topic is 0, not absent.
	for _, desc := range from {
		for _, topic := range r.topics {
			if !seen[desc][topic] {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, 0, topic)
			}
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
