package sis

import (
	"context"

	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// maxPrefetch bounds the FLIDs a batch's read-ahead reads.
const maxPrefetch = 4096

// txCache holds the flights read or written in the current transaction, so
// that a batch of messages (the inbox engine processes several in one
// transaction, each in its own savepoint) reads its flights in one query
// instead of one per message.
//
// The engine hands the decoded batch to Prepare before processing it, which
// reads the flights the batch names (prefetch). What the cache holds is
// exactly what the transaction holds: a flight enters it when read (locked)
// or written in that transaction; a message that fails drops the flights it
// touched, since its savepoint is rolled back; another transaction starts
// afresh. It is only a way to save round trips: a flight not in it is read
// from the database when asked for.
type txCache struct {
	tx      store.Tx
	flights map[string]*Flight // a nil value: known not to be stored
}

// appendFLIDs appends the FLIDs m names to ids while it has fewer than max.
func appendFLIDs(ids []string, m *sisxml.Message, max int) []string {
	for _, b := range m.Body {
		switch b.Name {
		case "FLOP", "FDEL":
			if id := b.ChildText("FLID"); id != "" && len(ids) < max {
				ids = append(ids, id)
			}
		case "SCHD":
			for _, r := range b.All("FLTR") {
				if id := r.ChildText("FLID"); id != "" && len(ids) < max {
					ids = append(ids, id)
				}
			}
		}
	}
	return ids
}

// read reads and locks, in one query, the flights of flids that tx has not
// read yet, and keeps those it finds. With recordAbsent it also keeps the
// others as not stored.
func (c *txCache) read(ctx context.Context, tx store.Tx, flids []string, recordAbsent bool) error {
	if c.tx != tx {
		c.tx, c.flights = tx, map[string]*Flight{}
	}
	var missing []string
	for _, id := range sortedUnique(flids) {
		if _, ok := c.flights[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fs, err := newFlightStore(tx.Dialect())
	if err != nil {
		return err
	}
	got, err := fs.load(ctx, tx, missing)
	if err != nil {
		return err
	}
	for _, id := range missing {
		if f := got[id]; f != nil || recordAbsent {
			c.flights[id] = f
		}
	}
	return nil
}

// prefetch reads the flights of flids into the cache for tx, keeping only
// those it finds: it may run before the transaction that creates one has
// committed (the engine's read-ahead), so an absence is read again when
// asked for.
func (c *txCache) prefetch(ctx context.Context, tx store.Tx, flids []string) error {
	return c.read(ctx, tx, flids, false)
}

// get returns the flights of flids as stored in tx (absent ones missing).
func (c *txCache) get(ctx context.Context, tx store.Tx, flids []string) (map[string]*Flight, error) {
	if err := c.read(ctx, tx, flids, true); err != nil {
		return nil, err
	}
	out := make(map[string]*Flight, len(flids))
	for _, id := range flids {
		if f := c.flights[id]; f != nil {
			out[id] = f
		}
	}
	return out, nil
}

// put records a flight written in tx.
func (c *txCache) put(tx store.Tx, f *Flight) {
	if c.tx == tx {
		c.flights[f.FLID] = f
	}
}

// reset forgets everything read or written: a message failed and its
// savepoint was rolled back.
func (c *txCache) reset() { c.tx, c.flights = nil, nil }
