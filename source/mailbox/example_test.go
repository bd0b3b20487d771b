package mailbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log"
	"log/slog"
	"strconv"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// stock is a small typed processor (inbox.TypedProcessor of order): a
// message "order N: Q x ITEM" takes Q of ITEM from the stock in the inbox's
// transaction. An order's number is its identity, so a sender's second copy
// of an order is SKIPPED; a message that is no order is MALFORMED and DEAD
// at once, with the reason kept.
type stock struct{}

type order struct {
	item string
	qty  int
}

func (stock) Decode(payload []byte) (inbox.DecodedOf[order], error) {
	var n, qty int
	var item string
	if _, err := fmt.Sscanf(string(payload), "order %d: %d x %s", &n, &qty, &item); err != nil || qty <= 0 {
		return inbox.DecodedOf[order]{}, inbox.Failf(inbox.Malformed, "not an order: %q", payload)
	}
	return inbox.DecodedOf[order]{Identity: "order:" + strconv.Itoa(n), Kind: "order", Value: order{item, qty}}, nil
}

func (stock) Process(ctx context.Context, tx store.Tx, _ *inbox.Message, o order) (inbox.Outcome, error) {
	if _, err := tx.Exec(ctx, "UPDATE stock SET qty = qty - $1 WHERE item = $2", o.qty, o.item); err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Done(), nil
}

// The inbox over a legacy mailbox table: the senders insert rows into a
// table on MariaDB (here made by the example; at an airport it is the
// incumbent's cminmsgs), a poller enqueues them in id order into a stream
// whose tables are in PostgreSQL, the processor applies each once, and the
// processed mark is written back into every mailbox row msgx has finished
// with (the dead one too: its reason is in msgx's dead letters).
func Example_inbox() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name := "example_" + hex.EncodeToString(suffix)

	// The mailbox table on the MariaDB server the tests use.
	box, err := mailbox.OpenMySQL(ctx, storetest.MySQLDSN(), mailbox.WithTable(name))
	if err != nil {
		log.Fatal(err)
	}
	defer box.Close()
	if err := box.Create(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = box.Drop(context.WithoutCancel(ctx)) }()

	// msgx's store: a fresh PostgreSQL schema holding the inbox's tables and
	// the program's own.
	db, dropSchema := freshSchema(ctx, name, quiet)
	defer dropSchema()
	if err := inbox.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(ctx, "CREATE TABLE stock (item TEXT PRIMARY KEY, qty INT NOT NULL); INSERT INTO stock VALUES ('A', 10)"); err != nil {
		log.Fatal(err)
	}

	poller := mailbox.NewPoller(box, db, "orders", mailbox.WithStart(mailbox.FromBeginning()),
		mailbox.WithPollInterval(20*time.Millisecond), mailbox.WithPollerLogger(quiet))
	eng, err := inbox.New(db, "orders", inbox.Typed(stock{}), inbox.WithSource(poller), inbox.WithBackfill(box),
		inbox.WithPollInterval(20*time.Millisecond), inbox.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() { stop(); <-done }()

	for _, m := range []string{"order 1: 3 x A", "order 2: 2 x A", "order 1: 3 x A", "hello"} {
		if _, err := box.Insert(ctx, []byte(m), time.Now(), mailbox.Meta{}); err != nil {
			log.Fatal(err)
		}
	}
	raw, err := sql.Open("mysql", storetest.MySQLDSN())
	if err != nil {
		log.Fatal(err)
	}
	defer raw.Close()
	var marked int
	for ctx.Err() == nil {
		c, err := inbox.Counts(ctx, db, "orders")
		if err == nil && c[inbox.Succeeded]+c[inbox.Skipped]+c[inbox.Dead] == 4 &&
			raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+name+" WHERE CMINMSGS_STATUS = 'PROCESSED'").Scan(&marked) == nil && marked == 4 {
			fmt.Printf("succeeded %d, skipped %d, dead %d\n", c[inbox.Succeeded], c[inbox.Skipped], c[inbox.Dead])
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var left int
	if err := db.QueryRow(ctx, "SELECT qty FROM stock WHERE item = 'A'").Scan(&left); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock of A:", left)
	fmt.Println("mailbox rows marked PROCESSED:", marked)
	// Output:
	// succeeded 2, skipped 1, dead 1
	// stock of A: 5
	// mailbox rows marked PROCESSED: 4
}

// freshSchema opens a new schema on the tests' PostgreSQL server, dropped by
// the function it returns.
func freshSchema(ctx context.Context, name string, logger *slog.Logger) (*store.DB, func()) {
	dsn, drop, err := storetest.CreateSchema(ctx, name)
	if err != nil {
		log.Fatal(err)
	}
	db, err := store.Open(ctx, dsn, store.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	return db, func() {
		db.Close()
		_ = drop()
	}
}
