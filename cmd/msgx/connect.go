package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

// connectTimeout bounds each attempt of serve --check --connect.
const connectTimeout = 10 * time.Second

// checkConnect tries every database and broker cfg would use, each within
// connectTimeout, and prints a line for each: what, where (passwords
// hidden), and ok or why not. It changes nothing: the store is not
// migrated, a broker is started and pinged, nothing is sent.
func checkConnect(ctx context.Context, w io.Writer, cfg *config.Config) error {
	failed := 0
	report := func(what, where string, err error) {
		if err != nil {
			failed++
			fmt.Fprintf(w, "  %-22s %s: FAILED: %v\n", what, where, err)
			return
		}
		fmt.Fprintf(w, "  %-22s %s: ok\n", what, where)
	}
	fmt.Fprintln(w, "connecting to what the configuration uses:")
	report("store", config.RedactDSN(cfg.Store.DSN), within(ctx, func(ctx context.Context) error {
		db, err := store.Open(ctx, cfg.Store.DSN)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.Ping(ctx)
	}))
	for _, name := range slices.Sorted(maps.Keys(cfg.Mailboxes)) {
		mb := cfg.Mailboxes[name]
		if mb.Kind != "mysql" {
			continue // the store's own table: checked with the store
		}
		report("mailbox "+name, config.RedactDSN(mb.DSN)+" table "+mb.Table, within(ctx, func(ctx context.Context) error {
			t, err := mailbox.OpenMySQL(ctx, mb.DSN, mailbox.WithTable(mb.Table))
			if err != nil {
				return err
			}
			defer t.Close()
			if err := t.Ping(ctx); err != nil {
				return err
			}
			_, err = t.MaxID(ctx) // the table is there and readable
			return err
		}))
	}
	quiet := slog.New(slog.DiscardHandler)
	for _, name := range slices.Sorted(maps.Keys(cfg.Brokers)) {
		b := cfg.Brokers[name]
		report("broker "+name, b.Kind, within(ctx, func(ctx context.Context) error {
			drv, err := b.Settings.Driver(brokers.Env{Name: name, InstanceID: cfg.InstanceID, Logger: quiet, Registerer: prometheus.NewRegistry()})
			if err != nil {
				return err
			}
			br := broker.New(name, drv, broker.WithLogger(quiet), broker.WithRegisterer(prometheus.NewRegistry()))
			if err := br.Start(ctx); err != nil {
				return err
			}
			defer br.Stop(context.WithoutCancel(ctx))
			if err := br.Ping(ctx); err != nil && !errors.Is(err, broker.ErrUnsupported) {
				return err
			}
			return nil
		}))
	}
	if failed > 0 {
		return fmt.Errorf("%d of the configuration's databases and brokers cannot be reached (see above)", failed)
	}
	return nil
}

// within runs f bounded by connectTimeout.
func within(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	return f(ctx)
}
