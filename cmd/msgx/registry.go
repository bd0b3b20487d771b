package main

import (
	"context"

	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testproc"
)

// newRegistry lists the processors, pipelines and admin queries of this
// build by the names configurations use (docs/architecture.md, package app).
func newRegistry() *app.Registry {
	reg := app.NewRegistry()
	// For the service's own end-to-end tests only; not a product pipeline.
	reg.Processor(testproc.Name, func(_ context.Context, _ app.Deps, _ string, opts map[string]string) (inbox.Processor, error) {
		return testproc.New(opts), nil
	})
	return reg
}
