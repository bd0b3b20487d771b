// Package inboxbench measures the strict-FIFO inbox (workload inbox-fifo):
// N SIS FLOP messages — the bundled real ones (apptest.FLOPs), rotated with fresh SEQNs and a few
// hundred FLIDs — are put in a mailbox table; the run is timed from the start
// of the engine (poller + pump) until every message is SUCCEEDED with its
// business row and its outbox event committed. It runs the pump with group
// commit and with one transaction per message and prints a RESULT line for
// each variant.
package inboxbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgx/msgx/app/apptest"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

// Config is the workload shape.
type Config struct {
	// DSN is a PostgreSQL server; each variant runs in a fresh schema that is
	// dropped afterwards.
	DSN        string
	N          int // messages per variant (default 20 000)
	FLIDs      int // distinct flights (default 300)
	Group      int // messages per pump transaction in the group variant (default 50)
	ClaimBatch int // mailbox rows per poller scan (default 50)
	// Backfill writes the processed mark back to the mailbox rows, as in
	// production (default true).
	Backfill bool
	// Variants to run, in order (default group, single); "raw" adds the
	// ceiling: the same business statements without the engine.
	Variants []string
	// Processors to measure, each with every variant (default toy): "toy"
	// (FlopProcessor) and "sis" (the SIS pipeline's real processor).
	Processors []string
	// Rounds repeats the whole set (default 1), the order of the processors
	// and of the variants reversed every other round so that a drift of the
	// machine weighs on every side alike; each ratio is then also reported
	// as its median over the rounds.
	Rounds int
	Log    *slog.Logger
	// Progress, when set, receives a line now and then.
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.DSN == "" {
		c.DSN = bench.DefaultDSN
	}
	if c.N <= 0 {
		c.N = 20000
	}
	if c.FLIDs <= 0 {
		c.FLIDs = 300
	}
	if c.Group <= 0 {
		c.Group = 50
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = 50
	}
	if len(c.Variants) == 0 {
		c.Variants = []string{"group", "single"}
	}
	if len(c.Processors) == 0 {
		c.Processors = []string{"toy"}
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Run measures the variants and prints their RESULT lines and the ratios:
// each variant beside the first one given, and with two processors the sis
// processor beside the toy one, variant by variant.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]bench.Result, error) {
	cfg.defaults()
	for _, list := range [][]string{cfg.Variants, cfg.Processors} {
		if err := bench.CheckDistinct(list); err != nil {
			return nil, fmt.Errorf("inboxbench: %w", err)
		}
	}
	fx, err := apptest.FLOPs()
	if err != nil {
		return nil, err
	}
	if slices.Contains(cfg.Processors, "sis") {
		fx = withoutFDEL(fx)
	}
	msgs, err := apptest.Rotate(fx, cfg.N, cfg.FLIDs, time.Now().Unix()*1000)
	if err != nil {
		return nil, err
	}
	if slices.Contains(cfg.Processors, "sis") {
		varyUpdates(msgs, len(fx), cfg.FLIDs)
	}
	var (
		all    []bench.Result
		ratios = bench.Ratios{Workload: "inbox-fifo"}
	)
	for round := range cfg.Rounds {
		procs, variants := bench.RoundOrder(cfg.Processors, round), bench.RoundOrder(cfg.Variants, round)
		// by processor, then by variant
		got := map[string]map[string]bench.Result{}
		for _, name := range procs {
			bp, err := newBenchProc(name, cfg.FLIDs)
			if err != nil {
				return all, err
			}
			got[name] = map[string]bench.Result{}
			for _, v := range variants {
				r, err := runOne(ctx, cfg, bp, v, msgs, len(fx))
				if err != nil {
					return all, err
				}
				r.Print(out)
				all = append(all, r)
				got[name][v] = r
			}
		}
		for _, name := range cfg.Processors {
			prefix := ""
			if len(cfg.Processors) > 1 {
				prefix = name + " "
			}
			first := cfg.Variants[0]
			for _, v := range cfg.Variants[1:] {
				ratios.Add(out, prefix+first+"/"+v, got[name][first], got[name][v])
			}
		}
		// The real processor beside the toy one, variant by variant.
		if got["sis"] != nil && got["toy"] != nil {
			for _, v := range cfg.Variants {
				ratios.Add(out, v+" sis/toy", got["sis"][v], got["toy"][v])
			}
		}
	}
	if cfg.Rounds > 1 {
		ratios.PrintMedians(out)
	}
	return all, nil
}

// runOne measures one variant with one processor.
func runOne(ctx context.Context, cfg Config, bp benchProc, variant string, msgs [][]byte, fixtures int) (bench.Result, error) {
	group, run := cfg.Group, runVariant
	switch variant {
	case "group":
	case "single":
		group = 1
	case "raw":
		run = runRaw
	default:
		return bench.Result{}, fmt.Errorf("inboxbench: unknown variant %q (group, single, raw)", variant)
	}
	r, err := run(ctx, cfg, bp, variant, group, msgs)
	if err != nil {
		return bench.Result{}, fmt.Errorf("inboxbench: processor %s, variant %s: %w", bp.name, variant, err)
	}
	if len(cfg.Processors) > 1 || bp.name != "toy" {
		r.Extra = append(r.Extra, [2]string{"processor", bp.name}, [2]string{"fixtures", strconv.Itoa(fixtures)}, [2]string{"updates", "varied"})
	}
	return r, nil
}

// runRaw is the ceiling of the workload on this database at this moment: the
// same business statements (a savepoint, the flight upsert, the outbox
// event) for the same messages, read from the mailbox in pages of group
// and committed once per page, with no inbox state, identity, lease, poller
// or backfill. The engine's share of the time is the difference.
func runRaw(ctx context.Context, cfg Config, bp benchProc, variant string, group int, msgs [][]byte) (bench.Result, error) {
	db, table, drop, err := prepare(ctx, cfg.DSN, msgs)
	if err != nil {
		return bench.Result{}, err
	}
	defer drop()
	if err := bp.setup(ctx, db); err != nil {
		return bench.Result{}, err
	}
	proc := bp.proc
	cpu := startCPU(ctx, db, appName(ctx, db))
	start := time.Now()
	var last int64
	done := 0
	for done < len(msgs) {
		rows, err := table.Scan(ctx, last, group)
		if err != nil {
			return bench.Result{}, err
		}
		if len(rows) == 0 {
			return bench.Result{}, fmt.Errorf("raw: %d of %d rows found", done, len(msgs))
		}
		now := time.Now()
		err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			// Held back and sent together, as the engine's group commit does.
			return store.Defer(ctx, tx, func(ctx context.Context) error {
				return processRaw(ctx, tx, proc, rows, now)
			})
		})
		if err != nil {
			return bench.Result{}, err
		}
		last = rows[len(rows)-1].ID
		done += len(rows)
	}
	elapsed := time.Since(start)
	r := bench.Result{
		Workload: "inbox-fifo", Variant: variant, N: len(msgs), Elapsed: elapsed,
		Extra: [][2]string{{"group", strconv.Itoa(group)}, {"store", "postgres"}, {"mailbox", "postgres-cminmsgs"}},
	}
	r.Extra = append(r.Extra, cpu.stop(ctx, len(msgs))...)
	return r, nil
}

// processRaw runs the business statements of rows, each in a savepoint.
func processRaw(ctx context.Context, tx store.Tx, proc inbox.Processor, rows []mailbox.Row, now time.Time) error {
	for _, r := range rows {
		d, err := proc.Decode(r.Msg)
		if err != nil {
			return err
		}
		m := &inbox.Message{Stream: "raw", ID: r.ID, Payload: r.Msg, Attempt: 1, Identity: d.Identity, Kind: d.Kind, Decoded: d.Value, Now: now}
		if err := tx.Savepoint(ctx, func(ctx context.Context) error {
			_, err := proc.Process(ctx, tx, m)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

func runVariant(ctx context.Context, cfg Config, bp benchProc, variant string, group int, msgs [][]byte) (bench.Result, error) {
	db, table, drop, err := prepare(ctx, cfg.DSN, msgs)
	if err != nil {
		return bench.Result{}, err
	}
	defer drop()
	if err := bp.setup(ctx, db); err != nil {
		return bench.Result{}, err
	}
	var syncCommit string
	if err := db.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit); err != nil {
		return bench.Result{}, err
	}
	const stream = "sis"
	n := len(msgs)
	var done, commits atomic.Int64
	finished := make(chan struct{})
	opts := []inbox.Option{
		inbox.WithGroupSize(group),
		inbox.WithLogger(cfg.Log),
		inbox.WithSource(mailbox.NewPoller(table, db, stream, mailbox.WithStart(mailbox.FromBeginning()), mailbox.WithClaimBatch(cfg.ClaimBatch), mailbox.WithPollerLogger(cfg.Log))),
		inbox.WithOnCommit(func(c inbox.Committed) {
			commits.Add(1)
			if done.Add(int64(len(c.IDs))) == int64(n) {
				close(finished)
			}
		}),
	}
	if cfg.Backfill {
		opts = append(opts, inbox.WithBackfill(table))
	}
	eng, err := inbox.New(db, stream, bp.proc, opts...)
	if err != nil {
		return bench.Result{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan error, 1)
	cpu := startCPU(ctx, db, appName(ctx, db))
	start := time.Now()
	go func() { stopped <- eng.Run(rctx) }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-finished:
			break wait
		case <-tick.C:
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "inbox-fifo %s: %d/%d\n", variant, done.Load(), n)
			}
		case <-ctx.Done():
			cancel()
			<-stopped
			return bench.Result{}, ctx.Err()
		}
	}
	elapsed := time.Since(start)
	cpuExtra := cpu.stop(ctx, n)
	cancel()
	if err := <-stopped; err != nil {
		return bench.Result{}, err
	}
	if err := bp.verify(ctx, db, stream, n); err != nil {
		return bench.Result{}, err
	}
	r := bench.Result{
		Workload: "inbox-fifo", Variant: variant, N: n, Elapsed: elapsed,
		Extra: [][2]string{{"group", strconv.Itoa(group)}, {"store", "postgres"}, {"mailbox", "postgres-cminmsgs"},
			{"synchronous_commit", syncCommit}, {"backfill", strconv.FormatBool(cfg.Backfill)},
			// Messages per pump transaction: below the group size when the
			// pump waits for the poller.
			{"avg_batch", fmt.Sprintf("%.1f", float64(n)/float64(max(commits.Load(), 1)))}},
	}
	r.Extra = append(r.Extra, cpuExtra...)
	return r, nil
}

// CreateFlightTable creates the table FlopProcessor writes, if it is missing.
func CreateFlightTable(ctx context.Context, q store.Querier) error {
	_, err := q.Exec(ctx, createFlight)
	return err
}

const createFlight = `CREATE TABLE IF NOT EXISTS bench_flight (
	flid TEXT PRIMARY KEY, last_msg_id BIGINT NOT NULL, last_styp TEXT NOT NULL, version BIGINT NOT NULL)`

const upsertFlight = `INSERT INTO bench_flight (flid, last_msg_id, last_styp, version) VALUES ($1, $2, $3, 1)
ON CONFLICT (flid) DO UPDATE SET last_msg_id = EXCLUDED.last_msg_id, last_styp = EXCLUDED.last_styp,
	version = bench_flight.version + 1`

// prepare is what every variant starts from: a fresh schema with the flight
// table and the messages in its mailbox table. drop removes the schema.
func prepare(ctx context.Context, dsn string, msgs [][]byte) (db *store.DB, table *mailbox.Table, drop func(), err error) {
	db, drop, err = freshSchema(ctx, dsn)
	if err != nil {
		return nil, nil, nil, err
	}
	defer func() {
		if err != nil {
			drop()
		}
	}()
	if err := CreateFlightTable(ctx, db); err != nil {
		return nil, nil, nil, err
	}
	if err := fillMailbox(ctx, db, msgs); err != nil {
		return nil, nil, nil, err
	}
	if table, err = mailbox.NewStore(db); err != nil {
		return nil, nil, nil, err
	}
	return db, table, drop, nil
}

// freshSchema creates a schema on the server and opens a migrated store in
// it; the sessions carry the schema's name as application_name.
func freshSchema(ctx context.Context, dsn string) (*store.DB, func(), error) {
	sc, err := bench.NewSchema(ctx, dsn, "msgx_bench_inbox")
	if err != nil {
		return nil, nil, err
	}
	db, err := store.Open(ctx, bench.WithParam(bench.WithParam(sc.DSN, "synchronous_commit", "on"), "application_name", sc.Name), store.WithMigrate(mailbox.Schema(), sis.Schema()))
	if err != nil {
		_ = sc.Drop()
		return nil, nil, err
	}
	return db, func() { db.Close(); _ = sc.Drop() }, nil
}

// appName is the application_name of the store's sessions.
func appName(ctx context.Context, db *store.DB) string {
	var name string
	_ = db.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&name)
	return name
}

func fillMailbox(ctx context.Context, db *store.DB, msgs [][]byte) error {
	rows := make([][]any, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		rows[i] = []any{string(m), now}
	}
	_, err := db.Pool().CopyFrom(ctx, pgx.Identifier{"cminmsgs"}, []string{"cminmsgs_clob_msg", "cminmsgs_date_received"}, pgx.CopyFromRows(rows))
	return err
}

// verify checks, outside the timing, that every message SUCCEEDED, that each
// wrote its event, and that the events were written in message order.
func verify(ctx context.Context, db *store.DB, stream string, n int) error {
	counts, err := inbox.Counts(ctx, db, stream)
	if err != nil {
		return err
	}
	if counts[inbox.Succeeded] != n {
		return fmt.Errorf("%d of %d messages SUCCEEDED (%v)", counts[inbox.Succeeded], n, counts)
	}
	rows, err := db.Query(ctx, "SELECT event_id FROM msgx_outbox ORDER BY id")
	if err != nil {
		return err
	}
	defer rows.Close()
	var prev int64
	events := 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		_, num, _ := strings.Cut(id, ":")
		m, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return fmt.Errorf("event id %q: %w", id, err)
		}
		if m <= prev {
			return fmt.Errorf("FIFO violated: event of message %d written after message %d", m, prev)
		}
		prev = m
		events++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if events != n {
		return fmt.Errorf("%d events for %d messages", events, n)
	}
	return nil
}

// FlopProcessor is the trivial processor of the workload: it reads META
// (SNDR/TYPE/STYP/SEQN for the identity) and the FLID, upserts one flight row
// and writes one outbox event.
type FlopProcessor struct{}

var _ inbox.TypedProcessor[apptest.Flop] = FlopProcessor{}

// Decode implements inbox.TypedProcessor.
func (FlopProcessor) Decode(p []byte) (inbox.DecodedOf[apptest.Flop], error) {
	return apptest.DecodeFlop(p)
}

// Process implements inbox.TypedProcessor: the flight row and its event go
// to the database together, in one round trip.
func (FlopProcessor) Process(ctx context.Context, tx store.Tx, msg *inbox.Message, f apptest.Flop) (inbox.Outcome, error) {
	payload, _ := json.Marshal(map[string]any{"msg_id": msg.ID, "flid": f.FLID, "type": f.TYPE, "styp": f.STYP, "seqn": f.SEQN})
	if err := store.Hold(ctx, tx, store.Stmt{SQL: upsertFlight, Args: []any{f.FLID, msg.ID, f.STYP}}); err != nil {
		return inbox.Outcome{}, err
	}
	if err := outbox.Enqueue(ctx, tx, msg.Now, outbox.Event{
		ID: msg.Stream + ":" + strconv.FormatInt(msg.ID, 10), Target: "kafka:msg", Topic: "msg", Key: f.FLID, Payload: payload,
	}); err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Done(), nil
}
