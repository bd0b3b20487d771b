package mqtt

import (
	"context"
	"net"

	"github.com/msgx/msgx/broker/driver"
)

// PublishStored publishes as the port's re-publishes and dead letters do: a
// message nobody subscribes to is a failure.
func PublishStored(ctx context.Context, d *Driver, topic string, msgs []*driver.Message) error {
	return d.publish(ctx, topic, msgs, true)
}

// WithConnWrapper has every connection of the driver dialled over plain TCP
// and wrapped by wrap before paho uses it.
func WithConnWrapper(wrap func(net.Conn) net.Conn) Option {
	return func(o *options) { o.wrapConn = wrap }
}
