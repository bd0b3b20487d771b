package inbox

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	headBlocked      prometheus.Gauge
	processed        *prometheus.CounterVec
	failures         *prometheus.CounterVec
	batch            prometheus.Observer
	batchFailures    prometheus.Counter
	leader           prometheus.Gauge
	superseded       prometheus.Gauge
	backfilled       prometheus.Counter
	backfillFailures prometheus.Counter
	prepareFailures  prometheus.Counter
}

// newMetrics builds the engine's metrics; headAge is read at every scrape.
func newMetrics(reg prometheus.Registerer, stream string, headAge func() float64) (*metrics, error) {
	labels := prometheus.Labels{"stream": stream}
	processed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "msgx_inbox_settled_total", Help: "Messages that reached a status, by status.", ConstLabels: labels,
	}, []string{"status"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "msgx_inbox_failures_total", Help: "Recorded processing failures, by class.", ConstLabels: labels,
	}, []string{"class"})
	batch := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "msgx_inbox_batch_messages", Help: "Messages settled per pump transaction.", ConstLabels: labels,
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100},
	})
	batchFailures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "msgx_inbox_transaction_failures_total", Help: "Pump transactions that failed as a whole.", ConstLabels: labels,
	})
	leader := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "msgx_inbox_leader", Help: "1 while this process holds the stream lease.", ConstLabels: labels,
	})
	superseded := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "msgx_inbox_lease_superseded", ConstLabels: labels,
		Help: "1 once another live process with this process's instance id took the stream lease over: this process stopped pumping the stream until it is restarted.",
	})
	backfilled := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "msgx_inbox_backfilled_total", Help: "Processed marks written back to the source.", ConstLabels: labels,
	})
	backfillFailures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "msgx_inbox_backfill_failures_total", Help: "Failed backfill writes.", ConstLabels: labels,
	})
	prepareFailures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "msgx_inbox_prepare_failures_total", ConstLabels: labels,
		Help: "Processor read-aheads (Prepare) that failed and were rolled back; their batches' messages read for themselves.",
	})
	headBlocked := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "msgx_inbox_head_blocked_seconds", ConstLabels: labels,
		Help: "How long the current head has been failing (0 when it is not).",
	})
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "msgx_inbox_head_age_seconds", ConstLabels: labels,
		Help: "How long the current head (the oldest unfinished message, whatever its status) has been the head; 0 when there is none. It grows while the pump is stuck.",
	}, headAge)
	m := &metrics{headBlocked, processed, failures, batch, batchFailures, leader, superseded, backfilled, backfillFailures, prepareFailures}
	if reg != nil {
		for _, c := range []prometheus.Collector{headBlocked, processed, failures, batch, batchFailures, leader, superseded, backfilled, backfillFailures, prepareFailures, age} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("inbox: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) settled(s settled) {
	m.processed.WithLabelValues(string(s.status)).Inc()
	if s.class != "" {
		m.failures.WithLabelValues(string(s.class)).Inc()
	}
}
