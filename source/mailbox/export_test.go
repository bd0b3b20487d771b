package mailbox

import "github.com/prometheus/client_golang/prometheus"

// LateRows is the late-rows counter of an action (tests).
func (p *Poller) LateRows(action string) prometheus.Collector {
	return p.m.late.WithLabelValues(action)
}

// GapsWatched is the watched-gaps gauge (tests).
func (p *Poller) GapsWatched() prometheus.Collector { return p.m.gapsWatched }

// WithGapTimesFromClock ages gaps on the poller's clock instead of the
// database's, so tests on a fake clock can age them.
func WithGapTimesFromClock() PollerOption { return func(o *pollerOptions) { o.hostTime = true } }

// Anomalies is the anomaly counter of a kind (tests).
func (p *Poller) Anomalies(kind string) prometheus.Collector {
	return p.m.anomalies.WithLabelValues(kind)
}

// UnreadableGauge is msgx_mailbox_unreadable_seconds (tests).
func (p *Poller) UnreadableGauge() prometheus.Collector { return p.m.unreadable }
