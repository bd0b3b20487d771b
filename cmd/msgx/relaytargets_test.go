package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/app/config"
)

// The built-in default runs the SIS stream with a relay for each of its
// targets; without the kafka:ref relay the service refuses to start and
// says which key to add.
func TestEmbeddedDefaultRelaysEverySISTarget(t *testing.T) {
	load := func() *config.Config {
		cfg, err := config.Load("", []string{"MSGX_STORE_DSN=sqlite:" + filepath.Join(t.TempDir(), "msgx.db"),
			"MSGX_ADMIN_LISTEN=127.0.0.1:0", "MSGX_INGRESS_LISTEN=127.0.0.1:0"}, adapters())
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, load(), newRegistry(), app.WithLogOutput(io.Discard))
	if err != nil {
		t.Fatalf("the embedded default: %v", err)
	}
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := load()
	delete(cfg.Relay.Targets, "kafka:ref")
	_, err = app.New(context.Background(), cfg, newRegistry(), app.WithLogOutput(io.Discard))
	if err == nil || !strings.Contains(err.Error(), `streams.sis (processor sis) enqueues events for outbox target "kafka:ref", but relay.targets has no "kafka:ref"`) {
		t.Fatalf("the default without kafka:ref: %v", err)
	}
}
