package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// Deps is what a factory may use: the service's store, brokers, metrics
// registry, logger and tracer, and whether it runs in shadow mode (a
// processor must then write nothing outside the store: no outbound mailbox),
// the host clock the factory's components read, and the failpoints armed in
// a test run (nil in service).
type Deps struct {
	DB         *store.DB
	Brokers    map[string]*broker.Broker
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Tracer     trace.Tracer
	Shadow     bool
	Clock      clock.Clock
	Failpoints *failpoint.Set
	// OutboxMode is the service's outbox mode (outbox.mode). In the WAL
	// mode one slot serves the schema, so a pipeline hands its targets to
	// the service's relay (Pipeline.Relay) instead of running a relay of
	// its own: a second relay would never see the events the first slot
	// streams.
	OutboxMode outbox.Mode
}

// ProcessorFactory builds the processor of an inbox stream from the
// stream's options (streams.NAME.options in the configuration). A processor
// that enqueues outbox events says for which targets by implementing
// TargetWriter; a typed processor (inbox.Typed) implements it itself, where
// inbox.As finds it.
type ProcessorFactory func(ctx context.Context, d Deps, stream string, options map[string]string) (inbox.Processor, error)

// TargetWriter is a processor that enqueues outbox events. The service
// refuses to start when relay.targets lacks one of its targets: the events
// of such a target would stay PENDING for ever.
type TargetWriter interface {
	// OutboxTargets lists the outbox targets the processor enqueues to.
	OutboxTargets() []string
}

// CloudEventsWriter is a TargetWriter whose events are CloudEvents: the
// relay sends each of the targets it names with the CloudEvents headers of
// its description (outbox.WithCloudEvents).
type CloudEventsWriter interface {
	CloudEvents() map[string]outbox.CloudEvents
}

// PipelineSpec is a configured pipeline.
type PipelineSpec struct {
	Name string
	// Broker is pipelines.NAME.broker (nil when not set).
	Broker  *broker.Broker
	Options map[string]string
}

// Pipeline is a running part of the service that is not an inbox stream
// (e.g. the route passport): Run until ctx ends, HTTP handlers mounted on the
// admin listener behind the operator token, and admin queries.
type Pipeline struct {
	Run func(ctx context.Context) error
	// Handlers by ServeMux pattern ("POST /v1/routepassport/test/").
	Handlers map[string]http.Handler
	// Check, when set, is the pipeline's readiness (check "pipeline NAME"
	// of /readyz): an error while it is stuck, naming on what.
	Check func(ctx context.Context) error
	// Targets are the outbox targets the pipeline enqueues to for the
	// service's relay (not those of a relay of its own); the service refuses
	// to start when relay.targets lacks one.
	Targets []string
	// Relay are outbox targets (outbox.Target options) the pipeline brings
	// for the service's relay to serve, with their lanes and publishers: in
	// the WAL mode (Deps.OutboxMode), its events reach the service's relay.
	Relay []outbox.Option
}

// PipelineFactory builds a pipeline.
type PipelineFactory func(ctx context.Context, d Deps, spec PipelineSpec) (*Pipeline, error)

// QueryFactory builds an admin query (GET /v1/requests, /v1/flights).
type QueryFactory func(d Deps) admin.QueryFunc

// Registry is the extension point: the command registers the processors,
// pipelines and admin queries this build has, by the names the
// configuration uses.
type Registry struct {
	processors map[string]ProcessorFactory
	pipelines  map[string]PipelineFactory
	queries    map[string]QueryFactory
	// The migration lines of each processor and pipeline.
	processorSchema map[string][]store.Line
	pipelineSchema  map[string][]store.Line
	querySchema     map[string][]store.Line
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{processors: map[string]ProcessorFactory{}, pipelines: map[string]PipelineFactory{}, queries: map[string]QueryFactory{},
		processorSchema: map[string][]store.Line{}, pipelineSchema: map[string][]store.Line{}, querySchema: map[string][]store.Line{}}
}

// Processor registers a processor factory and the migration lines of the
// tables its processors use (applied when a configured stream names it); a
// second one of a name panics.
func (r *Registry) Processor(name string, f ProcessorFactory, schema ...store.Line) {
	mustBeNew(r.processors, "processor", name)
	r.processors[name] = f
	r.processorSchema[name] = schema
}

// Pipeline registers a pipeline factory and the migration lines of the
// tables it uses (applied when the pipeline is configured and enabled).
func (r *Registry) Pipeline(name string, f PipelineFactory, schema ...store.Line) {
	mustBeNew(r.pipelines, "pipeline", name)
	r.pipelines[name] = f
	r.pipelineSchema[name] = schema
}

// Query registers an admin query: "requests" or "flights", and the
// migration lines of the tables it reads. The service serves it only when
// the configuration uses those lines (a processor or pipeline that brings
// them is configured); otherwise the query answers Unavailable.
func (r *Registry) Query(name string, f QueryFactory, schema ...store.Line) {
	mustBeNew(r.queries, "query", name)
	r.queries[name] = f
	r.querySchema[name] = schema
}

// BuildPipeline builds the registered pipeline name as the service does
// (an error when no pipeline has that name): the handlers it mounts on the
// admin listener can be checked against the API's document.
func (r *Registry) BuildPipeline(ctx context.Context, name string, d Deps, spec PipelineSpec) (*Pipeline, error) {
	f := r.pipelines[name]
	if f == nil {
		return nil, fmt.Errorf("app: no pipeline %q is registered", name)
	}
	return f(ctx, d, spec)
}

// Processors lists the registered processor names.
func (r *Registry) Processors() []string { return slices.Sorted(maps.Keys(r.processors)) }

// Pipelines lists the registered pipeline names.
func (r *Registry) Pipelines() []string { return slices.Sorted(maps.Keys(r.pipelines)) }

func mustBeNew[V any](m map[string]V, kind, name string) {
	if _, dup := m[name]; dup || name == "" {
		panic(fmt.Sprintf("app: %s %q registered twice or without a name", kind, name))
	}
}
