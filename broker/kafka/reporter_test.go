package kafka

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
)

// TestErrorFeedOverflowIsCounted: errors that do not fit the channel are
// counted and logged, not dropped silently.
func TestErrorFeedOverflowIsCounted(t *testing.T) {
	d := New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	for i := range 100 {
		d.rep.Report(fmt.Errorf("error %d", i))
	}
	if got := d.DroppedErrors(); got != 100-64 {
		t.Errorf("DroppedErrors = %d, want %d", got, 100-64)
	}
}
