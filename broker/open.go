package broker

import (
	"fmt"
	"log/slog"

	"github.com/msgx/msgx/broker/brokers"
)

// Open builds a broker from an adapter's settings outside the service (a
// *kafka.Config, *rabbitmq.Config...): it fills in their defaults,
// validates them, builds the driver and wraps it as the broker name. e's
// Name defaults to name and its Logger to slog's default.
func Open(name string, c brokers.Config, e brokers.Env, opts ...Option) (*Broker, error) {
	if err := brokers.Prepare(name, c); err != nil {
		return nil, err
	}
	if e.Name == "" {
		e.Name = name
	}
	if e.Logger == nil {
		e.Logger = slog.Default()
	}
	d, err := c.Driver(e)
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", name, err)
	}
	return New(name, d, append([]Option{WithLogger(e.Logger)}, opts...)...), nil
}
