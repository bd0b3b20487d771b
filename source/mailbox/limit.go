package mailbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/msgx/msgx/store"
)

// ErrUnstorable: the message holds what the mailbox's text column cannot
// store (a NUL byte on PostgreSQL). It is the message's fault: inserting it
// again fails again.
var ErrUnstorable = errors.New("mailbox: the message cannot be stored in the mailbox's text column")

// ErrTooLarge: the message, as the UTF-8 text the mailbox stores, is larger
// than one mailbox row can hold. Inserting it again fails again.
var ErrTooLarge = errors.New("mailbox: the message is larger than the mailbox can store")

// rowOverhead is what the row's other columns and the insert statement take
// of a MySQL packet, with room to spare: the message gets the rest.
const rowOverhead = 4 << 10

// Limits of the store's text columns: PostgreSQL's text holds 1 GiB, SQLite
// a string of SQLITE_MAX_LENGTH (10^9 bytes by default).
const (
	postgresMaxText = 1<<30 - 1 - rowOverhead
	sqliteMaxText   = 1_000_000_000 - rowOverhead
)

// MaxMessage returns the largest message, in bytes of the UTF-8 text it is
// stored as, that one row of the mailbox holds. On MySQL/MariaDB it is read
// from the server once (the smaller of @@max_allowed_packet less the row's
// other columns and the message column's size) and kept; a failed read is
// tried again at the next call.
func (t *Table) MaxMessage(ctx context.Context) (int64, error) {
	t.limitMu.Lock()
	defer t.limitMu.Unlock()
	if t.limit > 0 {
		return t.limit, nil
	}
	switch {
	case t.sqldb != nil:
		schema, name := "", t.name
		if s, n, ok := strings.Cut(t.name, "."); ok {
			schema, name = s, n
		}
		var packet, column int64
		if err := t.sqldb.QueryRowContext(ctx, t.q.Get("MessageLimit"), schema, name).Scan(&packet, &column); err != nil {
			return 0, fmt.Errorf("mailbox: read the message size limit of %s: %w", t.name, err)
		}
		t.limit = packet - rowOverhead
		if column > 0 && column < t.limit {
			t.limit = column
		}
	case t.dialect == store.Postgres:
		t.limit = postgresMaxText
	default:
		t.limit = sqliteMaxText
	}
	return t.limit, nil
}

// Storable checks that msg, the UTF-8 text to insert, fits the mailbox:
// ErrUnstorable or ErrTooLarge, with the reason, when it does not; another
// error when the limit cannot be read.
func (t *Table) Storable(ctx context.Context, msg []byte) error {
	if t.dialect == store.Postgres && bytes.IndexByte(msg, 0) >= 0 {
		return fmt.Errorf("%w: it holds a NUL byte, which a PostgreSQL text column cannot hold", ErrUnstorable)
	}
	limit, err := t.MaxMessage(ctx)
	if err != nil {
		return err
	}
	if int64(len(msg)) > limit {
		return fmt.Errorf("%w: %d bytes as UTF-8 text, the mailbox %s holds at most %d", ErrTooLarge, len(msg), t.name, limit)
	}
	return nil
}
