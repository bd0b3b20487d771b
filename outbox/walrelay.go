package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgx/msgx/store"
)

// WALRelay publishes the events Enqueue wrote into the write-ahead log (the
// WAL mode, SetMode) at-least-once: it streams them from a logical
// replication slot (plugin pgoutput, messages only, over an empty
// publication) in commit order, publishes them with the lanes' semantics, and
// advances the slot's confirmed position only past events the broker
// confirmed or that it handed to the table. A restart resumes from the
// confirmed position: events after it are sent again, with the same ids.
//
// An event whose send fails for itself (not because the broker is
// unavailable) is handed to msgx_outbox with its attempt charged, where the
// Relay the WALRelay runs beside it retries it and, with its attempts
// exhausted, makes it DEAD (replay, skip, audit and console as in the table
// mode); the later events of its key follow it into the table, so that the
// key's order holds. A broker outage pauses the stream: nothing is charged
// and the slot retains the WAL.
//
// PostgreSQL lets one connection stream from a slot at a time: that is the
// slot holder's lease. Other instances stand by and take the slot over when
// the holder's connection ends (a crash ends it at once; a hung holder is
// ended by the server's wal_sender_timeout).
type WALRelay struct {
	cfg    config
	db     *store.DB
	repl   *pgconn.Config
	table  *Relay
	lanes  map[string]*laneConfig
	q      store.Queries
	met    *walMetrics
	log    *slog.Logger
	status atomic.Pointer[WALStatus]
	// holding is 1 while this relay streams from the slot.
	holding atomic.Bool
	// seenSlot: this relay has found or made the slot before; a slot that
	// is missing after that was dropped under it.
	seenSlot atomic.Bool
}

// WALStatus is what a WAL relay knows of its slot (Status).
type WALStatus struct {
	Slot string `json:"slot"`
	// Holder: this relay streams from the slot; otherwise it stands by.
	Holder bool `json:"holder"`
	// Active: some relay (this one or another) streams from the slot;
	// ActivePID is its server backend.
	Active    bool `json:"active"`
	ActivePID int  `json:"active_pid"`
	// Confirmed is the slot's confirmed position: the relay has handled
	// every event committed before it.
	Confirmed string `json:"confirmed_lsn"`
	// RetainedBytes is the WAL the slot keeps on the server's disk;
	// LagBytes the WAL written since its confirmed position.
	RetainedBytes int64 `json:"retained_bytes"`
	LagBytes      int64 `json:"lag_bytes"`
	// WALStatus is the server's wal_status of the slot; "lost" means it was
	// invalidated (max_slot_wal_keep_size) and events were lost with it.
	WALStatus string `json:"wal_status"`
	// Invalidated: the relay stopped on an invalidated slot.
	Invalidated bool `json:"invalidated"`
	// Paused: the stream waits for a broker that is unavailable.
	Paused   bool      `json:"paused"`
	Measured time.Time `json:"measured"`
}

// NewWALRelay builds a WAL relay over db (migrated, PostgreSQL) from the same
// options as NewRelay and the WAL options (WALSlot, WALPublication, WALBatch,
// WALLinger, WALStandbyPoll). replicationDSN is a postgres:// DSN of db's
// database for a role with the REPLICATION attribute; the slot and
// publication are created on first use. It also builds the Relay that sends
// what the WAL relay hands to the table (Run runs both).
func NewWALRelay(db *store.DB, replicationDSN string, opts ...Option) (*WALRelay, error) {
	if db.Dialect() != store.Postgres {
		return nil, fmt.Errorf("outbox: the wal relay needs PostgreSQL, not %s", db.Dialect())
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.wal.check(); err != nil {
		return nil, err
	}
	pc, err := replicationConfig(replicationDSN)
	if err != nil {
		return nil, err
	}
	q, err := queriesFor(store.Postgres)
	if err != nil {
		return nil, err
	}
	// The table relay beside the stream has only handed-over events to send:
	// this process's hand-overs and the replays ring its bell (notify), other
	// processes' reach it by NOTIFY, so it need not poll as often as a relay
	// that carries the whole load.
	table, err := NewRelay(db, append(slices.Clone(opts), WithPollInterval(max(cfg.pollInterval, time.Second)))...)
	if err != nil {
		return nil, err
	}
	r := &WALRelay{cfg: cfg, db: db, repl: pc, table: table, lanes: map[string]*laneConfig{}, q: q,
		met: newWALMetrics(cfg.registerer, cfg.wal.slot), log: cfg.logger.With("slot", cfg.wal.slot)}
	for i := range cfg.lanes {
		r.lanes[cfg.lanes[i].target] = &r.cfg.lanes[i]
	}
	r.status.Store(&WALStatus{Slot: cfg.wal.slot})
	return r, nil
}

// Table is the relay of the events the WAL relay handed to msgx_outbox: its
// Flush, dead letters and replays work as in the table mode.
func (r *WALRelay) Table() *Relay { return r.table }

// Close releases the table relay's connections. Call it when Run has
// returned.
func (r *WALRelay) Close() { r.table.Close() }

// Status returns the slot's state as last measured (Run measures it every
// lag interval) and whether this relay holds it.
func (r *WALRelay) Status() WALStatus {
	st := *r.status.Load()
	st.Holder = r.holding.Load()
	return st
}

var (
	errSlotBusy        = errors.New("outbox: the replication slot is held by another relay")
	errSlotInvalidated = errors.New("outbox: the replication slot was invalidated")
)

// Run streams and publishes until ctx ends, and runs the table relay beside
// it. An instance that cannot take the slot (another holds it) stands by and
// tries again every WALStandbyPoll. It returns nil when ctx ends.
func (r *WALRelay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.table.Run(ctx); err != nil {
			r.log.Error("outbox: the table relay beside the wal relay stopped", "err", err)
		}
	})
	wg.Go(func() { r.measureLoop(ctx) })
	defer wg.Wait()
	failures := 0
	for ctx.Err() == nil {
		err := r.session(ctx)
		r.holding.Store(false)
		r.met.holder.Set(0)
		if ctx.Err() != nil {
			break
		}
		var wait time.Duration
		switch {
		case errors.Is(err, errSlotBusy):
			failures = 0
			wait = r.cfg.wal.standbyPoll
			r.log.Debug("outbox: standing by; another relay holds the slot")
		case errors.Is(err, errSlotInvalidated):
			// Loudly, every time: events were lost with the slot's WAL, and
			// msgx will not create a new slot (and skip them) by itself.
			wait = time.Minute
			r.log.Error("outbox: THE WAL RELAY'S REPLICATION SLOT WAS INVALIDATED: PostgreSQL removed WAL the slot still needed "+
				"(max_slot_wal_keep_size), so events committed while the relay was behind are lost from the stream. "+
				"The relay will not stream until an operator drops the slot (SELECT pg_drop_replication_slot(...)); "+
				"see docs/outbox.md, \"When the slot is invalidated\"", "err", err)
		default:
			failures++
			wait = r.table.errorPause(failures)
			r.log.Error("outbox: wal stream failed", "err", err, "failures", failures, "retry_in", wait)
		}
		sleepReal(ctx, wait)
	}
	return nil
}

// session connects, makes sure of the publication and the slot, and streams
// until an error or the end of ctx.
func (r *WALRelay) session(ctx context.Context) error {
	schema, err := r.schema(ctx)
	if err != nil {
		return err
	}
	st, found, err := r.slot(ctx)
	if err != nil {
		return err
	}
	if found && st.WALStatus == "lost" {
		r.met.invalidated.Set(1)
		return fmt.Errorf("%w: slot %s, wal_status lost", errSlotInvalidated, r.cfg.wal.slot)
	}
	if found {
		r.seenSlot.Store(true)
	}
	if found && st.Active {
		return errSlotBusy
	}
	conn, err := r.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn(ctx, conn, r.cfg.dbTimeout)
	if !found {
		if err := r.prepare(ctx, conn); err != nil {
			return err
		}
	}
	err = pglogrepl.StartReplication(ctx, conn, r.cfg.wal.slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", r.cfg.wal.publication),
			"messages 'true'"},
	})
	if err != nil {
		if pgCode(err) == "55006" { // object_in_use: another relay took it first
			return errSlotBusy
		}
		return fmt.Errorf("outbox: start replication from slot %s: %w", r.cfg.wal.slot, err)
	}
	r.holding.Store(true)
	r.met.holder.Set(1)
	r.log.Info("outbox: holding the replication slot; streaming")
	s := &stream{r: r, conn: conn, prefix: WALPrefix + schema, lastStatus: time.Now()}
	return s.run(ctx)
}

// Prepare creates the publication and the slot if they do not exist yet.
// Events are decoded only from the slot's creation on: a WAL-mode producer
// must not commit events before the slot exists, so the service prepares
// the relay before it takes any traffic (Run prepares too).
func (r *WALRelay) Prepare(ctx context.Context) error {
	conn, err := r.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn(ctx, conn, r.cfg.dbTimeout)
	return r.prepare(ctx, conn)
}

func (r *WALRelay) connect(ctx context.Context) (*pgconn.PgConn, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.dbTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, r.repl)
	if err != nil {
		return nil, fmt.Errorf("outbox: replication connection: %w", err)
	}
	return conn, nil
}

func closeConn(ctx context.Context, conn *pgconn.PgConn, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	_ = conn.Close(cctx)
	cancel()
}

// prepare makes the publication (first: pgoutput looks it up as of each
// decoded change, so it must be older than the slot) and the slot.
func (r *WALRelay) prepare(ctx context.Context, conn *pgconn.PgConn) error {
	if err := r.ensurePublication(ctx); err != nil {
		return err
	}
	_, found, err := r.slot(ctx)
	if err != nil {
		return err
	}
	if found {
		r.seenSlot.Store(true)
		return nil
	}
	if r.seenSlot.Load() {
		// Someone dropped the slot under the relay: what was committed
		// between the drop and the new slot is not in any stream.
		r.log.Error("outbox: THE WAL RELAY'S REPLICATION SLOT DISAPPEARED (dropped while the relay used it): events committed " +
			"between its drop and the new slot made now are not streamed; see docs/outbox.md, \"When the slot is invalidated\"")
	}
	_, err = pglogrepl.CreateReplicationSlot(ctx, conn, r.cfg.wal.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication})
	switch {
	case err == nil:
		r.seenSlot.Store(true)
		r.log.Info("outbox: created the wal relay's replication slot")
	case pgCode(err) == "42710": // duplicate_object: another instance made it
	default:
		return fmt.Errorf("outbox: create replication slot %s: %w", r.cfg.wal.slot, err)
	}
	return nil
}

// replicationConfig is the connection of a DSN in the replication protocol.
// The DSN is parsed as the store's pool parses it, so that the pool's own
// parameters (pool_max_conns...) are not sent to the server as settings.
func replicationConfig(dsn string) (*pgconn.Config, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("outbox: wal relay DSN: %w", err)
	}
	c := pc.ConnConfig.Config.Copy()
	c.RuntimeParams["replication"] = "database"
	return c, nil
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func (r *WALRelay) schema(ctx context.Context) (string, error) {
	qctx, cancel := context.WithTimeout(ctx, r.cfg.dbTimeout)
	defer cancel()
	var s *string
	if err := r.db.QueryRow(qctx, r.q.Get("WALSchema")).Scan(&s); err != nil {
		return "", fmt.Errorf("outbox: current schema: %w", err)
	}
	if s == nil {
		return "", errors.New("outbox: the relay's connection has no current schema (search_path)")
	}
	return *s, nil
}

func (r *WALRelay) ensurePublication(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, r.cfg.dbTimeout)
	defer cancel()
	var ok bool
	if err := r.db.QueryRow(qctx, r.q.Get("WALPublication"), r.cfg.wal.publication).Scan(&ok); err != nil {
		return fmt.Errorf("outbox: look up publication %s: %w", r.cfg.wal.publication, err)
	}
	if ok {
		return nil
	}
	// An empty publication: pgoutput needs one, and the stream carries no
	// table's changes, only the outbox's messages.
	_, err := r.db.Exec(qctx, "CREATE PUBLICATION "+quoteIdent(r.cfg.wal.publication))
	if c := pgCode(err); err != nil && c != "42710" && c != "23505" { // made by another instance meanwhile
		return fmt.Errorf("outbox: create publication %s: %w", r.cfg.wal.publication, err)
	}
	return nil
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// slot reads the slot's state and publishes it as the relay's status and
// metrics.
func (r *WALRelay) slot(ctx context.Context) (WALStatus, bool, error) {
	qctx, cancel := context.WithTimeout(ctx, r.cfg.dbTimeout)
	defer cancel()
	st := WALStatus{Slot: r.cfg.wal.slot, Measured: time.Now()}
	var plugin string
	err := r.db.QueryRow(qctx, r.q.Get("WALSlot"), r.cfg.wal.slot).Scan(&st.Active, &st.ActivePID, &st.Confirmed,
		&st.RetainedBytes, &st.LagBytes, &st.WALStatus, &plugin)
	if errors.Is(err, store.ErrNoRows) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("outbox: read slot %s: %w", r.cfg.wal.slot, err)
	}
	if plugin != "pgoutput" {
		return st, true, fmt.Errorf("outbox: slot %s uses plugin %s, not pgoutput", r.cfg.wal.slot, plugin)
	}
	st.Invalidated = st.WALStatus == "lost"
	st.Paused = r.status.Load().Paused
	r.status.Store(&st)
	r.met.retained.Set(float64(st.RetainedBytes))
	r.met.lagBytes.Set(float64(st.LagBytes))
	if st.Invalidated {
		r.met.invalidated.Set(1)
	} else {
		r.met.invalidated.Set(0)
	}
	return st, true, nil
}

// measureLoop reads the slot's state every lag interval (every instance
// does: a standby reports the holder's slot too).
func (r *WALRelay) measureLoop(ctx context.Context) {
	for {
		if _, _, err := r.slot(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("outbox: measuring the replication slot failed", "err", err)
		}
		if !sleepReal(ctx, r.cfg.lagInterval) {
			return
		}
	}
}

// walEvent is an event read from the stream.
type walEvent struct {
	Event
	// commit is when its transaction committed (the server's clock).
	commit time.Time
}

// stream is one session's reading of the slot.
type stream struct {
	r      *WALRelay
	conn   *pgconn.PgConn
	prefix string
	// batch holds events of complete transactions, then of the open one
	// from txStart on.
	batch   []walEvent
	txStart int
	inTx    bool
	txTime  time.Time
	// first is when the batch's first event was read: the batch is
	// published at the latest a linger after it.
	first time.Time
	// end is the end of the last complete transaction read; confirmed what
	// the slot was told.
	end, confirmed pglogrepl.LSN
	lastStatus     time.Time
}

func (s *stream) run(ctx context.Context) error {
	w := s.r.cfg.wal
	for {
		if ctx.Err() != nil {
			return nil
		}
		deadline := s.lastStatus.Add(w.statusInterval)
		if s.txStart > 0 && !s.inTx {
			deadline = earliest(deadline, s.first.Add(w.linger))
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		raw, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !pgconn.Timeout(err) {
				return fmt.Errorf("outbox: wal stream: %w", err)
			}
			if err := s.flush(ctx); err != nil {
				return err
			}
			if !time.Now().Before(s.lastStatus.Add(w.statusInterval)) {
				if err := s.sendStatus(ctx); err != nil {
					return err
				}
			}
			continue
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("outbox: wal stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyData:
			if err := s.copyData(ctx, m.Data); err != nil {
				return err
			}
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *stream) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("outbox: wal keepalive: %w", err)
		}
		if k.ReplyRequested {
			return s.sendStatus(ctx)
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("outbox: wal data: %w", err)
		}
		msg, err := pglogrepl.Parse(x.WALData)
		if err != nil {
			return fmt.Errorf("outbox: wal data at %s: %w", x.WALStart, err)
		}
		switch m := msg.(type) {
		case *pglogrepl.BeginMessage:
			s.inTx, s.txTime = true, m.CommitTime
		case *pglogrepl.LogicalDecodingMessage:
			if !m.Transactional || m.Prefix != s.prefix {
				return nil
			}
			evs, err := decodeEnvelope(m.Content)
			if err != nil {
				// Never skipped: the stream stops here, loudly, until a
				// msgx that reads it runs.
				return fmt.Errorf("outbox: wal message at %s: %w", m.LSN, err)
			}
			if len(s.batch) == 0 {
				s.first = time.Now()
			}
			for _, e := range evs {
				s.batch = append(s.batch, walEvent{Event: e, commit: s.txTime})
			}
		case *pglogrepl.CommitMessage:
			s.inTx = false
			s.end = m.TransactionEndLSN
			s.txStart = len(s.batch)
			if len(s.batch) >= s.r.cfg.wal.batch || (len(s.batch) > 0 && time.Since(s.first) >= s.r.cfg.wal.linger) {
				return s.flush(ctx)
			}
			if len(s.batch) == 0 {
				// Nothing of ours in it: the position may move past it.
				s.confirmed = max(s.confirmed, s.end)
			}
		}
	}
	return nil
}

// flush publishes the events of the complete transactions read and then
// confirms their end to the slot.
func (s *stream) flush(ctx context.Context) error {
	if s.txStart == 0 {
		return nil
	}
	done := s.batch[:s.txStart]
	if err := s.r.publish(ctx, done, func() error { return s.statusDue(ctx) }); err != nil {
		return err
	}
	rest := copy(s.batch, s.batch[s.txStart:])
	clear(s.batch[rest:])
	s.batch = s.batch[:rest]
	s.txStart = 0
	if rest > 0 {
		s.first = time.Now()
	}
	s.confirmed = max(s.confirmed, s.end)
	return s.sendStatus(ctx)
}

func (s *stream) statusDue(ctx context.Context) error {
	if time.Since(s.lastStatus) < s.r.cfg.wal.statusInterval {
		return nil
	}
	return s.sendStatus(ctx)
}

// sendStatus tells the server the confirmed position: the slot may release
// the WAL before it, and a restart streams from it.
func (s *stream) sendStatus(ctx context.Context) error {
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: s.confirmed, WALFlushPosition: s.confirmed, WALApplyPosition: s.confirmed,
		ClientTime: time.Now(),
	})
	if err != nil {
		return fmt.Errorf("outbox: wal standby status: %w", err)
	}
	s.lastStatus = time.Now()
	return nil
}

// sleepReal waits d of real time (the stream's waits are about the network
// and the server, not the relay's scheduling clock); false when ctx ended.
func sleepReal(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
