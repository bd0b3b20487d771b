// Package inbox is the processing state of received messages (PROC_STATE)
// and the strict-FIFO pump that drives them through a Processor.
//
// Each message of a stream is one row keyed by its transport id (for the
// mailbox source, the mailbox id). The pump always works on the head — the
// smallest unfinished (PENDING or FAILED) message — so a failing head blocks
// the stream until it succeeds or goes DEAD; terminal messages (SUCCEEDED,
// SKIPPED, DEAD) never block. The engine owns statuses, business-identity
// binding, retries with backoff, dead-lettering, the backfill intent and
// replay in one place; a Processor only decodes a payload and performs the
// business writes of one message in the transaction it is given. A
// processor decodes into one type of its own (TypedProcessor, plugged in
// with Typed) or into values of any type (Processor).
//
// Consecutive ready messages are processed in one transaction (group commit),
// each inside its own savepoint: a failing message rolls back alone, is
// recorded, and ends the batch at itself. One process pumps a stream at a
// time, under a lease that a hot standby takes over when it expires.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/msgx/msgx/store"
)

// Status is the processing status of a message.
type Status string

// Statuses. SUCCEEDED, SKIPPED and DEAD are terminal and never block the
// stream; PENDING and FAILED are unfinished and hold the head.
const (
	Pending   Status = "PENDING"
	Failed    Status = "FAILED"
	Succeeded Status = "SUCCEEDED"
	Skipped   Status = "SKIPPED"
	Dead      Status = "DEAD"
)

// Terminal reports whether s is a final status.
func (s Status) Terminal() bool { return s == Succeeded || s == Skipped || s == Dead }

// Class classifies a processing failure.
type Class string

// Failure classes. MALFORMED, PROTOCOL and UNSUPPORTED go DEAD at once; the
// others are retried with backoff until the attempts or the head deadline run
// out, which makes the message DEAD with class EXHAUSTED.
const (
	// Malformed: the payload is not a message at all (not parsable, missing).
	Malformed Class = "MALFORMED"
	// Protocol: a well-formed message the protocol rejects as a whole.
	Protocol Class = "PROTOCOL"
	// CodecError: the decoder cannot handle it yet; a codec fix makes it replayable.
	CodecError Class = "CODEC_ERROR"
	// Unsupported: no processor (or capability) for it yet. That is a
	// property of the build, which no retry changes: the message goes DEAD at
	// once instead of holding the head through every attempt, and stays
	// replayable for when a build that supports it runs.
	Unsupported Class = "UNSUPPORTED"
	// Infra: infrastructure or execution failure (the default for unclassified errors).
	Infra Class = "INFRA"
	// Exhausted: retried too often or held the head too long.
	Exhausted Class = "EXHAUSTED"
	// Late: a row of a permanent gap that showed up after the ids above it
	// were taken in; it is recorded DEAD and not processed, since applying it
	// would put an older change over newer ones. An operator may replay it.
	Late Class = "LATE"
)

// Retryable reports whether a failure of class c is retried with backoff.
func (c Class) Retryable() bool {
	return c == CodecError || c == Infra
}

// Replayable reports whether messages that failed with class c may be replayed.
func (c Class) Replayable() bool {
	return c.Retryable() || c == Unsupported || c == Exhausted || c == Late
}

// Failure is a classified processing error. Processors return one with Fail;
// any other error is INFRA.
type Failure struct {
	Class Class
	Err   error
}

// Error is the class and the cause, with the class said once: a cause that
// already starts with it (the SIS codec's errors do) is not prefixed again.
func (f *Failure) Error() string {
	msg := f.Err.Error()
	if strings.HasPrefix(msg, string(f.Class)+": ") {
		return msg
	}
	return string(f.Class) + ": " + msg
}

func (f *Failure) Unwrap() error { return f.Err }

// Fail classifies err. A nil err gets a generic text.
func Fail(class Class, err error) error {
	if err == nil {
		err = errors.New(string(class))
	}
	return &Failure{Class: class, Err: err}
}

// Failf is Fail with a formatted error.
func Failf(class Class, format string, args ...any) error {
	return &Failure{Class: class, Err: fmt.Errorf(format, args...)}
}

// ClassOf returns the class of err: the class of a wrapped Failure, or INFRA.
func ClassOf(err error) Class {
	var f *Failure
	if errors.As(err, &f) && f.Class != "" {
		return f.Class
	}
	return Infra
}

// DecodedOf is what a processor extracts from a payload before processing,
// its value of type T (see TypedProcessor).
type DecodedOf[T any] struct {
	// Identity is the business identity (e.g. SNDR|TYPE|STYP|SEQN). The first
	// message that decodes an identity owns it; a later one is SKIPPED as
	// duplicate-of:<owner>. Empty means the message has no business identity.
	Identity string
	// Kind is the dispatch key, recorded on the row.
	Kind string
	// Value is the decoded message, handed to Process.
	Value T
}

// Decoded is what a Processor's Decode returns: its value of any type.
type Decoded = DecodedOf[any]

// Message is the message being processed.
type Message struct {
	Stream  string
	ID      int64
	Payload []byte
	// Attempt counts processing attempts, this one included (1 = first).
	Attempt int
	// Identity is the bound business identity (kept across retries).
	Identity string
	Kind     string
	// Decoded is the value Decode returned (Decoded.Value); a typed
	// processor gets it as its own type instead (TypedProcessor).
	Decoded any
	// Now is the engine clock's time for this batch.
	Now time.Time
	// TraceParent and TraceState are the W3C trace context the message
	// arrived with ("" when its source had none): processing continues it.
	TraceParent, TraceState string
}

// Outcome is a successful end of processing: SUCCEEDED, or SKIPPED with a
// reason (ignored, no-match, ...).
type Outcome struct {
	Status Status
	Reason string
}

// Done is the outcome of a message that was processed.
func Done() Outcome { return Outcome{Status: Succeeded} }

// Skip is the outcome of a message deliberately not processed.
func Skip(reason string) Outcome { return Outcome{Status: Skipped, Reason: reason} }

// Processor decodes and processes the messages of a stream. It is the
// engine's contract, whose decoded values are of any type; a processor
// written for one type of value implements TypedProcessor instead and is
// handed to New as Typed(p).
type Processor interface {
	// Decode parses a payload. It must not touch the database. Return a
	// Failure of class MALFORMED (DEAD at once) or CODEC_ERROR (retried);
	// any other error is CODEC_ERROR.
	Decode(payload []byte) (Decoded, error)
	// Process performs the business writes of msg in tx — state changes and
	// outbox events (outbox.Enqueue) — and nothing outside it. The engine
	// commits them together with the message's status and backfill intent.
	// Errors are classified with Fail; a panic is an INFRA failure of msg.
	Process(ctx context.Context, tx store.Tx, msg *Message) (Outcome, error)
}

// Preparer is a Processor that reads ahead what a batch needs (the state
// its messages change, say, in one query rather than one per message).
// Prepare runs in the batch's transaction after its messages were decoded
// and before any is processed, with the decoded values of those that
// decoded. On PostgreSQL it may run while the batch before is still being
// written and committed (the pump's read-ahead): a row read then must be
// locked (SELECT ... FOR UPDATE), which waits for that commit and returns
// the row as it left it, and a row not found may yet be created by it, so
// its absence must be read again when processing. Prepare runs inside a
// savepoint; its error is logged and the batch is processed without it.
type Preparer interface {
	Prepare(ctx context.Context, tx store.Tx, batch []any) error
}

// Incoming is a message handed to Enqueue by a source.
type Incoming struct {
	ID      int64
	Payload []byte
	// Original, when set, is the message as received in Charset, before it
	// was transcoded to the UTF-8 Payload; it is kept byte-exact beside the
	// inbox (see Original).
	Original []byte
	Charset  string
	// TraceParent and TraceState are the W3C trace context of the ingest
	// (empty: none); they are kept with the message for its processing.
	TraceParent, TraceState string
}

// Enqueue stores messages as PENDING in the caller's transaction. A message
// whose id is already known — in the inbox or in its archive — is left alone
// (no double enqueue), except that a PENDING one without a trace context
// takes the one given now (the mailbox poller may take in a message before
// the HTTP ingress that stored it enqueues it). It returns how many rows were
// written: the new ones and those given a trace context.
func Enqueue(ctx context.Context, tx store.Tx, stream string, now time.Time, msgs ...Incoming) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	q, err := queriesFor(tx.Dialect())
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if m.Original == nil {
			continue
		}
		if _, err := tx.Exec(ctx, q.Get("KeepOriginal"), stream, m.ID, m.Charset, m.Original, now); err != nil {
			return 0, fmt.Errorf("inbox: keep the original of %d: %w", m.ID, err)
		}
	}
	if tx.Dialect() == store.Postgres {
		ids := make([]int64, len(msgs))
		payloads := make([][]byte, len(msgs))
		parents, states := make([]string, len(msgs)), make([]string, len(msgs))
		for i, m := range msgs {
			ids[i], payloads[i], parents[i], states[i] = m.ID, m.Payload, m.TraceParent, m.TraceState
		}
		n, err := tx.Exec(ctx, q.Get("Enqueue"), stream, ids, payloads, now, parents, states)
		if err != nil {
			return 0, fmt.Errorf("inbox: enqueue: %w", err)
		}
		return int(n), nil
	}
	total := 0
	for _, m := range msgs {
		n, err := tx.Exec(ctx, q.Get("Enqueue"), stream, m.ID, m.Payload, now, m.TraceParent, m.TraceState)
		if err != nil {
			return total, fmt.Errorf("inbox: enqueue %d: %w", m.ID, err)
		}
		total += int(n)
	}
	return total, nil
}

// NextID hands out the next transport id of stream in the caller's
// transaction, for a source whose messages have no id of their own (a broker
// listener on a stream without a mailbox). The first id is above every id the
// stream has had. On PostgreSQL the stream's counter stays locked until tx
// ends, so concurrent enqueuers commit their ids in increasing order and the
// pump, which works from the smallest unfinished id on, never finds a new
// message below one it has passed. Do not mix it with a mailbox on one
// stream: their ids would collide.
func NextID(ctx context.Context, tx store.Tx, stream string) (int64, error) {
	q, err := queriesFor(tx.Dialect())
	if err != nil {
		return 0, err
	}
	var id int64
	if err := tx.QueryRow(ctx, q.Get("NextID"), stream).Scan(&id); err != nil {
		return 0, fmt.Errorf("inbox: next id of %s: %w", stream, err)
	}
	return id, nil
}

// Original returns the bytes a message was received as and their charset,
// when it was transcoded on receipt; ErrNotFound otherwise.
func Original(ctx context.Context, q store.Querier, stream string, id int64) (charset string, body []byte, err error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return "", nil, err
	}
	err = q.QueryRow(ctx, qs.Get("Original"), stream, id).Scan(&charset, &body)
	if errors.Is(err, store.ErrNoRows) {
		return "", nil, ErrNotFound
	}
	if err != nil {
		return "", nil, fmt.Errorf("inbox: original of %d: %w", id, err)
	}
	return charset, body, nil
}
