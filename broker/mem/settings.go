package mem

import (
	"context"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/driver"
)

// Kind is the kind of an in-process broker block.
const Kind = "mem"

// Adapter is the in-process adapter for a brokers.Registry.
func Adapter() brokers.Adapter {
	return brokers.Adapter{Kind: Kind, New: func() brokers.Config { return &Config{} }}
}

// Config is an in-process broker block of the service's configuration: it
// has no settings beside kind. Each block is a server of its own.
type Config struct{}

// SetDefaults implements brokers.Config.
func (*Config) SetDefaults() {}

// Validate implements brokers.Config: the production profile refuses the
// in-process broker.
func (*Config) Validate(chk *brokers.Check) {
	if chk.Production {
		chk.Addf("kind", "the in-memory broker is refused in the production profile: it loses every message when the process ends")
	}
}

// Driver implements brokers.Config: a driver on a new server that closes
// with it.
func (*Config) Driver(brokers.Env) (driver.Broker, error) {
	return &owner{Driver: New(NewServer())}, nil
}

// owner is a driver that owns its server: closing it closes the server.
type owner struct {
	*Driver
}

// Close implements driver.Broker.
func (o *owner) Close(ctx context.Context) error {
	err := o.Driver.Close(ctx)
	o.s.Close()
	return err
}
