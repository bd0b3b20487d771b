package broker

import "github.com/msgx/msgx/broker/driver"

// Position returns the partition and offset of the delivered record where the
// adapter has them (Kafka); ok is false for brokers without log positions.
// A record delivered again after a restart or rebalance has the same
// position; a requeued copy has none (Kafka reads it from the group's retry
// topic, where its partition and offset are no position in Topic).
func (d *Delivery) Position() (partition int32, offset int64, ok bool) {
	p, ok := d.drv.(driver.Positioned)
	if !ok {
		return 0, 0, false
	}
	partition, offset = p.Position()
	return partition, offset, true
}
