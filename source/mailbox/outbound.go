package mailbox

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/store"
)

// Outbound is the outbound mailbox table (COUTMSGS) on the shared MySQL
// server: msgx inserts the messages it sends (SIS requests), the legacy
// dispatcher delivers them and sets COUTMSGS_DATE_SENT. msgx never updates
// or deletes its rows.
type Outbound struct {
	db      *sql.DB
	name    string
	routing string
	zone    *time.Location
	q       store.Queries
}

// OutboundOption configures an Outbound.
type OutboundOption func(*outboundOptions)

type outboundOptions struct {
	table, routing string
	zone           *time.Location
}

// WithOutboundTable sets the table name (default coutmsgs).
func WithOutboundTable(name string) OutboundOption {
	return func(o *outboundOptions) { o.table = name }
}

// WithRoutingID sets ROUTINGID of the inserted rows (default "SIS"; at most
// 23 characters), the dispatcher's destination.
func WithRoutingID(id string) OutboundOption { return func(o *outboundOptions) { o.routing = id } }

// WithOutboundTimeZone sets the zone DATETIME values are written and read in
// (default Asia/Shanghai, as the inbound table).
func WithOutboundTimeZone(loc *time.Location) OutboundOption {
	return func(o *outboundOptions) { o.zone = loc }
}

// NewOutbound uses an open MySQL handle (opened with parseTime=true).
func NewOutbound(db *sql.DB, opts ...OutboundOption) (*Outbound, error) {
	o := outboundOptions{table: "coutmsgs", routing: "SIS"}
	for _, opt := range opts {
		opt(&o)
	}
	if !identRE.MatchString(o.table) {
		return nil, fmt.Errorf("mailbox: invalid table name %q", o.table)
	}
	if o.routing == "" || len(o.routing) > 23 {
		return nil, fmt.Errorf("mailbox: routing id %q must be 1 to 23 characters", o.routing)
	}
	if o.zone == nil {
		o.zone = defaultZone()
	}
	q, err := store.LoadQueries(sqlFS, "sql", MySQL)
	if err != nil {
		return nil, fmt.Errorf("mailbox: %w", err)
	}
	out := store.Queries{}
	for k, v := range q {
		if strings.HasPrefix(k, "Out") {
			out[k] = strings.ReplaceAll(v, "{{out}}", o.table)
		}
	}
	return &Outbound{db: db, name: o.table, routing: o.routing, zone: o.zone, q: out}, nil
}

// Name is the table name.
func (o *Outbound) Name() string { return o.name }

// Insert stores a message to send and returns its id once the server has
// confirmed the insert. Its error carries the broker port's class
// (driver.Code): Unavailable when the server could not be reached or did not
// answer in time (the mailbox's state: the message may be written later),
// Rejected when the server refused the row itself (it would refuse it
// again), Unknown otherwise.
func (o *Outbound) Insert(ctx context.Context, msg []byte, inserted time.Time) (int64, error) {
	res, err := o.db.ExecContext(ctx, o.q.Get("OutInsert"), string(msg), o.datetime(inserted), o.routing)
	if err != nil {
		return 0, driver.Classify(insertErrorCode(err), fmt.Errorf("mailbox: insert into %s: %w", o.name, err))
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("mailbox: insert into %s: %w", o.name, err)
	}
	return id, nil
}

// The MySQL server errors that say the server cannot take writes now, and
// those that refuse the row itself.
var (
	unavailableCodes = []uint16{
		1040, // too many connections
		1053, // server shutdown in progress
		1205, // lock wait timeout
		1290, // running with --read-only
		1836, // read-only mode
		1927, // connection killed
	}
	rejectedCodes = []uint16{
		1048, // column cannot be null
		1054, // unknown column
		1062, // duplicate entry
		1142, // command denied on the table
		1146, // no such table
		1153, // packet bigger than max_allowed_packet
		1264, // out of range
		1265, // data truncated
		1366, // incorrect value for the column (say, invalid UTF-8)
		1406, // data too long
	}
)

// insertErrorCode classifies an insert's error (see Insert).
func insertErrorCode(err error) driver.ErrorCode {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch {
		case slices.Contains(unavailableCodes, me.Number):
			return driver.Unavailable
		case slices.Contains(rejectedCodes, me.Number),
			strings.HasPrefix(string(me.SQLState[:]), "22"), // data exception
			strings.HasPrefix(string(me.SQLState[:]), "23"): // integrity constraint
			return driver.Rejected
		}
		return driver.Unknown
	}
	switch {
	case errors.Is(err, mysql.ErrPktTooLarge):
		return driver.Rejected
	case errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, sqldriver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, context.DeadlineExceeded), driver.Disconnected(err):
		return driver.Unavailable
	}
	return driver.Unknown
}

// SentAt reports when the dispatcher sent row id (ok false while it has not).
func (o *Outbound) SentAt(ctx context.Context, id int64) (at time.Time, ok bool, err error) {
	var t sql.NullTime
	if err := o.db.QueryRowContext(ctx, o.q.Get("OutSentAt"), id).Scan(&t); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return time.Time{}, false, fmt.Errorf("mailbox: %s has no row %d", o.name, id)
		}
		return time.Time{}, false, fmt.Errorf("mailbox: read %s: %w", o.name, err)
	}
	if !t.Valid {
		return time.Time{}, false, nil
	}
	// The column holds the wall time in the airport zone, whatever the
	// DSN's loc made of it.
	w := t.Time
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), o.zone), true, nil
}

// datetime is the wall time in the airport zone.
func (o *Outbound) datetime(at time.Time) string {
	return at.In(o.zone).Format("2006-01-02 15:04:05")
}

// Create creates the table if it does not exist (tests and development).
func (o *Outbound) Create(ctx context.Context) error {
	if _, err := o.db.ExecContext(ctx, o.q.Get("OutCreate")); err != nil {
		return fmt.Errorf("mailbox: create %s: %w", o.name, err)
	}
	return nil
}

// Drop drops the table (tests).
func (o *Outbound) Drop(ctx context.Context) error {
	if _, err := o.db.ExecContext(ctx, o.q.Get("OutDrop")); err != nil {
		return fmt.Errorf("mailbox: drop %s: %w", o.name, err)
	}
	return nil
}
