package mqtt

import (
	"context"

	"github.com/msgx/msgx/broker/driver"
)

// PublishStored publishes as the port's re-publishes and dead letters do: a
// message nobody subscribes to is a failure.
func PublishStored(ctx context.Context, d *Driver, topic string, msgs []*driver.Message) error {
	return d.publish(ctx, topic, msgs, true)
}
