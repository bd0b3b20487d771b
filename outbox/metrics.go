package outbox

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	published *prometheus.CounterVec
	retried   *prometheus.CounterVec
	dead      *prometheus.CounterVec
	covered   *prometheus.CounterVec
	errors    *prometheus.CounterVec
	lag       *prometheus.GaugeVec
	up        *prometheus.GaugeVec
	held      *prometheus.CounterVec
	probes    *prometheus.CounterVec
	cleaned   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_published_total",
			Help: "Events confirmed by the broker (in the table mode: and marked SENT)."}, []string{"target"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_retried_total",
			Help: "Failed sends scheduled for another attempt."}, []string{"target"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_dead_total",
			Help: "Events that exhausted their attempts (or were rejected by the broker) and became DEAD."}, []string{"target"}),
		covered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_covered_total",
			Help: "Events of compacted lanes marked done because a newer event of their key was sent."}, []string{"target"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_errors_total",
			Help: "Relay cycles that failed on the database."}, []string{"target"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgx_outbox_lag_seconds",
			Help: "Age of the oldest pending event per target (0 when none)."}, []string{"target"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgx_outbox_target_up",
			Help: "1 while this relay sends to the target, 0 while the target is paused because its broker is unavailable."}, []string{"target"}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_held_total",
			Help: "Claimed events given back unsent, with no attempt charged, because the target's broker was unavailable."}, []string{"target"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_probes_total",
			Help: "Probes (broker pings) of paused targets."}, []string{"target"}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{Name: "msgx_outbox_cleaned_total",
			Help: "SENT and COVERED rows deleted by retention cleanup."}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.retried, m.dead, m.covered, m.errors, m.lag, m.up, m.held, m.probes, m.cleaned)
	}
	return m
}

// laneMetrics are curried once per lane so the hot path does no label lookups.
type laneMetrics struct {
	published, retried, dead, covered, errors, held, probes prometheus.Counter
	lag, up                                                 prometheus.Gauge
}

func (m *metrics) forLane(target string) laneMetrics {
	return laneMetrics{
		published: m.published.WithLabelValues(target),
		retried:   m.retried.WithLabelValues(target),
		dead:      m.dead.WithLabelValues(target),
		covered:   m.covered.WithLabelValues(target),
		errors:    m.errors.WithLabelValues(target),
		lag:       m.lag.WithLabelValues(target),
		up:        m.up.WithLabelValues(target),
		held:      m.held.WithLabelValues(target),
		probes:    m.probes.WithLabelValues(target),
	}
}
