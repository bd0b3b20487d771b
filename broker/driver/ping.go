package driver

import "context"

// Pinger is implemented by adapters whose client has a cheap round trip to
// the broker (a metadata request, a channel opened and closed, a PING): Ping
// returns nil when the broker answered, an error when it did not before ctx
// ended or the client is not connected. It must not block beyond ctx, must
// not change what the client does (no reconnect storm, no new topology), and
// may be called at any time after Start, concurrently with everything else.
type Pinger interface {
	Ping(ctx context.Context) error
}
