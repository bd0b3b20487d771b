package main

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/store/storetest"
)

// The handlers this build's pipelines mount on the admin listener are the
// operations the API's document gives to them (x-msgx-pipeline), and no
// other operation is documented as a pipeline's.
func TestPipelineHandlersAreInTheOpenAPIDocument(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(admin.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{} // "POST /v1/requests" -> its pipeline
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if name, ok := op.Extensions["x-msgx-pipeline"].(string); ok {
				documented[method+" "+path] = name
			}
		}
	}
	ctx := context.Background()
	reg := newRegistry()
	// Shadow mode: the SIS requests need no outbound mailbox; the broker is
	// never started (the handlers are only listed).
	deps := app.Deps{DB: storetest.NewPostgres(t), Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Shadow: true}
	b := broker.New("mem", mem.New(mem.NewServer()), broker.WithLogger(deps.Logger))
	mounted := map[string]string{}
	for _, name := range reg.Pipelines() {
		p, err := reg.BuildPipeline(ctx, name, deps, app.PipelineSpec{Name: name, Broker: b, Options: map[string]string{}})
		if err != nil {
			t.Fatalf("pipeline %s: %v", name, err)
		}
		for pattern := range p.Handlers {
			mounted[pattern] = name
			if !strings.HasPrefix(pattern, "POST ") && !strings.HasPrefix(pattern, "GET ") {
				t.Errorf("pipeline %s mounts %q without a method", name, pattern)
			}
		}
	}
	for _, pattern := range slices.Sorted(maps.Keys(mounted)) {
		if documented[pattern] != mounted[pattern] {
			t.Errorf("pipeline %s mounts %s; the document gives it to %q", mounted[pattern], pattern, documented[pattern])
		}
	}
	for _, op := range slices.Sorted(maps.Keys(documented)) {
		if _, ok := mounted[op]; !ok {
			t.Errorf("the document gives %s to pipeline %s, which does not mount it", op, documented[op])
		}
	}
}
