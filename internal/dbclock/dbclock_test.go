package dbclock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
)

func TestSyncCorrectsTheHostClock(t *testing.T) {
	host := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := New(host)
	if !c.Due() || !c.Now().Equal(host.Now()) {
		t.Fatal("before the first measurement the clock is the host's and a measurement is due")
	}
	// The database is 40 s behind this host; the read takes 2 s.
	read := func(context.Context) (time.Time, error) {
		host.Advance(time.Second)
		db := host.Now().Add(-40 * time.Second)
		host.Advance(time.Second)
		return db, nil
	}
	if err := c.Sync(context.Background(), read); err != nil {
		t.Fatal(err)
	}
	if got := c.Offset(); got != -40*time.Second {
		t.Fatalf("offset %s, want -40s", got)
	}
	if got := c.Now().Sub(host.Now()); got != -40*time.Second {
		t.Fatalf("Now is %s off the host, want -40s", got)
	}
	if c.Due() {
		t.Fatal("a measurement is due right after one")
	}
	host.Advance(Resync)
	if !c.Due() {
		t.Fatalf("no measurement due %s after the last", Resync)
	}
	// Within the round trip: no correction.
	if err := c.Sync(context.Background(), func(context.Context) (time.Time, error) {
		host.Advance(2 * time.Second)
		return host.Now().Add(500 * time.Millisecond), nil
	}); err != nil || c.Offset() != 0 {
		t.Fatalf("offset %s (%v) for a difference within the round trip, want none", c.Offset(), err)
	}
	if err := c.Sync(context.Background(), func(context.Context) (time.Time, error) { return time.Time{}, errors.New("down") }); err == nil {
		t.Fatal("a failed read is not reported")
	}
}

func TestPaced(t *testing.T) {
	if !clock.Paced(New(clock.Real{})) || !clock.Paced(New(clock.Offset{Base: clock.Real{}, D: time.Minute})) {
		t.Fatal("a corrected wall clock runs at the wall clock's pace")
	}
	if clock.Paced(New(clock.NewFake(time.Unix(0, 0)))) {
		t.Fatal("a corrected fake clock is not paced")
	}
}
