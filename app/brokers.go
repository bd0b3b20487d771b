package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/broker/mqtt"
	"github.com/msgx/msgx/broker/nats"
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/clock"
)

// newDriver builds the adapter a broker entry names.
// instance is the process's instance id: Kafka consumer groups use it for
// static membership.
func newDriver(name string, c config.Broker, instance string, log *slog.Logger, reg prometheus.Registerer) (driver.Broker, func(), error) {
	// Adapters with metrics of their own get them labelled with the broker's
	// name, so that two brokers of a kind can share the registry.
	own := prometheus.WrapRegistererWith(prometheus.Labels{"broker": name}, reg)
	switch c.Kind {
	case config.KindKafka:
		var opts []kgo.Opt
		if c.ClientID != "" {
			opts = append(opts, kgo.ClientID(c.ClientID))
		}
		weak := false
		switch c.Acks {
		case "leader":
			opts, weak = append(opts, kgo.RequiredAcks(kgo.LeaderAck())), true
		case "none":
			opts, weak = append(opts, kgo.RequiredAcks(kgo.NoAck())), true
		}
		// franz-go's idempotent producer needs acks=all.
		if weak || (c.Idempotence != nil && !*c.Idempotence) {
			opts, weak = append(opts, kgo.DisableIdempotentWrite()), true
		}
		sec, err := kafkaSecurity(c)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, sec...)
		kopts := []kafka.Option{kafka.SeedBrokers(c.Seeds...), kafka.WithLogger(log), kafka.WithClientOptions(opts...),
			kafka.WithInstanceID(instance), kafka.WithSessionTimeout(c.SessionTimeout.D()), kafka.WithMaxMessageBytes(c.MaxMessageBytes)}
		for _, topic := range c.CompactedTopics {
			kopts = append(kopts, kafka.WithTopic(topic, -1, map[string]string{"cleanup.policy": "compact"}))
		}
		if weak {
			// Only the embedded profile gets here (validation refuses it in production).
			kopts = append(kopts, kafka.AllowWeakDurability())
		}
		return kafka.New(kopts...), nil, nil
	case config.KindRabbitMQ:
		return rabbitmq.New(rabbitmq.WithURL(c.URL), rabbitmq.WithLogger(log), rabbitmq.WithConnectionName("msgx-"+name),
			rabbitmq.WithRegisterer(own)), nil, nil
	case config.KindMQTT:
		d, err := mqtt.New(c.URL, mqtt.WithLogger(log))
		return d, nil, err
	case config.KindNATS:
		return nats.New(nats.WithURL(c.URL), nats.WithLogger(log), nats.WithClientName("msgx-"+name)), nil, nil
	case config.KindPulsar:
		return pulsar.New(c.URL, pulsar.WithLogger(log), pulsar.WithRegisterer(own)), nil, nil
	case config.KindMem:
		srv := mem.NewServer()
		return mem.New(srv), srv.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown broker kind %q", c.Kind)
}

// kafkaSecurity is the franz-go options of a Kafka broker's TLS and SASL.
func kafkaSecurity(c config.Broker) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if t := c.TLS; t.On() {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} // InsecureSkipVerify: validation refuses it in production
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("tls.ca-file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("tls.ca-file %s: no PEM certificate in it", t.CAFile)
			}
		}
		if t.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("tls.cert-file/key-file: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		// franz-go sets ServerName per broker from the address it dials.
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	s := c.SASL
	switch s.Mechanism {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("sasl.mechanism %q: not plain, scram-sha-256 or scram-sha-512", s.Mechanism)
	}
	return opts, nil
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
