package mailbox_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/internal/tcpproxy"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store/storetest"
)

// TestOutboundInsertErrorClasses: the outbound mailbox's insert says why it
// failed in the broker port's vocabulary. The MariaDB server is shared, so
// its connection is cut at a TCP proxy: connections closed and refused (a
// stopped server) or black-holed (a silent network) make the mailbox
// Unavailable; a row the table refuses (invalid UTF-8 in the utf8mb4
// message column) is Rejected.
func TestOutboundInsertErrorClasses(t *testing.T) {
	direct := storetest.OpenMySQL(t)
	table := storetest.UniqueName("t_coutmsgs_")
	admin, err := mailbox.NewOutbound(direct, mailbox.WithOutboundTable(table))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := admin.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Drop(context.Background()) })

	// The server's address in the DSN (user@tcp(host:port)/db?...), and
	// the same DSN through the proxy.
	dsn := storetest.MySQLDSN()
	_, rest, ok := strings.Cut(dsn, "tcp(")
	server, _, ok2 := strings.Cut(rest, ")")
	if !ok || !ok2 {
		t.Fatalf("no tcp(host:port) in the test DSN %q", dsn)
	}
	px, err := tcpproxy.New(server)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = px.Close() }()
	dsn = strings.Replace(dsn, "tcp("+server+")", "tcp("+px.Addr()+")", 1) + "&timeout=1s"
	raw, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	out, err := mailbox.NewOutbound(raw, mailbox.WithOutboundTable(table))
	if err != nil {
		t.Fatal(err)
	}
	insert := func(msg string) error {
		ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := out.Insert(ictx, []byte(msg), time.Now())
		return err
	}
	if err := insert("<MSG/>"); err != nil {
		t.Fatalf("insert through the proxy: %v", err)
	}

	// A stopped server: open connections closed, new ones refused.
	px.Refuse(true)
	px.Cut()
	if err := insert("<MSG/>"); driver.Code(err) != driver.Unavailable {
		t.Fatalf("insert with the server away: %v (class %v), want unavailable", err, driver.Code(err))
	}
	px.Refuse(false)
	if err := insert("<MSG/>"); err != nil {
		t.Fatalf("insert after the server came back: %v", err)
	}

	// A silent network: the insert gets no answer before its deadline.
	px.BlackHole(true)
	if err := insert("<MSG/>"); driver.Code(err) != driver.Unavailable {
		t.Fatalf("insert into a black hole: %v (class %v), want unavailable", err, driver.Code(err))
	}
	px.BlackHole(false)

	// A row the table refuses.
	if err := insert("<MSG>\xff\xfe</MSG>"); driver.Code(err) != driver.Rejected {
		t.Fatalf("insert of invalid UTF-8: %v (class %v), want rejected", err, driver.Code(err))
	}
}
