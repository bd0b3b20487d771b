package broker

import (
	"context"
	"log/slog"
	"time"
)

type deliveryKey struct{}

// deliveryCtx is the context a handler runs with: the listener's handler
// context plus the delivery, for Logger. It is the Delivery itself under
// another type, so handing it over allocates nothing and the Delivery's own
// method set stays as it is.
type deliveryCtx Delivery

func (c *deliveryCtx) parent() context.Context { return c.l.handlerCtx }

func (c *deliveryCtx) Deadline() (time.Time, bool) { return c.parent().Deadline() }
func (c *deliveryCtx) Done() <-chan struct{}       { return c.parent().Done() }
func (c *deliveryCtx) Err() error                  { return c.parent().Err() }

func (c *deliveryCtx) Value(key any) any {
	if _, ok := key.(deliveryKey); ok {
		return (*Delivery)(c)
	}
	return c.parent().Value(key)
}

// Logger returns a logger carrying the request id, correlation id, event id,
// topic and redelivery count of the delivery being handled in ctx, or base when
// ctx carries none. The attributes are built only when asked for.
func Logger(ctx context.Context, base *slog.Logger) *slog.Logger {
	if base == nil {
		base = slog.Default()
	}
	d, _ := ctx.Value(deliveryKey{}).(*Delivery)
	if d == nil {
		return base
	}
	return deliveryLogger(base, d)
}

func (l *Listener) logFor(d *Delivery) *slog.Logger { return deliveryLogger(l.b.opts.logger, d) }

func deliveryLogger(base *slog.Logger, d *Delivery) *slog.Logger {
	attrs := []any{"topic", d.Topic, "group", d.Group, "redelivery_count", d.RedeliveryCount}
	for _, h := range [...]struct{ header, attr string }{
		{HeaderRequestID, "request_id"}, {HeaderCorrelationID, "correlation_id"},
		{HeaderEventID, "event_id"}, {HeaderTenantID, "tenant_id"}, {HeaderType, "type"},
	} {
		if v := d.Header(h.header); v != "" {
			attrs = append(attrs, h.attr, v)
		}
	}
	return base.With(attrs...)
}
