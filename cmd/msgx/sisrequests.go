package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/source/mailbox"
)

// sisRequests builds the SIS request coordinator from pipelines.sisrequests.options:
//
//	outbound-dsn    the shared MySQL server of COUTMSGS (required unless shadow)
//	outbound-table  default coutmsgs
//	routing-id      ROUTINGID of the rows (default SIS)
//	sender          SNDR of the requests, our system code (default MSGX)
//	timeout         how long a request waits for its RESP (default 10m)
//	check           period of the expiry check (default 5s)
//	timezone        airport time zone (default Asia/Shanghai)
func sisRequests(ctx context.Context, d app.Deps, o map[string]string) (*app.Pipeline, error) {
	known := []string{"outbound-dsn", "outbound-table", "routing-id", "sender", "timeout", "check", "timezone"}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if !slices.Contains(known, k) {
			errs = append(errs, fmt.Errorf("%s: unknown setting (known: %s)", k, strings.Join(known, ", ")))
		}
	}
	opts := []sis.CoordinatorOption{sis.WithRequestLogger(d.Logger), sis.WithShadow(d.Shadow)}
	if d.Clock != nil {
		opts = append(opts, sis.WithRequestClock(d.Clock))
	}
	if v := o["sender"]; v != "" {
		opts = append(opts, sis.WithSenderCode(v))
	}
	opts = append(opts, durationOptions(o, map[string]func(time.Duration) sis.CoordinatorOption{
		"timeout": sis.WithRequestTimeout, "check": sis.WithRequestCheck}, &errs)...)
	outOpts := []mailbox.OutboundOption{}
	if v := o["timezone"]; v != "" {
		loc, err := time.LoadLocation(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("timezone: %w", err))
		} else {
			opts = append(opts, sis.WithRequestLocation(loc))
			outOpts = append(outOpts, mailbox.WithOutboundTimeZone(loc))
		}
	}
	if v := o["outbound-table"]; v != "" {
		outOpts = append(outOpts, mailbox.WithOutboundTable(v))
	}
	if v := o["routing-id"]; v != "" {
		outOpts = append(outOpts, mailbox.WithRoutingID(v))
	}
	if o["outbound-dsn"] == "" && !d.Shadow {
		errs = append(errs, errors.New("outbound-dsn is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sisrequests: %w", err)
	}
	var (
		out   sis.Outbound
		close func() error
	)
	if dsn := o["outbound-dsn"]; dsn != "" && !d.Shadow {
		if !strings.Contains(dsn, "parseTime=") {
			dsn += map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + "parseTime=true"
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, fmt.Errorf("sisrequests: %w", err)
		}
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("sisrequests: outbound mailbox: %w", err)
		}
		ob, err := mailbox.NewOutbound(db, outOpts...)
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("sisrequests: %w", err)
		}
		out, close = ob, db.Close
	}
	c, err := sis.NewCoordinator(d.DB, out, opts...)
	if err != nil {
		if close != nil {
			_ = close()
		}
		return nil, err
	}
	return &app.Pipeline{
		Run: func(ctx context.Context) error {
			if close != nil {
				defer close()
			}
			return c.Run(ctx)
		},
		Handlers: map[string]http.Handler{"POST /v1/requests": c.Handler()},
	}, nil
}

// sisHistory builds the daily history sweep of the SIS flight state from
// pipelines.sishistory.options:
//
//	retention       a flight past its operation day or quiet this long moves to history (default 336h)
//	snap-retention  the snapshot log's retention (default 2160h, 90 days)
//	at              HH:MM airport time of the daily sweep (default 03:30)
//	batch           flights per transaction (default 500)
//	timezone        airport time zone (default Asia/Shanghai)
//	schd-topic      topic of the tombstones (default sis.schd; the sis stream's)
func sisHistory(d app.Deps, o map[string]string) (*app.Pipeline, error) {
	known := []string{"retention", "snap-retention", "at", "batch", "timezone", "schd-topic"}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if !slices.Contains(known, k) {
			errs = append(errs, fmt.Errorf("%s: unknown setting (known: %s)", k, strings.Join(known, ", ")))
		}
	}
	opts := []sis.HistoryOption{sis.WithHistoryLogger(d.Logger)}
	if d.Clock != nil {
		opts = append(opts, sis.WithHistoryClock(d.Clock))
	}
	opts = append(opts, durationOptions(o, map[string]func(time.Duration) sis.HistoryOption{
		"retention": sis.WithRetention, "snap-retention": sis.WithSnapLogRetention}, &errs)...)
	if v := o["batch"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("batch: %q is not a positive number", v))
		}
		opts = append(opts, sis.WithHistoryBatch(n))
	}
	if v := o["at"]; v != "" {
		opts = append(opts, sis.WithHistoryAt(v))
	}
	cfg := sis.Config{SchdTopic: o["schd-topic"]}
	if v := o["timezone"]; v != "" {
		loc, err := time.LoadLocation(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("timezone: %w", err))
		}
		cfg.Location = loc
	}
	opts = append(opts, sis.WithHistoryConfig(cfg))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sishistory: %w", err)
	}
	h, err := sis.NewHistory(d.DB, opts...)
	if err != nil {
		return nil, err
	}
	// The sweep enqueues the tombstones of the flights it purges.
	return &app.Pipeline{Run: h.Run, Targets: []string{sis.TargetSchd}}, nil
}

// durationOptions reads the positive durations of settings into options,
// noting the bad ones in errs.
func durationOptions[O any](settings map[string]string, setters map[string]func(time.Duration) O, errs *[]error) []O {
	var out []O
	for _, key := range slices.Sorted(maps.Keys(setters)) {
		v := settings[key]
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			*errs = append(*errs, fmt.Errorf("%s: %q is not a positive duration", key, v))
			continue
		}
		out = append(out, setters[key](d))
	}
	return out
}
