package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// failing fails every message as INFRA: with one attempt it goes DEAD
// EXHAUSTED, a replayable dead letter.
type failing struct{}

func (failing) Decode(b []byte) (inbox.Decoded, error) { return inbox.Decoded{Kind: "x"}, nil }
func (failing) Process(context.Context, store.Tx, *inbox.Message) (inbox.Outcome, error) {
	return inbox.Outcome{}, inbox.Failf(inbox.Infra, "downstream unavailable")
}

// msgx replay exits non-zero when any id was refused, in the dry run and
// in the replay, and says in words that a selection matched nothing.
func TestReplayCommandRefusals(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(buildLines()...))
	ctx, cancel := context.WithCancel(context.Background())
	eng, err := inbox.New(db, "s1", failing{}, inbox.WithMaxAttempts(1), inbox.WithPollInterval(10*time.Millisecond),
		inbox.WithBackoff(backoff.Policy{MaxAttempts: 1, Initial: time.Millisecond, Max: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := eng.Enqueue(ctx, inbox.Incoming{ID: 1, Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if row, err := inbox.Get(ctx, db, "s1", 1); err == nil && row.Status == inbox.Dead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("message 1 did not go DEAD")
		}
	}
	srv, err := admin.New(admin.Config{DB: db, Streams: []admin.Stream{{Name: "s1", Engine: eng}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	msgx := func(args ...string) (string, error) {
		return execute(append(args, "--admin", hs.URL, "--reason", "test")...)
	}

	out, err := msgx("replay", "--stream", "s1", "--class", "CODEC_ERROR")
	if err != nil || !strings.Contains(out, "nothing to replay: no replayable FAILED or DEAD message of class CODEC_ERROR in stream s1") {
		t.Errorf("an empty dry run: %v\n%s", err, out)
	}
	out, err = msgx("replay", "--stream", "s1", "--ids", "1,9")
	if err == nil || !strings.Contains(err.Error(), "1 of the selected ids refused") || !strings.Contains(out, "1 would be replayed: 1") ||
		!strings.Contains(out, "refused 9: not found") {
		t.Errorf("a dry run with a refused id: %v\n%s", err, out)
	}
	out, err = msgx("replay", "--stream", "s1", "--ids", "9", "--yes")
	if err == nil || !strings.Contains(out, "nothing to replay: none of the 1 ids given is replayable") || !strings.Contains(out, "refused 9: not found") {
		t.Errorf("a replay of a refused id only: %v\n%s", err, out)
	}
	out, err = msgx("replay", "--stream", "s1", "--ids", "1,9", "--yes")
	if err == nil || !strings.Contains(err.Error(), "the others were replayed") || !strings.Contains(out, "1 replayed: 1") {
		t.Errorf("a replay with a refused id: %v\n%s", err, out)
	}
}
