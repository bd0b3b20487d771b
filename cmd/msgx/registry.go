package main

import (
	"context"
	"errors"
	"net/http"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/routepassport"
	"github.com/msgx/msgx/pipeline/sis"
)

// newRegistry lists the processors, pipelines and admin queries of this
// build by the names configurations use (docs/architecture.md, package app).
func newRegistry() *app.Registry {
	reg := app.NewRegistry()
	// The SIS flight exchange: an inbox stream's processor. Its three outbox
	// targets (sis.TargetMsg, sis.TargetSchd, sis.TargetRef) are mapped to a broker and a
	// lane under relay.targets.
	reg.Processor("sis", func(_ context.Context, d app.Deps, _ string, settings map[string]string) (inbox.Processor, error) {
		cfg, err := sis.ConfigFromSettings(settings)
		if err != nil {
			return nil, err
		}
		p, err := sis.NewProcessor(cfg, sis.WithLogger(d.Logger), sis.WithRegisterer(d.Registerer), sis.WithFailpoints(d.Failpoints))
		if err != nil {
			return nil, err
		}
		return inbox.Typed(p), nil
	}, sis.Schema())
	// SIS requests: the coordinator that sends RQFD/RQRD through the
	// outbound mailbox (COUTMSGS) and expires them; POST /v1/requests sends
	// one, GET /v1/requests (msgx requests) lists them.
	reg.Pipeline("sisrequests", func(ctx context.Context, d app.Deps, spec app.PipelineSpec) (*app.Pipeline, error) {
		return sisRequests(ctx, d, spec.Options)
	}, sis.Schema())
	// The daily history sweep of the SIS flight state.
	reg.Pipeline("sishistory", func(_ context.Context, d app.Deps, spec app.PipelineSpec) (*app.Pipeline, error) {
		return sisHistory(d, spec.Options)
	}, sis.Schema())
	reg.Query("requests", func(d app.Deps) admin.QueryFunc { return sis.RequestsQuery(d.DB) }, sis.Schema())
	// GET /v1/flights (msgx flights): the flight query, from the flight state.
	reg.Query("flights", func(d app.Deps) admin.QueryFunc { return sis.FlightsQuery(d.DB) }, sis.Schema())
	// GET /v1/flights/{flid}/history (msgx flights history FLID): a
	// flight's versions; GET /v1/messages/{stream}/{id}/effects: the
	// versions one message made.
	reg.Query("flight-history", func(d app.Deps) admin.QueryFunc { return sis.FlightHistoryQuery(d.DB) }, sis.Schema())
	reg.Query("message-effects", func(d app.Deps) admin.QueryFunc { return sis.MessageEffectsQuery(d.DB) }, sis.Schema())
	// Route passports: a broker consumer with its own relay of the two
	// output topics; in the outbox's WAL mode the service's relay serves
	// them instead, from the service's one slot.
	reg.Pipeline("routepassport", func(_ context.Context, d app.Deps, spec app.PipelineSpec) (*app.Pipeline, error) {
		if spec.Broker == nil {
			return nil, errors.New("routepassport: pipelines.routepassport.broker is required")
		}
		opts, err := routepassport.OptionsFromSettings(spec.Options)
		if err != nil {
			return nil, err
		}
		opts = append(opts, routepassport.WithLogger(d.Logger), routepassport.WithRegisterer(d.Registerer))
		if d.Clock != nil {
			opts = append(opts, routepassport.WithClock(d.Clock))
		}
		wal := d.OutboxMode == outbox.ModeWAL
		if wal {
			opts = append(opts, routepassport.WithRelay(false))
		}
		p, err := routepassport.New(d.DB, spec.Broker, opts...)
		if err != nil {
			return nil, err
		}
		pl := &app.Pipeline{
			Run: func(ctx context.Context) error {
				defer p.Close()
				return p.Run(ctx)
			},
			Handlers: map[string]http.Handler{"POST /v1/routepassport/test": p.TestController()},
			Check:    p.Check,
		}
		if wal {
			pl.Relay = p.RelayTargets()
		}
		return pl, nil
	}, routepassport.Schema())
	return reg
}
