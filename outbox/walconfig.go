package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WAL relay defaults.
const (
	DefaultWALSlot        = "msgx_outbox"
	DefaultWALPublication = "msgx_outbox"
	DefaultWALBatch       = 1000
	DefaultWALLinger      = time.Millisecond
	DefaultWALStandbyPoll = time.Second
	// DefaultWALStatusInterval is how often the relay reports its position
	// to the server when nothing else makes it (well under the server's
	// wal_sender_timeout, 60 s by default).
	DefaultWALStatusInterval = 10 * time.Second
)

type walConfig struct {
	slot, publication string
	batch             int
	linger            time.Duration
	standbyPoll       time.Duration
	statusInterval    time.Duration
}

func defaultWALConfig() walConfig {
	return walConfig{slot: DefaultWALSlot, publication: DefaultWALPublication, batch: DefaultWALBatch,
		linger: DefaultWALLinger, standbyPoll: DefaultWALStandbyPoll, statusInterval: DefaultWALStatusInterval}
}

func (w walConfig) check() error {
	var errs []error
	if w.slot == "" || w.publication == "" {
		errs = append(errs, errors.New("the slot and the publication need names"))
	}
	if w.batch < 1 || w.linger <= 0 || w.standbyPoll <= 0 || w.statusInterval <= 0 {
		errs = append(errs, errors.New("the wal batch, linger, standby poll and status interval must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("outbox: wal relay configuration: %w", err)
	}
	return nil
}

// WALSlot names the WAL relay's logical replication slot (default
// msgx_outbox). Slots are the server's, not the database's: installations
// sharing a server need a slot each.
func WALSlot(name string) Option { return func(c *config) { c.wal.slot = name } }

// WALPublication names the (empty) publication the pgoutput plugin is given
// (default msgx_outbox).
func WALPublication(name string) Option { return func(c *config) { c.wal.publication = name } }

// WALBatch bounds the events the WAL relay publishes before it confirms a
// position (default 1000; whole transactions, so a larger transaction makes
// a larger batch).
func WALBatch(n int) Option { return func(c *config) { c.wal.batch = n } }

// WALLinger bounds how long the WAL relay gathers events read from the
// stream before it publishes them (default 1 ms): the latency it may add to
// an event for the sake of larger sends.
func WALLinger(d time.Duration) Option { return func(c *config) { c.wal.linger = d } }

// WALStandbyPoll sets how often an instance whose slot another relay holds
// tries to take it (default 1 s): with the time the server takes to notice
// a dead holder, the bound of a takeover.
func WALStandbyPoll(d time.Duration) Option { return func(c *config) { c.wal.standbyPoll = d } }

// WALStatusInterval sets how often the stream reports its position when idle
// (default 10 s).
func WALStatusInterval(d time.Duration) Option { return func(c *config) { c.wal.statusInterval = d } }

type walMetrics struct {
	published, spilled *prometheus.CounterVec
	retained, lagBytes prometheus.Gauge
	lagSeconds         prometheus.Gauge
	holder             prometheus.Gauge
	paused             prometheus.Gauge
	invalidated        prometheus.Gauge
}

func newWALMetrics(reg prometheus.Registerer, slot string) *walMetrics {
	l := prometheus.Labels{"slot": slot}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: l})
	}
	m := &walMetrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_wal_published_total",
			Help: "Events streamed from the WAL and confirmed by the broker.", ConstLabels: l}, []string{"target"}),
		spilled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_outbox_wal_spilled_total",
			Help: "Events the WAL relay handed to the outbox table: their send failed, or they wait behind one of their key.", ConstLabels: l}, []string{"target"}),
		retained: g("msgx_outbox_wal_retained_bytes", "WAL the relay's replication slot keeps on the server's disk."),
		lagBytes: g("msgx_outbox_wal_lag_bytes", "WAL written since the slot's confirmed position."),
		lagSeconds: g("msgx_outbox_wal_lag_seconds",
			"Age (server commit time) of the oldest event the holder read and has not confirmed; 0 when none."),
		holder:      g("msgx_outbox_wal_holder", "1 while this instance streams from the slot, 0 while it stands by."),
		paused:      g("msgx_outbox_wal_paused", "1 while the stream waits for an unavailable broker."),
		invalidated: g("msgx_outbox_wal_slot_invalidated", "1 when the server invalidated the slot: events were lost with its WAL."),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.spilled, m.retained, m.lagBytes, m.lagSeconds, m.holder, m.paused, m.invalidated)
	}
	return m
}
