package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/msgx/msgx/store"
)

// ErrLeaseLost is returned when the pump finds that another process owns the
// stream's lease: it stops working on the stream at once.
var ErrLeaseLost = errors.New("inbox: stream lease lost")

// ErrSuperseded is returned (wrapped, with who) when a later process of this
// process's instance id took the stream's lease over: two live processes
// share one instance id. The superseded engine stops pumping the stream for
// good and stays so until it is restarted (see Engine.Superseded).
var ErrSuperseded = errors.New("inbox: stream lease taken over by another process with this instance id")

// OwnerFor is the lease owner a service process of the given instance id
// takes its leases as: the instance id, "/", and a random token of this run
// (its incarnation). A process takes a lease held by another incarnation of
// its own instance id at once, without waiting for it to expire: that is its
// own run before a restart, whose lease would otherwise hold the stream for
// its whole time to live. Should that earlier incarnation still be alive
// (two processes given one id by mistake), its next renewal or pump
// transaction finds the token replaced and the epoch moved on: it stops
// pumping and reports the twin (ErrSuperseded).
func OwnerFor(instance string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return instance + "/" + hex.EncodeToString(b[:])
}

// LeaseHolder is who holds a stream's lease.
type LeaseHolder struct {
	// Owner is the owner as recorded: OwnerFor's "<instance-id>/<token>"
	// for a service instance.
	Owner string
	// Instance is the instance id part of Owner (all of it for an owner
	// not made by OwnerFor).
	Instance string
	// Expires is when the lease runs out unless renewed; a holder whose
	// lease has expired no longer pumps.
	Expires time.Time
}

// HolderOf reads who holds the lease of stream; ok is false when nobody
// does (never taken, or released at a stop).
func HolderOf(ctx context.Context, q store.Querier, stream string) (h LeaseHolder, ok bool, err error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return h, false, err
	}
	err = q.QueryRow(ctx, qs.Get("LeaseHolder"), leaseName(stream)).Scan(&h.Owner, &h.Expires)
	if errors.Is(err, store.ErrNoRows) {
		return h, false, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("inbox: lease holder of %s: %w", stream, err)
	}
	h.Instance, _, _ = strings.Cut(h.Owner, "/")
	return h, true, nil
}

// instanceOf is the instance id part of an owner made by OwnerFor, and
// whether it is one: other owners (tests, the engine's default) are never
// taken over before their lease expires.
func instanceOf(owner string) (string, bool) {
	inst, _, ok := strings.Cut(owner, "/")
	return inst, ok && inst != ""
}

func leaseName(stream string) string { return "inbox:" + stream }

// lease is one process's claim on a named job in msgx_lease.
type lease struct {
	db    *store.DB
	q     store.Queries
	name  string
	owner string
	ttl   time.Duration
	// epoch is the fencing epoch of our tenure (set by acquire; pump
	// goroutine reads it only while leading).
	epoch int64
	// timeouts are PostgreSQL's statement_timeout and lock_timeout for the
	// pump's transactions, in milliseconds.
	stmtTimeout, lockTimeout string
	// hostTime: compare expiry with the engine clock instead of the
	// database's (SQLite, one host; tests on a fake clock).
	hostTime bool
}

// now is the time argument of the lease statements: nil makes PostgreSQL use
// its own clock.
func (l *lease) now(now time.Time) any {
	if l.hostTime || l.db.Dialect() != store.Postgres {
		return now
	}
	return nil
}

// acquire takes the lease if it is free, expired, ours, or held by another
// incarnation of our instance id (OwnerFor); it reports whether this process
// now holds it. On PostgreSQL expiry is the database's time, not now (which
// only SQLite and tests use).
func (l *lease) acquire(ctx context.Context, now time.Time) (bool, error) {
	var (
		owner string
		epoch int64
	)
	var instance any // NULL: no takeover by instance id
	if inst, ok := instanceOf(l.owner); ok {
		instance = inst
	}
	err := l.db.QueryRow(ctx, l.q.Get("LeaseAcquire"), l.name, l.owner, l.ttl.Microseconds(), l.now(now), instance).Scan(&owner, &epoch)
	if errors.Is(err, store.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inbox: acquire lease %s: %w", l.name, err)
	}
	if owner != l.owner {
		return false, nil
	}
	l.epoch = epoch
	return true, nil
}

// renew extends a held lease; ErrLeaseLost when it is no longer ours.
func (l *lease) renew(ctx context.Context, now time.Time) error {
	n, err := l.db.Exec(ctx, l.q.Get("LeaseRenew"), l.name, l.owner, l.ttl.Microseconds(), l.now(now))
	if err != nil {
		return fmt.Errorf("inbox: renew lease %s: %w", l.name, err)
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// release gives the lease up so a standby takes over without waiting for expiry.
func (l *lease) release(ctx context.Context) error {
	if _, err := l.db.Exec(ctx, l.q.Get("LeaseRelease"), l.name, l.owner); err != nil {
		return fmt.Errorf("inbox: release lease %s: %w", l.name, err)
	}
	return nil
}

// fence checks, inside a pump transaction, that the lease is still ours, of
// our epoch and unexpired. On PostgreSQL the row stays key-share-locked until
// the transaction ends, so a takeover cannot interleave with a batch while
// the renewal never waits for it; the statement also sets the transaction's
// statement and lock timeouts.
func (l *lease) fence(ctx context.Context, tx store.Tx, now time.Time) error {
	args := []any{l.name, l.owner, l.epoch}
	if tx.Dialect() == store.Postgres {
		args = append(args, l.stmtTimeout, l.lockTimeout)
	}
	args = append(args, l.now(now))
	var live bool
	err := tx.QueryRow(ctx, l.q.Get("LeaseFence"), args...).Scan(&live)
	if errors.Is(err, store.ErrNoRows) {
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("inbox: check lease %s: %w", l.name, err)
	}
	if !live {
		return ErrLeaseLost
	}
	return nil
}
