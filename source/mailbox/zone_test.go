package mailbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store/storetest"
)

// airportWallTime reads a DATETIME the driver parsed as UTC as the airport
// wall time it is.
func airportWallTime(t time.Time) time.Time {
	loc, err := time.LoadLocation(mailbox.DefaultTimeZone)
	if err != nil {
		loc = time.FixedZone("CST", 8*3600)
	}
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), loc)
}

func TestMailboxDatesAreAirportTimeOnMariaDB(t *testing.T) {
	ctx := context.Background()
	e := newMariaDBEnv(t)
	at := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC) // 16:00 in Shanghai
	id, err := e.table.Insert(ctx, []byte("m"), at, mailbox.Meta{DateSent: at.Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.table.Backfill(ctx, []int64{id}, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	read := func(tbl string) (received, sent, processed string) {
		t.Helper()
		err := e.raw.QueryRowContext(ctx, "SELECT CAST(CMINMSGS_DATE_RECEIVED AS CHAR), CAST(CMINMSGS_SUBSYSTEM_DATE_SENT AS CHAR), "+
			"CAST(CMINMSGS_DATE_PROCESSED AS CHAR) FROM "+tbl+" WHERE CMINMSGS_ID = ?", id).Scan(&received, &sent, &processed)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if r, s, p := read(e.table.Name()); r != "2026-03-01 16:00:00" || s != "2026-03-01 15:59:00" || p != "2026-03-01 17:00:00" {
		t.Fatalf("DATETIMEs %s %s %s, want Shanghai wall time", r, s, p)
	}
	// Another zone by configuration, whatever the connection's loc.
	raw, err := sql.Open("mysql", storetest.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	utc, err := mailbox.NewMySQL(raw, mailbox.WithTable(e.table.Name()), mailbox.WithTimeZone(time.FixedZone("UTC-3", -3*3600)))
	if err != nil {
		t.Fatal(err)
	}
	if id, err = utc.Insert(ctx, []byte("m"), at, mailbox.Meta{}); err != nil {
		t.Fatal(err)
	}
	var received string
	if err := raw.QueryRowContext(ctx, "SELECT CAST(CMINMSGS_DATE_RECEIVED AS CHAR) FROM "+e.table.Name()+" WHERE CMINMSGS_ID = ?", id).Scan(&received); err != nil {
		t.Fatal(err)
	}
	if received != "2026-03-01 05:00:00" {
		t.Fatalf("DATETIME %s in a zone 3 h behind UTC", received)
	}
}
