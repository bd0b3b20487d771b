package mailbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestAutoIncrementStepAboveOneIsAnErrorOnMariaDB(t *testing.T) {
	ctx := context.Background()
	// Writers of this mailbox get ids two apart (as under Galera).
	raw, err := sql.Open("mysql", storetest.MySQLDSN()+"&auto_increment_increment=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	tbl, err := mailbox.NewMySQL(raw, mailbox.WithTable(tableName()))
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tbl.Drop(context.Background()) })
	for range 3 {
		if _, err := tbl.Insert(ctx, []byte("m"), t0, mailbox.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, name: "mariadb", db: storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema())), table: tbl, raw: raw}
	p := e.poller(clock.NewFake(t0))
	if _, err := p.Poll(ctx); !errors.Is(err, mailbox.ErrAutoIncrementStep) {
		t.Fatalf("poll = %v, want ErrAutoIncrementStep", err)
	}
	if n := value(t, p.Anomalies("auto_increment_increment")); n != 1 {
		t.Fatalf("anomaly metric = %v", n)
	}
	if got := e.enqueued(); len(got) != 0 {
		t.Fatalf("enqueued %v", got)
	}
}

func TestIDsGoingBackwardsAreAnErrorOnMariaDB(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rewind func(e *env)
	}{
		{"truncate", func(e *env) { e.exec("TRUNCATE TABLE TBL") }},
		{"auto_increment", func(e *env) {
			e.exec("DELETE FROM TBL WHERE CMINMSGS_ID > 1")
			e.exec("ALTER TABLE TBL AUTO_INCREMENT = 2")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newMariaDBEnv(t)
			for range 3 {
				if _, err := e.table.Insert(ctx, []byte("m"), t0, mailbox.Meta{}); err != nil {
					t.Fatal(err)
				}
			}
			p := e.poller(clock.NewFake(t0))
			if res := e.poll(p); res.Watermark != 3 {
				t.Fatalf("poll = %+v", res)
			}
			tc.rewind(e)
			id, err := e.table.Insert(ctx, []byte("new"), t0, mailbox.Meta{})
			if err != nil || id > 3 {
				t.Fatalf("insert after the rewind: id %d, %v", id, err)
			}
			if _, err := p.Poll(ctx); !errors.Is(err, mailbox.ErrRewound) {
				t.Fatalf("poll = %v, want ErrRewound: row %d would never be read", err, id)
			}
			if n := value(t, p.Anomalies("ids_backwards")); n != 1 {
				t.Fatalf("anomaly metric = %v", n)
			}
		})
	}
}
