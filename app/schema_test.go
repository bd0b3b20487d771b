package app

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// The service migrates the lines its configuration uses: its own (admin,
// inbox, outbox), the store's mailbox table only for a mailbox of kind
// store, and a processor's or pipeline's lines only when a stream names the
// processor or the pipeline is enabled.
func TestSchemaFollowsTheConfiguration(t *testing.T) {
	flights := store.Line{Name: "flights", Requires: []store.Line{inbox.Schema(), outbox.Schema()}}
	routes := store.Line{Name: "routes", Requires: []store.Line{outbox.Schema()}}
	reg := NewRegistry()
	reg.Processor("flights", func(context.Context, Deps, string, map[string]string) (inbox.Processor, error) { return nil, nil }, flights)
	reg.Pipeline("routes", func(context.Context, Deps, PipelineSpec) (*Pipeline, error) { return nil, nil }, routes)
	off, on := false, true
	for _, c := range []struct {
		name string
		cfg  config.Config
		want []string
	}{
		{"nothing configured", config.Config{}, []string{"admin", "inbox", "outbox"}},
		{"a MySQL mailbox", config.Config{Mailboxes: map[string]config.Mailbox{"m": {Kind: config.MailboxMySQL}}},
			[]string{"admin", "inbox", "outbox"}},
		{"a store mailbox", config.Config{Mailboxes: map[string]config.Mailbox{"m": {Kind: config.MailboxStore}}},
			[]string{"admin", "inbox", "mailbox", "outbox"}},
		{"a stream of the processor", config.Config{Streams: map[string]config.Stream{"s": {Processor: "flights"}}},
			[]string{"admin", "flights", "inbox", "outbox"}},
		{"the pipeline disabled", config.Config{Pipelines: map[string]config.Pipeline{"routes": {Enabled: &off}}},
			[]string{"admin", "inbox", "outbox"}},
		{"the pipeline enabled", config.Config{Pipelines: map[string]config.Pipeline{"routes": {Enabled: &on}}},
			[]string{"admin", "inbox", "outbox", "routes"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(lineNames(Schema(&c.cfg, reg))))
			if !slices.Equal(got, c.want) {
				t.Fatalf("lines %v, want %v", got, c.want)
			}
		})
	}
	all := slices.Sorted(maps.Keys(lineNames(AllSchema(reg))))
	if want := []string{"admin", "flights", "inbox", "mailbox", "outbox", "routes"}; !slices.Equal(all, want) {
		t.Fatalf("every line: %v, want %v", all, want)
	}
}
