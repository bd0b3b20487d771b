package inbox

import (
	"context"
	"fmt"
	"reflect"

	"github.com/msgx/msgx/store"
)

// TypedProcessor is a processor whose messages decode into values of type T:
// Process gets the decoded value as a T, so the processor asserts nothing.
// Typed adapts it to the engine's Processor; the contract is Processor's.
type TypedProcessor[T any] interface {
	// Decode parses a payload, as Processor.Decode does.
	Decode(payload []byte) (DecodedOf[T], error)
	// Process performs the business writes of msg in tx, as
	// Processor.Process does; v is the value Decode returned for it.
	Process(ctx context.Context, tx store.Tx, msg *Message, v T) (Outcome, error)
}

// TypedPreparer is a TypedProcessor that reads ahead what a batch needs, as
// a Preparer does, from the batch's decoded values.
type TypedPreparer[T any] interface {
	Prepare(ctx context.Context, tx store.Tx, batch []T) error
}

// Typed adapts p to the engine's Processor: inbox.New(db, stream,
// inbox.Typed(p)). The result is a Preparer exactly when p is a
// TypedPreparer, and it unwraps to p (see As), so the optional interfaces
// its users look for on a processor are found on p.
func Typed[T any](p TypedProcessor[T]) Processor {
	a := &typed[T]{p: p}
	if pp, ok := p.(TypedPreparer[T]); ok {
		return &typedPreparer[T]{typed: a, pp: pp}
	}
	return a
}

// typed is the adapter of a TypedProcessor without a read-ahead: the engine
// looks for Preparer on the processor it is given, so the adapter has
// Prepare only when the typed processor has it (typedPreparer).
type typed[T any] struct {
	p TypedProcessor[T]
}

func (a *typed[T]) Decode(payload []byte) (Decoded, error) {
	d, err := a.p.Decode(payload)
	if err != nil {
		return Decoded{}, err
	}
	return Decoded{Identity: d.Identity, Kind: d.Kind, Value: d.Value}, nil
}

func (a *typed[T]) Process(ctx context.Context, tx store.Tx, msg *Message) (Outcome, error) {
	v, err := valueOf[T](msg.Decoded)
	if err != nil {
		return Outcome{}, Fail(Infra, err)
	}
	return a.p.Process(ctx, tx, msg, v)
}

// Unwrap returns the typed processor.
func (a *typed[T]) Unwrap() any { return a.p }

type typedPreparer[T any] struct {
	*typed[T]
	pp TypedPreparer[T]
}

func (a *typedPreparer[T]) Prepare(ctx context.Context, tx store.Tx, batch []any) error {
	vals := make([]T, len(batch))
	for i, d := range batch {
		v, err := valueOf[T](d)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	return a.pp.Prepare(ctx, tx, vals)
}

// valueOf is the decoded value d as a T. The engine hands the adapter only
// what its Decode returned, so a mismatch is a bug of whoever built the
// message. A nil d is T's zero value (a nil interface value decoded).
func valueOf[T any](d any) (T, error) {
	v, ok := d.(T)
	if !ok && d != nil {
		return v, fmt.Errorf("inbox: decoded value is %T, not %v", d, reflect.TypeFor[T]())
	}
	return v, nil
}

// As finds an optional interface I on processor p: p itself, or what p
// adapts or wraps, found by following Unwrap() any methods (Typed's adapter
// and the service's tracing wrapper have one), as errors.As follows the
// wrapping of errors.
func As[I any](p Processor) (I, bool) {
	var v any = p
	for v != nil {
		if i, ok := v.(I); ok {
			return i, true
		}
		u, ok := v.(interface{ Unwrap() any })
		if !ok {
			break
		}
		v = u.Unwrap()
	}
	var zero I
	return zero, false
}
