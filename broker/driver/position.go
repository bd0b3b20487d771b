package driver

// Positioned is implemented by the deliveries of brokers whose messages have
// a position in a partitioned log (Kafka): the partition and the offset of
// the record. A record delivered again (after a restart or a rebalance) has
// the same position, so consumers may use it as the record's identity.
type Positioned interface {
	Position() (partition int32, offset int64)
}
