// Package apptest holds what the service's tests share: FLOP messages made
// from the bundled SIS traffic with fresh SEQNs and few FLIDs, the decoding
// of their head, and Processor, a processor that is not a product pipeline:
// it reads the head of a FLOP message (identity SNDR|TYPE|STYP|SEQN, FLID)
// and writes one outbox event per message, keyed by FLID and carrying the
// processing span's trace context. The app package's tests register it to
// exercise the wiring without depending on a business pipeline; the inbox
// benchmark's toy processor decodes the same head.
package apptest

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// Name is the name the command registers it under.
const Name = "test-only-flop"

// Processor is a typed inbox processor of Flop values
// (inbox.TypedProcessor): the engine takes it as inbox.Typed(p).
type Processor struct {
	// Target and Topic of the events (default kafka:msg and msg).
	Target, Topic string
}

// New builds a processor from stream options "target" and "topic".
func New(options map[string]string) *Processor {
	p := &Processor{Target: options["target"], Topic: options["topic"]}
	if p.Target == "" {
		p.Target = "kafka:msg"
	}
	if p.Topic == "" {
		p.Topic = "msg"
	}
	return p
}

var _ inbox.TypedProcessor[Flop] = (*Processor)(nil)

// Decode implements inbox.TypedProcessor.
func (p *Processor) Decode(b []byte) (inbox.DecodedOf[Flop], error) {
	return DecodeFlop(b)
}

// Process implements inbox.TypedProcessor.
func (p *Processor) Process(ctx context.Context, tx store.Tx, msg *inbox.Message, f Flop) (inbox.Outcome, error) {
	payload, _ := json.Marshal(map[string]any{"msg_id": msg.ID, "flid": f.FLID, "type": f.TYPE, "styp": f.STYP, "seqn": f.SEQN})
	err := outbox.Enqueue(ctx, tx, msg.Now, outbox.Event{
		ID: msg.Stream + ":" + strconv.FormatInt(msg.ID, 10), Target: p.Target, Topic: p.Topic, Key: f.FLID,
		Payload: payload, Headers: tracing.Inject(ctx, nil),
	})
	if err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Done(), nil
}
