package mem_test

import (
	"context"
	"testing"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/mem"
)

type harness struct{ srv *mem.Server }

func (h *harness) Name() string { return "mem" }

func (h *harness) NewDriver(context.Context) (driver.Broker, error) { return mem.New(h.srv), nil }

func (h *harness) UnreachableDriver(context.Context) (driver.Broker, error) {
	gone := mem.NewServer()
	gone.Close()
	return mem.New(gone), nil
}

func (h *harness) Outage(context.Context) (func(), error) {
	h.srv.CutConnections()
	h.srv.SetDown(true)
	return func() { h.srv.SetDown(false) }, nil
}

func (h *harness) RefusedTopic() string { return "refused" }

func TestConformance(t *testing.T) {
	srv := mem.NewServer()
	srv.Refuse("refused")
	brokertest.Run(t, &harness{srv: srv}, brokertest.Options{})
}
