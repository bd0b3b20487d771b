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

func (h *harness) Target() string { return "in process" }

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

// tckMaxMessageBytes is the size limit of the suite's server.
const tckMaxMessageBytes = 1 << 20

func (h *harness) MaxMessageBytes() int { return tckMaxMessageBytes }

func TestConformance(t *testing.T) {
	srv := mem.NewServer(mem.MaxMessageBytes(tckMaxMessageBytes))
	srv.Refuse("refused")
	brokertest.Run(t, &harness{srv: srv}, brokertest.Options{})
}

func TestKeyStaysWithItsHolderAcrossCompetingConsumers(t *testing.T) {
	ctx := context.Background()
	srv := mem.NewServer()
	d := mem.New(srv)
	spec := driver.SubscriptionSpec{Topic: "t", Group: "g", Prefetch: 10}
	a, err := d.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Publish(ctx, "t", []*driver.Message{{Key: "K", Payload: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	first, err := a.Receive(ctx, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("a: %v %v", first, err)
	}
	if err := d.Publish(ctx, "t", []*driver.Message{{Key: "K", Payload: []byte("2")}, {Key: "L", Payload: []byte("3")}}); err != nil {
		t.Fatal(err)
	}
	// b may take L, never K while a holds K.
	got, err := b.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Message().Key != "L" {
		t.Fatalf("b received %d messages, first key %q; want only L", len(got), got[0].Message().Key)
	}
	if err := first[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = b.Receive(ctx, 10)
	if err != nil || len(got) != 1 || string(got[0].Message().Payload) != "2" {
		t.Fatalf("after a released K, b got %v %v", got, err)
	}
}
