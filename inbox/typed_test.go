package inbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// note is what the typed test processors decode a payload "identity;kind"
// into.
type note struct{ Identity, Kind string }

// notes is a typed processor of notes that records what it processed; a
// note of kind "skip" is SKIPPED.
type notes struct {
	mu        sync.Mutex
	processed []note
}

func (p *notes) Decode(b []byte) (inbox.DecodedOf[note], error) { return decodeNote(b) }

func decodeNote(b []byte) (inbox.DecodedOf[note], error) {
	s := string(b)
	if s == "garbage" {
		return inbox.DecodedOf[note]{}, inbox.Failf(inbox.Malformed, "not a message")
	}
	id, kind, _ := strings.Cut(s, ";")
	return inbox.DecodedOf[note]{Identity: id, Kind: kind, Value: note{id, kind}}, nil
}

func (p *notes) Process(_ context.Context, _ store.Tx, msg *inbox.Message, n note) (inbox.Outcome, error) {
	if msg.Identity != n.Identity {
		return inbox.Outcome{}, errors.New("the note is not the message's")
	}
	p.mu.Lock()
	p.processed = append(p.processed, n)
	p.mu.Unlock()
	if n.Kind == "skip" {
		return inbox.Skip("ignored"), nil
	}
	return inbox.Done(), nil
}

func (p *notes) seen() []note {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.processed)
}

// OutboxTargets is an optional interface its users look for on a
// processor (the service's TargetWriter).
func (p *notes) OutboxTargets() []string { return []string{"kafka:notes"} }

type targetWriter interface{ OutboxTargets() []string }

// preparingNotes is notes with a read-ahead that records its batches.
type preparingNotes struct {
	*notes
	batches [][]note
}

func (p *preparingNotes) Prepare(_ context.Context, _ store.Tx, batch []note) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches = append(p.batches, slices.Clone(batch))
	return nil
}

func (p *preparingNotes) prepared() [][]note {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.batches)
}

// wrapper is a processor wrapping another, as the service's tracing does.
type wrapper struct{ inbox.Processor }

func (w wrapper) Unwrap() any { return w.Processor }

// TestTypedAdaptsDecodeAndProcess: the adapter hands Decode's identity,
// kind and value to the engine and the value back to Process as its own
// type; a decode error passes through with its class, and a value of another
// type never reaches the typed processor.
func TestTypedAdaptsDecodeAndProcess(t *testing.T) {
	p := &notes{}
	a := inbox.Typed(p)
	d, err := a.Decode([]byte("n1;K"))
	if err != nil || d.Identity != "n1" || d.Kind != "K" || d.Value != (note{"n1", "K"}) {
		t.Fatalf("Decode: %+v, %v", d, err)
	}
	if d, err := a.Decode([]byte("garbage")); inbox.ClassOf(err) != inbox.Malformed || d != (inbox.Decoded{}) {
		t.Fatalf("Decode of garbage: %+v, %v; want a MALFORMED error", d, err)
	}
	out, err := a.Process(context.Background(), nil, &inbox.Message{ID: 1, Identity: d.Identity, Decoded: d.Value})
	if err != nil || out != inbox.Done() || !slices.Equal(p.seen(), []note{{"n1", "K"}}) {
		t.Fatalf("Process: %+v, %v; processed %v", out, err, p.seen())
	}
	_, err = a.Process(context.Background(), nil, &inbox.Message{ID: 2, Decoded: "n2;K"})
	if inbox.ClassOf(err) != inbox.Infra || !strings.Contains(err.Error(), "decoded value is string, not inbox_test.note") {
		t.Fatalf("Process of a string: %v; want an INFRA failure naming both types", err)
	}
	if len(p.seen()) != 1 {
		t.Fatalf("the typed processor was called with a value of another type: %v", p.seen())
	}
	if _, ok := a.(inbox.Preparer); ok {
		t.Fatal("the adapter of a processor without a read-ahead is a Preparer: the engine would call it")
	}
}

// TestTypedForwardsPrepare: the adapter of a TypedPreparer is a Preparer
// and hands it the batch as its own type.
func TestTypedForwardsPrepare(t *testing.T) {
	p := &preparingNotes{notes: &notes{}}
	pr, ok := inbox.Typed(p).(inbox.Preparer)
	if !ok {
		t.Fatal("the adapter of a TypedPreparer is no Preparer")
	}
	if err := pr.Prepare(context.Background(), nil, []any{note{"a", "K"}, note{"b", "K"}}); err != nil {
		t.Fatal(err)
	}
	if got := p.prepared(); len(got) != 1 || !slices.Equal(got[0], []note{{"a", "K"}, {"b", "K"}}) {
		t.Fatalf("Prepare got %v", got)
	}
	if err := pr.Prepare(context.Background(), nil, []any{note{"c", "K"}, 42}); err == nil {
		t.Fatal("a batch with a value of another type was prepared")
	}
	if len(p.prepared()) != 1 {
		t.Fatalf("the typed Prepare ran on a batch with a value of another type: %v", p.prepared())
	}
}

// TestAsFindsWhatTheProcessorWraps: an optional interface of a typed
// processor is found through its adapter and through a wrapper around that;
// one it lacks is not.
func TestAsFindsWhatTheProcessorWraps(t *testing.T) {
	p := &preparingNotes{notes: &notes{}}
	for name, proc := range map[string]inbox.Processor{"typed": inbox.Typed(p), "wrapped": wrapper{inbox.Typed(p)}} {
		tw, ok := inbox.As[targetWriter](proc)
		if !ok || !slices.Equal(tw.OutboxTargets(), []string{"kafka:notes"}) {
			t.Errorf("%s: As found no TargetWriter", name)
		}
		if got, ok := inbox.As[*preparingNotes](proc); !ok || got != p {
			t.Errorf("%s: As did not find the typed processor", name)
		}
		if _, ok := inbox.As[interface{ Ping(context.Context) error }](proc); ok {
			t.Errorf("%s: As found an interface nothing implements", name)
		}
	}
	if _, ok := inbox.As[targetWriter](newProc()); ok {
		t.Error("As found a TargetWriter on a processor without one")
	}
}

// TestTypedProcessorInTheEngine: a typed processor with a read-ahead runs
// in the engine as an untyped one does: Prepare gets the decoded values of
// each batch, Process each message's, and the outcomes are recorded.
func TestTypedProcessorInTheEngine(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		p := &preparingNotes{notes: &notes{}}
		eng := f.engine(f.stream, inbox.Typed(p), inbox.WithGroupSize(10))
		f.lead(eng)
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "garbage", 3: "c;skip"})
		f.drain(eng)
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Dead, 3: inbox.Skipped})
		if got := p.seen(); !slices.Equal(got, []note{{"a", "K"}, {"c", "skip"}}) {
			t.Fatalf("processed %v", got)
		}
		// The first batch ends at the undecodable message, the next starts
		// after it.
		if got := p.prepared(); len(got) != 2 || !slices.Equal(got[0], []note{{"a", "K"}, {"c", "skip"}}) || !slices.Equal(got[1], []note{{"c", "skip"}}) {
			t.Fatalf("prepared %v", got)
		}
	})
}

// benchNote is the value the processors of BenchmarkTypedAdapter decode
// every payload into: a pointer, as the SIS processor's *sisxml.Message, so
// that what is measured is the calls and not the decoding.
var benchNote = &note{"n1", "K"}

// untypedNotes decodes under the untyped contract and asserts the type
// itself: the baseline of BenchmarkTypedAdapter.
type untypedNotes struct{}

func (untypedNotes) Decode([]byte) (inbox.Decoded, error) {
	return inbox.Decoded{Identity: benchNote.Identity, Kind: benchNote.Kind, Value: benchNote}, nil
}

func (untypedNotes) Process(_ context.Context, _ store.Tx, msg *inbox.Message) (inbox.Outcome, error) {
	if _, ok := msg.Decoded.(*note); !ok {
		return inbox.Outcome{}, inbox.Failf(inbox.Infra, "decoded value is %T", msg.Decoded)
	}
	return inbox.Done(), nil
}

// typedNotes is the same processor under the typed contract.
type typedNotes struct{}

func (typedNotes) Decode([]byte) (inbox.DecodedOf[*note], error) {
	return inbox.DecodedOf[*note]{Identity: benchNote.Identity, Kind: benchNote.Kind, Value: benchNote}, nil
}

func (typedNotes) Process(context.Context, store.Tx, *inbox.Message, *note) (inbox.Outcome, error) {
	return inbox.Done(), nil
}

// BenchmarkTypedAdapter is the engine's calls for one message, Decode then
// Process, on a typed processor through its adapter and on the same
// processor written to the untyped contract: the difference is what the
// adapter costs per message.
func BenchmarkTypedAdapter(b *testing.B) {
	payload := []byte("n1;K")
	for _, c := range []struct {
		name string
		proc inbox.Processor
	}{{"typed", inbox.Typed(typedNotes{})}, {"untyped", untypedNotes{}}} {
		proc := c.proc
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d, err := proc.Decode(payload)
				if err != nil {
					b.Fatal(err)
				}
				msg := inbox.Message{ID: 1, Identity: d.Identity, Kind: d.Kind, Decoded: d.Value}
				if _, err := proc.Process(ctx, nil, &msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
