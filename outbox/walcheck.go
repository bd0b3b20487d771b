package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/msgx/msgx/store"
)

// CheckWAL says, in words, what the WAL mode lacks on db's server for the
// role of replicationDSN: wal_level=logical, room for a slot and a sender,
// the REPLICATION attribute, a replication connection that pg_hba.conf lets
// in, and a slot PostgreSQL has not invalidated. Nothing lacking: nil.
// Errors reaching the server are problems too.
func CheckWAL(ctx context.Context, db *store.DB, replicationDSN, slot string) []string {
	if db.Dialect() != store.Postgres {
		return []string{fmt.Sprintf("the wal mode needs PostgreSQL; the store is %s", db.Dialect())}
	}
	if slot == "" {
		slot = DefaultWALSlot
	}
	q, err := queriesFor(store.Postgres)
	if err != nil {
		return []string{err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var (
		problems       []string
		level          string
		replication    bool
		slots, senders int
	)
	if err := db.QueryRow(ctx, q.Get("WALPrerequisites")).Scan(&level, &replication, &slots, &senders); err != nil {
		return []string{fmt.Sprintf("the server's settings could not be read: %v", err)}
	}
	if level != "logical" {
		problems = append(problems, fmt.Sprintf("PostgreSQL's wal_level is %s, and the wal mode needs logical: "+
			"ALTER SYSTEM SET wal_level = logical, then restart the server", level))
	}
	if slots < 1 {
		problems = append(problems, "max_replication_slots is 0: the wal relay needs one slot (ALTER SYSTEM SET max_replication_slots = 10, then restart)")
	}
	if senders < 1 {
		problems = append(problems, "max_wal_senders is 0: the wal relay streams through a WAL sender (ALTER SYSTEM SET max_wal_senders = 10, then restart)")
	}
	if !replication {
		problems = append(problems, "the store's role has neither the REPLICATION attribute nor superuser: ALTER ROLE <role> REPLICATION")
	}
	var status string
	err = db.QueryRow(ctx, "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&status)
	if err == nil && status == "lost" {
		problems = append(problems, fmt.Sprintf("the replication slot %s was invalidated by the server (max_slot_wal_keep_size): "+
			"events committed while it was behind are lost; see docs/outbox.md, \"When the slot is invalidated\"", slot))
	}
	if level == "logical" && replication {
		pc, err := replicationConfig(replicationDSN)
		if err != nil {
			return append(problems, fmt.Sprintf("the store's DSN does not parse: %v", err))
		}
		conn, err := pgconn.ConnectConfig(ctx, pc)
		if err != nil {
			problems = append(problems, fmt.Sprintf("a replication connection was refused (%v): pg_hba.conf needs a line "+
				"\"host replication <role> <client address> <method>\" for this client", err))
		} else {
			_ = conn.Close(ctx)
		}
	}
	return problems
}
