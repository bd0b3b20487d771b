package kafka

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/broker"
)

// TestErrorFeedOverflowIsCounted: errors that do not fit the channel are
// counted and logged, not dropped silently, and the count reaches the port's
// metrics.
func TestErrorFeedOverflowIsCounted(t *testing.T) {
	d := New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	reg := prometheus.NewRegistry()
	_ = broker.New("kafka", d, broker.WithRegisterer(reg))
	for i := range 100 {
		d.rep.Report(fmt.Errorf("error %d", i))
	}
	if got := d.DroppedErrors(); got != 100-64 {
		t.Errorf("DroppedErrors = %d, want %d", got, 100-64)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64 = -1
	for _, mf := range mfs {
		if mf.GetName() == "msgx_broker_adapter_errors_dropped_total" {
			got = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got != 100-64 {
		t.Errorf("msgx_broker_adapter_errors_dropped_total = %v, want %d", got, 100-64)
	}
}
