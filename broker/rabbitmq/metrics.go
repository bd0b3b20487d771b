package rabbitmq

import "github.com/prometheus/client_golang/prometheus"

// metrics are the adapter's own signals; message counts and settlements are
// the port's.
type metrics struct {
	up         *prometheus.GaugeVec   // role
	losses     *prometheus.CounterVec // role
	reconnects *prometheus.CounterVec // role
	returned   prometheus.Counter
	nacked     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgx_rabbitmq_connection_up",
			Help: "1 while the connection of the role (publish, consume) is open."}, []string{"role"}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_rabbitmq_connection_losses_total",
			Help: "Connections lost (then re-established with backoff)."}, []string{"role"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_rabbitmq_reconnects_total",
			Help: "Connections re-established after a loss."}, []string{"role"}),
		returned: prometheus.NewCounter(prometheus.CounterOpts{Name: "msgx_rabbitmq_returned_total",
			Help: "Messages the broker returned as unroutable (their publish failed)."}),
		nacked: prometheus.NewCounter(prometheus.CounterOpts{Name: "msgx_rabbitmq_nacked_total",
			Help: "Messages the broker nacked (their publish failed)."}),
	}
	if reg != nil {
		reg.MustRegister(m.up, m.losses, m.reconnects, m.returned, m.nacked)
	}
	return m
}
