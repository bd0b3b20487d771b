package admin

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/outbox"
)

// The gauges read from the database at scrape time: what the components'
// own counters cannot know (the state of the tables, whichever process
// wrote it).
var (
	descHeadAge     = prometheus.NewDesc("msgx_stream_head_age_seconds", "Age of the stream's head (its oldest unfinished message) since it was received; 0 when the stream is idle.", []string{"stream"}, nil)
	descHeadBlocked = prometheus.NewDesc("msgx_stream_head_blocked_seconds", "How long the head has been tried since its first attempt; 0 when it is not being retried.", []string{"stream"}, nil)
	descBacklog     = prometheus.NewDesc("msgx_stream_backlog", "Unfinished (PENDING or FAILED) messages of the stream.", []string{"stream"}, nil)
	descStreamDead  = prometheus.NewDesc("msgx_stream_dead", "DEAD messages of the stream (dead letters awaiting replay or acceptance).", []string{"stream"}, nil)
	descGapOpen     = prometheus.NewDesc("msgx_mailbox_gap_open_seconds", "How long the mailbox poller has waited for a missing id; 0 when there is no gap.", []string{"stream"}, nil)
	descGapsSkipped = prometheus.NewDesc("msgx_mailbox_gap_ids_skipped", "Mailbox ids declared permanent gaps and skipped, since the stream began.", []string{"stream"}, nil)
	descBfPending   = prometheus.NewDesc("msgx_backfill_pending", "Terminal messages whose processed mark is not written to the mailbox yet.", []string{"stream"}, nil)
	descBfOverdue   = prometheus.NewDesc("msgx_backfill_overdue", "Pending processed marks older than the overdue limit.", []string{"stream"}, nil)
	descRelayPend   = prometheus.NewDesc("msgx_relay_pending", "PENDING outbox events per target.", []string{"target"}, nil)
	descRelayDead   = prometheus.NewDesc("msgx_relay_dead", "DEAD outbox events per target (dead letters awaiting replay).", []string{"target"}, nil)
	descUnserved    = prometheus.NewDesc("msgx_relay_unserved_pending", "PENDING outbox events of a target that no relay target of this instance serves (relay.targets lacks it): they wait for ever. 0 for a served target.", []string{"target"}, nil)
	descLastSuccess = prometheus.NewDesc("msgx_stream_last_success_timestamp_seconds", "When this process last committed a message of the stream (Unix seconds); absent until it has.", []string{"stream"}, nil)
	descBlocked     = prometheus.NewDesc("msgx_outbox_blocked_keys", "Keys of a per-key target held by a DEAD event that was neither replayed nor skipped: their later events wait. 0 for a per-key target with none; absent for other lanes.", []string{"target"}, nil)
	descBlockedKey  = prometheus.NewDesc("msgx_outbox_blocked_key_waiting", "Events waiting behind the DEAD event event_id that holds key of a per-key target; the first keys only (oldest dead event first, as many as the status lists).", []string{"target", "key", "event_id"}, nil)
	descUp          = prometheus.NewDesc("msgx_status_up", "1 when the last scrape could read the state tables, 0 when it failed.", nil, nil)
)

type collector struct{ s *Server }

// Collector returns the scrape-time gauges of the state tables and the
// counters of the listener's security (failed authentications, refused
// requests, throttle evictions).
func (s *Server) Collector() prometheus.Collector { return collector{s} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHeadAge, descHeadBlocked, descBacklog, descStreamDead, descGapOpen, descGapsSkipped,
		descBfPending, descBfOverdue, descRelayPend, descRelayDead, descUnserved, descBlocked, descBlockedKey, descLastSuccess, descUp} {
		ch <- d
	}
	c.s.authFailures.Describe(ch)
	c.s.refused.Describe(ch)
	c.s.evicted.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.s.authFailures.Collect(ch)
	c.s.refused.Collect(ch)
	c.s.evicted.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label)
	}
	up := 1.0
	st, err := c.s.Status(ctx)
	if err != nil {
		c.s.cfg.Logger.Warn("admin: metrics: reading the state tables failed", "err", err)
		up = 0
	}
	for _, s := range st.Streams {
		gauge(descHeadAge, s.HeadAge, s.Stream)
		gauge(descHeadBlocked, s.HeadBlocked, s.Stream)
		gauge(descBacklog, float64(s.Backlog), s.Stream)
		gauge(descStreamDead, float64(s.Dead), s.Stream)
		gauge(descGapOpen, s.GapOpen, s.Stream)
		gauge(descGapsSkipped, float64(s.IDsSkipped), s.Stream)
		if s.LastSuccess != nil {
			gauge(descLastSuccess, float64(s.LastSuccess.UnixNano())/1e9, s.Stream)
		}
	}
	for _, t := range st.Targets {
		gauge(descRelayPend, float64(t.Pending), t.Target)
		gauge(descRelayDead, float64(t.Dead), t.Target)
		// 0 for a served target, so that the series exists before it is needed.
		unserved := 0.0
		if !t.Relayed {
			unserved = float64(t.Pending)
		}
		gauge(descUnserved, unserved, t.Target)
		if t.Lane == outbox.PerKey.String() {
			gauge(descBlocked, float64(t.BlockedKeys), t.Target)
			for _, b := range t.Blocked {
				ch <- prometheus.MustNewConstMetric(descBlockedKey, prometheus.GaugeValue, float64(b.Waiting), t.Target, b.Key, b.EventID)
			}
		}
	}
	c.s.unserved(st.Targets) // the ERROR lines
	if err == nil {
		bf, err := c.s.Backfill(ctx)
		if err != nil {
			c.s.cfg.Logger.Warn("admin: metrics: reading the backfill state failed", "err", err)
			up = 0
		}
		for _, b := range bf {
			gauge(descBfPending, float64(b.Pending), b.Stream)
			gauge(descBfOverdue, float64(b.Overdue), b.Stream)
		}
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
}
