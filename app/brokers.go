package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
)

// newDriver builds the driver of a broker entry through its adapter's
// settings (the service imports no adapter: the configuration was decoded
// with the registry of the build's adapters). instance is the process's
// instance id (Kafka consumer groups use it for static membership).
func newDriver(name string, c config.Broker, instance string, log *slog.Logger, reg prometheus.Registerer) (driver.Broker, error) {
	if c.Settings == nil {
		return nil, fmt.Errorf("no adapter of kind %q in this build", c.Kind)
	}
	// Adapters with metrics of their own get them labelled with the broker's
	// name, so that two brokers of a kind can share the registry.
	own := prometheus.WrapRegistererWith(prometheus.Labels{"broker": name}, reg)
	return c.Settings.Driver(brokers.Env{Name: name, InstanceID: instance, Logger: log, Registerer: own})
}

// startHint is what else a failed start of the broker may mean ("" for
// nothing more).
func startHint(c config.Broker) string {
	if h, ok := c.Settings.(brokers.StartHinter); ok {
		return h.StartHint()
	}
	return ""
}

// brokerHealth is a broker's readiness: the adapter's own round trip to the
// broker where it has one (driver.Pinger), bounded by pingTimeout; for an
// adapter without one (Pulsar), its asynchronous errors: unhealthy while the
// last one is recent.
type brokerHealth struct {
	b           *broker.Broker
	window      time.Duration
	pingTimeout time.Duration
	clock       clock.Clock // the broker's: its events are stamped on it
	log         *slog.Logger
	connected   prometheus.Gauge
	failures    prometheus.Counter
	// hint is added to a start error (what else ends so).
	hint string

	mu      sync.Mutex
	lastErr error
	lastAt  time.Time
	// startErr is the last failed start while the broker is not started;
	// starts counts the attempts.
	startErr error
	starts   int
}

// startAttemptTimeout bounds one attempt to start a broker, so that a broker
// that does not answer (a black-holed address) is tried again.
const startAttemptTimeout = 15 * time.Second

// start tries once to start the broker, bounded by startAttemptTimeout, and
// records the outcome for readiness and the metrics.
func (h *brokerHealth) start(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, startAttemptTimeout)
	defer cancel()
	err := h.b.Start(sctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.starts++
	if err != nil {
		h.startErr = fmt.Errorf("%w%s", err, h.hint)
		h.failures.Inc()
		return h.startErr
	}
	h.startErr = nil
	h.connected.Set(1)
	return nil
}

// connect keeps starting a broker that has not started, with backoff p,
// until it starts or ctx ends. It logs the first failure here and then at
// most one line a minute (each with the number of attempts), and a line when
// the broker starts.
func (h *brokerHealth) connect(ctx context.Context, p backoff.Policy) {
	select {
	case <-h.b.Started():
		return
	default:
	}
	logged := h.clock.Now() // the first failure was logged at the start
	for failures := 1; ; failures++ {
		t := h.clock.NewTimer(p.Delay(failures))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		err := h.start(ctx)
		if err == nil {
			h.log.Info("broker started after its start had failed; its consumers start now, and the relay sends its pending events",
				"broker", h.b.Name(), "attempts", failures+1)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if now := h.clock.Now(); now.Sub(logged) >= time.Minute {
			logged = now
			h.log.Warn("broker still does not start; retrying", "broker", h.b.Name(), "attempts", failures+1, "err", err)
		}
	}
}

func (h *brokerHealth) follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-h.b.Events():
			h.mu.Lock()
			h.lastErr, h.lastAt = e.Err, e.Time
			h.mu.Unlock()
		}
	}
}

func (h *brokerHealth) check(ctx context.Context) error {
	h.mu.Lock()
	startErr, starts := h.startErr, h.starts
	h.mu.Unlock()
	if startErr != nil {
		return fmt.Errorf("not started after %d attempts, retrying: %w", starts, startErr)
	}
	pctx, cancel := context.WithTimeout(ctx, h.pingTimeout)
	defer cancel()
	err := h.b.Ping(pctx)
	if !errors.Is(err, broker.ErrUnsupported) {
		// The broker answered now or did not: that decides, whatever
		// failed asynchronously before.
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ago := h.clock.Now().Sub(h.lastAt); h.lastErr != nil && ago < h.window {
		return fmt.Errorf("error %s ago: %w", ago.Round(time.Second), h.lastErr)
	}
	return nil
}
