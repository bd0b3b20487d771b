package routepassport

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/msgx/msgx/broker"
)

// Headers of a dead-lettered record, besides the port's msgx-dead-* ones.
const (
	HeaderErrorClass   = "msgx-error-class"   // size | json | schema | geometry | internal
	HeaderErrorPath    = "msgx-error-path"    // the field path, "" for the record as a whole
	HeaderErrorMessage = "msgx-error-message" // the reason
	HeaderSourceTopic  = "msgx-source-topic"
	HeaderSourcePart   = "msgx-source-partition"
	HeaderSourceOffset = "msgx-source-offset"
)

// deadLetter sends refused records to the dead-letter topic, confirmed, with
// the error in headers. Contract errors are deterministic, so they are not
// retried; a failing send is (transient), and the records stay unsettled
// until it is confirmed. A copy larger than the broker takes goes by
// reference (broker.SendDeadLetter), so every refused record reaches the
// topic and its offset is committed, whatever its size.
//
// The pipeline sends them itself rather than returning broker.Poison,
// because the port's dead letter carries one reason text and the contract
// asks for class, field path and message as separate headers; the
// subscription's DeadLetterTopic is the same topic, for anything the port
// dead-letters on its own.
func (p *Pipeline) deadLetter(ctx context.Context, bad []*item) error {
	msgs := make([]*broker.Message, len(bad))
	now := p.cfg.clock.Now().UTC().Format(time.RFC3339Nano)
	for i, it := range bad {
		var ce *ContractError
		if !errors.As(it.err, &ce) {
			ce = &ContractError{Class: "internal", Message: it.err.Error()}
		}
		h := make(map[string]string, len(it.d.Headers)+12)
		for k, v := range it.d.Headers {
			h[k] = v
		}
		h[HeaderErrorClass] = ce.Class
		h[HeaderErrorPath] = ce.Path
		h[HeaderErrorMessage] = truncate(ce.Message, 1024)
		h[HeaderSourceTopic] = it.d.Topic
		if it.partition != nil {
			h[HeaderSourcePart] = strconv.FormatInt(int64(*it.partition), 10)
			h[HeaderSourceOffset] = strconv.FormatInt(*it.offset, 10)
		}
		h[broker.HeaderDeadClass] = "poison"
		h[broker.HeaderDeadReason] = truncate(ce.Error(), 1024)
		h[broker.HeaderDeadTopic] = it.d.Topic
		if it.partition != nil {
			h[broker.HeaderDeadPartition] = h[HeaderSourcePart]
			h[broker.HeaderDeadOffset] = h[HeaderSourceOffset]
		}
		h[broker.HeaderDeadGroup] = it.d.Group
		h[broker.HeaderDeadAttempts] = strconv.Itoa(it.d.RedeliveryCount + 1)
		h[broker.HeaderDeadTimestamp] = now
		delete(h, broker.HeaderNotBefore)
		delete(h, broker.HeaderForGroup)
		msgs[i] = &broker.Message{Key: it.d.Key, Payload: it.d.Payload, Headers: h}
	}
	// The port sends a copy that does not fit by reference (without its
	// payload; its size, SHA-256 and the source position in headers), so a
	// refusal is never retried for its size; only failures to send at all
	// are (an unavailable broker: wait for it).
	err := p.retry(ctx, "dead-letter", len(bad), func(ctx context.Context) error {
		_, err := p.b.SendDeadLetter(ctx, p.cfg.dlqTopic, msgs...)
		return err
	})
	if err != nil {
		return err
	}
	for i, it := range bad {
		h := msgs[i].Headers
		p.met.failure.WithLabelValues(h[HeaderErrorClass]).Inc()
		p.log.Warn("record refused, sent to the dead-letter topic", append(p.sourceAttrs(it), "dlq_topic", p.cfg.dlqTopic,
			"exception_class", h[HeaderErrorClass], "error_path", h[HeaderErrorPath], "exception_message", h[HeaderErrorMessage])...)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
