package main

import (
	"context"
	"strings"
	"testing"

	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestSISRequestsSettings(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(buildLines()...))
	d := app.Deps{DB: db}
	if _, err := sisRequests(context.Background(), d, map[string]string{"sendr": "X", "timeout": "soon"}); err == nil ||
		!strings.Contains(err.Error(), "sendr: unknown setting") || !strings.Contains(err.Error(), "timeout") || !strings.Contains(err.Error(), "outbound-dsn is required") {
		t.Fatalf("bad settings: %v", err)
	}
	d.Shadow = true
	p, err := sisRequests(context.Background(), d, map[string]string{"sender": "MSGX", "timeout": "2m"})
	if err != nil || p.Handlers["POST /v1/requests"] == nil {
		t.Fatalf("shadow: %v", err)
	}
}

func TestSISHistorySettings(t *testing.T) {
	d := app.Deps{DB: storetest.NewSQLite(t, store.WithMigrate(buildLines()...))}
	if _, err := sisHistory(d, map[string]string{"retention": "-1h", "at": "25:00", "keep": "x"}); err == nil ||
		!strings.Contains(err.Error(), "retention") || !strings.Contains(err.Error(), "keep: unknown setting") {
		t.Fatalf("bad settings: %v", err)
	}
	if _, err := sisHistory(d, map[string]string{"at": "25:00"}); err == nil {
		t.Fatal("at 25:00 accepted")
	}
	p, err := sisHistory(d, map[string]string{"retention": "72h", "at": "04:15", "batch": "100", "timezone": "Asia/Shanghai"})
	if err != nil || p.Run == nil {
		t.Fatalf("good settings: %v", err)
	}
}
