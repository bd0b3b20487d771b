package mailbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/inbox"
)

// Kinds of msgx_mailbox_anomalies_total.
const (
	anomalyIncrement = "auto_increment_increment"
	anomalyBackwards = "ids_backwards"
)

// pollerMetrics are the poller's metrics; the Poller is their Collector.
// How long a gap has been open is not among them: the service reports it
// from the gap's database record (msgx_mailbox_gap_open_seconds), so that it
// is on the database's clock and visible from every instance.
type pollerMetrics struct {
	gapsPermanent prometheus.Counter
	idsSkipped    prometheus.Counter
	gapsWatched   prometheus.Gauge
	late          *prometheus.CounterVec
	scanErrors    prometheus.Counter
	rowsPerScan   prometheus.Histogram
	anomalies     *prometheus.CounterVec
	unreadable    prometheus.GaugeFunc
}

func newPollerMetrics(stream string, unreadableSeconds func() float64) *pollerMetrics {
	labels := prometheus.Labels{"stream": stream}
	m := &pollerMetrics{
		gapsPermanent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "msgx_mailbox_gaps_permanent_total", ConstLabels: labels,
			Help: "Gaps declared permanent after the max commit delay.",
		}),
		idsSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "msgx_mailbox_gap_ids_skipped_total", ConstLabels: labels,
			Help: "Mailbox ids skipped as part of a permanent gap.",
		}),
		gapsWatched: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "msgx_mailbox_gaps_watched", ConstLabels: labels,
			Help: "Permanent gaps still watched for late rows (declared within the retention period).",
		}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "msgx_mailbox_late_rows_total", ConstLabels: labels,
			Help: "Rows that showed up in a permanent gap, by what became of them (TAKEN, REFUSED).",
		}, []string{"action"}),
		scanErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "msgx_mailbox_scan_errors_total", ConstLabels: labels,
			Help: "Polls that failed (mailbox or store unreachable, ...).",
		}),
		rowsPerScan: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "msgx_mailbox_rows_per_scan", ConstLabels: labels,
			Help:    "Mailbox rows read per scan.",
			Buckets: []float64{0, 1, 5, 10, 25, 50, 100, 250, 500},
		}),
		anomalies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "msgx_mailbox_anomalies_total", ConstLabels: labels,
			Help: "Mailbox misconfigurations and rewinds detected, by kind (alert on any).",
		}, []string{"kind"}),
		unreadable: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "msgx_mailbox_unreadable_seconds", ConstLabels: labels,
			Help: "How long the poller's reads of the mailbox have been failing (missing table, refused login, lost connection); 0 while it reads.",
		}, unreadableSeconds),
	}
	// Every label value exists from the start, at zero, so that alert rules
	// on increase() see the first occurrence.
	for _, a := range []inbox.LateAction{inbox.LateTaken, inbox.LateRefused} {
		m.late.WithLabelValues(string(a))
	}
	for _, kind := range []string{anomalyIncrement, anomalyBackwards} {
		m.anomalies.WithLabelValues(kind)
	}
	return m
}

func (m *pollerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.gapsPermanent, m.idsSkipped, m.gapsWatched, m.late, m.scanErrors, m.rowsPerScan, m.anomalies, m.unreadable}
}

// Describe implements prometheus.Collector.
func (p *Poller) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range p.m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (p *Poller) Collect(ch chan<- prometheus.Metric) {
	for _, c := range p.m.collectors() {
		c.Collect(ch)
	}
}
