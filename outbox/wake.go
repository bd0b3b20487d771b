package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/msgx/msgx/store"
)

// Wake-ups. An idle lane polls, and is woken at once when events commit:
//
//   - in the process that committed them, directly: Enqueue registers a
//     commit hook (store.OnCommit) that rings the bell of the DB handle, and
//     the relays over that handle listen to it;
//   - in other processes, on PostgreSQL, by a notification: the bell also
//     sends NOTIFY msgx_outbox, from its own goroutine and after the commit,
//     coalescing the commits that happen while one is on its way, and every
//     relay LISTENs on a connection of its own.
//
// The notification is not sent inside the business transaction: a
// transaction that notifies takes a database-wide lock from its commit until
// the end of the commit, so every notifying commit waits for the previous
// one's WAL flush (measured: a quarter of the transactions per second with
// eight clients). The poll stays as the fallback, for events written without
// Enqueue and for lost notifications.

// notifyChannel is the PostgreSQL notification channel of the outbox.
const notifyChannel = "msgx_outbox"

type bellKey struct{}

// bell rings when events commit on a DB handle.
type bell struct {
	db   *store.DB
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	// notify carries rings to the goroutine that sends NOTIFY (PostgreSQL);
	// its one slot coalesces them.
	notify chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func bellOf(db *store.DB) *bell {
	return db.Shared(bellKey{}, func() any {
		b := &bell{db: db, subs: map[chan struct{}]struct{}{}}
		if db.Dialect() == store.Postgres {
			b.notify, b.stop, b.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
			go b.notifier()
		}
		return b
	}).(*bell)
}

// ring wakes the listeners in this process and, on PostgreSQL, has a
// notification sent for the others.
func (b *bell) ring() {
	b.mu.Lock()
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	if b.notify != nil {
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}

// subscribe returns a channel that receives (coalesced) rings, and the
// function that ends the subscription.
func (b *bell) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

// notifyTimeout bounds one NOTIFY statement.
const notifyTimeout = 5 * time.Second

func (b *bell) notifier() {
	defer close(b.done)
	for {
		select {
		case <-b.stop:
			return
		case <-b.notify:
		}
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		// A lost notification only leaves the wake-up to the poll.
		_, _ = b.db.Exec(ctx, "SELECT pg_notify($1, '')", notifyChannel)
		cancel()
	}
}

// Close stops the notifier (store.DB.Close calls it).
func (b *bell) Close() error {
	if b.stop != nil {
		b.once.Do(func() {
			close(b.stop)
			<-b.done
		})
	}
	return nil
}

// notify makes tx wake the relays when it commits (Enqueue, the WAL relay's
// hand-overs); without it the events wait for the relays' next poll.
func notify(tx store.Tx) {
	store.OnCommit(tx, bellKey{}, func(db *store.DB) { bellOf(db).ring() })
}

// listen wakes the lanes on rings of the relay's DB handle and, on
// PostgreSQL, on notifications from other processes, until ctx ends.
func (r *Relay) listen(ctx context.Context) {
	rings, unsubscribe := bellOf(r.db).subscribe()
	defer unsubscribe()
	if r.pg != nil {
		go r.listenPostgres(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-rings:
			r.wakeLanes()
		}
	}
}

func (r *Relay) wakeLanes() {
	for _, l := range r.lanes {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// listenPostgres holds a LISTEN connection of the relay's pool and wakes the
// lanes on each notification; a broken connection is replaced after a pause.
func (r *Relay) listenPostgres(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		failures++
		pause := r.errorPause(failures)
		r.cfg.logger.Warn("outbox: listening for notifications failed; the relay polls meanwhile",
			"err", err, "retry_in", pause)
		r.sleep(ctx, pause)
	}
}

func (r *Relay) listenOnce(ctx context.Context) error {
	acq, cancel := context.WithTimeout(ctx, r.cfg.dbTimeout)
	conn, err := r.pg.pool.Acquire(acq)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Release()
	lctx, cancel := context.WithTimeout(ctx, r.cfg.dbTimeout)
	_, err = conn.Exec(lctx, "LISTEN "+notifyChannel)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		// The connection goes back to the pool: stop listening on it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.dbTimeout)
		if _, err := conn.Exec(uctx, "UNLISTEN *"); err != nil {
			conn.Conn().Close(uctx) //nolint:errcheck // the pool drops a closed connection
		}
		cancel()
	}()
	r.wakeLanes() // events may have committed before LISTEN
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return err
		}
		r.wakeLanes()
	}
}
