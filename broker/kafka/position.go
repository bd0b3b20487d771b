package kafka

// Position implements driver.Positioned.
func (d *delivery) Position() (partition int32, offset int64) { return d.partition, d.offset }
