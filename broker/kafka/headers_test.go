package kafka

import (
	"testing"

	"github.com/msgx/msgx/broker"
)

func TestPartitionKeyHeaderIsThePorts(t *testing.T) {
	if partitionKeyHeader != broker.HeaderPartitionKey {
		t.Fatalf("partitionKeyHeader = %q, the port uses %q", partitionKeyHeader, broker.HeaderPartitionKey)
	}
}
