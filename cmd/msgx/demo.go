package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

// newDemoCmd runs the SIS pipeline end to end on the embedded default —
// SQLite for the store and the mailbox table, the in-process broker for the
// events — with the bundled real SIS traffic: mailbox rows → strict-FIFO
// inbox → the SIS processor (flight state and outbox events in one
// transaction) → the relay's msg and schd lanes → a broker consumer. It ends
// with a summary: messages by status and reason, flights, events by topic,
// dead letters.
func newDemoCmd() *cobra.Command {
	cfg := demoConfig{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the SIS pipeline end to end on the embedded default (SQLite + in-process broker) with the bundled real SIS traffic",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Out = cmd.OutOrStdout()
			_, err := runDemo(cmd.Context(), cfg)
			return err
		},
	}
	cmd.Flags().StringVar(&cfg.DSN, "dsn", "sqlite:msgx-demo.db", "store and mailbox database: sqlite:PATH or postgres://…")
	return cmd
}

// demoConfig says what to run.
type demoConfig struct {
	DSN string // default sqlite:msgx-demo.db
	Out io.Writer
	Log *slog.Logger
}

// demoResult is what the run saw.
type demoResult struct {
	Messages int
	ByStatus map[inbox.Status]int
	// Reasons counts the SKIPPED and DEAD messages by reason.
	Reasons map[string]int
	// Flights are the demo's flights as stored at the end.
	Flights map[string]*sis.Flight
	// Published and Consumed count the events by topic; Tombstones those
	// consumed with no value.
	Published, Consumed map[string]int
	Tombstones          int
	// Dead lists the dead letters (messages and events) with their reasons.
	Dead    []string
	Elapsed time.Duration
}

// countingPublisher counts the events the broker confirmed, by topic.
type countingPublisher struct {
	b  *broker.Broker
	mu sync.Mutex
	n  map[string]int
}

func (c *countingPublisher) SendConfirmed(ctx context.Context, topic string, msgs ...*broker.Message) error {
	if err := c.b.SendConfirmed(ctx, topic, msgs...); err != nil {
		return err
	}
	c.mu.Lock()
	c.n[topic] += len(msgs)
	c.mu.Unlock()
	return nil
}

// Run feeds the mailbox and runs the pipeline until every message is
// terminal and every event has reached the consumer, then prints the summary
// to cfg.Out.
func runDemo(ctx context.Context, cfg demoConfig) (demoResult, error) {
	if cfg.DSN == "" {
		cfg.DSN = "sqlite:msgx-demo.db"
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	db, err := store.Open(ctx, cfg.DSN, store.WithMigrate(admin.Schema(), mailbox.Schema(), sis.Schema()), store.WithLogger(cfg.Log))
	if err != nil {
		return demoResult{}, err
	}
	defer db.Close()
	table, err := mailbox.NewStore(db)
	if err != nil {
		return demoResult{}, err
	}

	// Fresh sequence numbers: each message has its own business identity,
	// also when the demo runs again on the same file.
	msgs, err := traffic.Ordered(time.Now().UnixNano() % 1_000_000_000)
	if err != nil {
		return demoResult{}, err
	}
	start := time.Now()
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		if ids[i], err = table.Insert(ctx, m, time.Now(), mailbox.Meta{}); err != nil {
			return demoResult{}, fmt.Errorf("demo: mailbox insert: %w", err)
		}
	}
	fmt.Fprintf(cfg.Out, "mailbox: %d SIS messages (the %d bundled real ones, each with a fresh SEQN, and one composed SCHD ADFT) in %s (%s)\n",
		len(msgs), len(msgs)-1, table.Name(), cfg.DSN)

	srv := mem.NewServer()
	defer srv.Close()
	b := broker.New("mem", mem.New(srv), broker.WithLogger(cfg.Log))
	if err := b.Start(ctx); err != nil {
		return demoResult{}, err
	}
	defer b.Stop(context.WithoutCancel(ctx))

	// The schd lane flushes every 100 ms instead of 3 s so the demo ends quickly.
	scfg := sis.Config{SchdFlushPeriod: 100 * time.Millisecond}
	proc, err := sis.NewProcessor(scfg, sis.WithLogger(cfg.Log))
	if err != nil {
		return demoResult{}, err
	}
	res := demoResult{Messages: len(msgs), ByStatus: map[inbox.Status]int{}, Reasons: map[string]int{},
		Consumed: map[string]int{}}
	var mu sync.Mutex
	for _, topic := range []string{proc.Config().MsgTopic, proc.Config().SchdTopic, proc.Config().RefTopic} {
		if _, err := b.Listen(ctx, broker.Subscription{Topic: topic, Group: "demo-consumer", Concurrency: 4},
			func(_ context.Context, d *broker.Delivery) error {
				mu.Lock()
				res.Consumed[topic]++
				if len(d.Payload) == 0 {
					res.Tombstones++
				}
				mu.Unlock()
				return nil
			}); err != nil {
			return demoResult{}, err
		}
	}

	const stream = "sis"
	eng, err := inbox.New(db, stream, inbox.Typed(proc),
		inbox.WithLogger(cfg.Log),
		inbox.WithPollInterval(20*time.Millisecond),
		inbox.WithSource(mailbox.NewPoller(table, db, stream, mailbox.WithStart(mailbox.FromBeginning()),
			mailbox.WithPollInterval(20*time.Millisecond), mailbox.WithPollerLogger(cfg.Log))),
		inbox.WithBackfill(table),
	)
	if err != nil {
		return demoResult{}, err
	}
	pub := &countingPublisher{b: b, n: map[string]int{}}
	relay, err := outbox.NewRelay(db, append(sis.RelayTargets(pub, scfg),
		outbox.WithLogger(cfg.Log), outbox.WithPollInterval(20*time.Millisecond))...)
	if err != nil {
		return demoResult{}, err
	}
	defer relay.Close()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- eng.Run(rctx) }()
	go func() { errs <- relay.Run(rctx) }()

	// Until every message is terminal.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastReport := time.Now()
	for {
		rows, err := demoRows(ctx, db, stream, ids)
		if err != nil {
			return demoResult{}, err
		}
		terminal := 0
		for _, r := range rows {
			if r.Status.Terminal() {
				terminal++
			}
		}
		if terminal == len(ids) {
			for _, r := range rows {
				res.ByStatus[r.Status]++
				if r.Status != inbox.Succeeded {
					res.Reasons[r.Reason]++
				}
				if r.Status == inbox.Dead {
					res.Dead = append(res.Dead, fmt.Sprintf("message %d (%s): %s", r.ID, r.Kind, r.Reason))
				}
			}
			break
		}
		if time.Since(lastReport) >= time.Second {
			fmt.Fprintf(cfg.Out, "processed %d/%d\n", terminal, len(ids))
			lastReport = time.Now()
		}
		select {
		case <-tick.C:
		case err := <-errs:
			return demoResult{}, fmt.Errorf("demo: pipeline stopped: %w", err)
		case <-ctx.Done():
			return demoResult{}, ctx.Err()
		}
	}
	// Stop the running relay and drain what it has not sent yet, compacted
	// lanes without waiting for their period.
	cancel()
	for range 2 {
		if err := <-errs; err != nil && rctx.Err() == nil {
			return demoResult{}, err
		}
	}
	if _, err := relay.Flush(ctx); err != nil {
		return demoResult{}, fmt.Errorf("demo: relay: %w", err)
	}
	for _, target := range []string{sis.TargetMsg, sis.TargetSchd, sis.TargetRef} {
		dead, err := outbox.ListDead(ctx, db, target, 0, 100)
		if err != nil {
			return demoResult{}, err
		}
		for _, d := range dead {
			res.Dead = append(res.Dead, fmt.Sprintf("event %s (%s): %s", d.EventID, target, d.LastError))
		}
	}
	// Until the consumer has seen every confirmed event.
	pub.mu.Lock()
	res.Published = pub.n
	pub.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		seen := true
		for topic, n := range res.Published {
			if res.Consumed[topic] < n {
				seen = false
			}
		}
		mu.Unlock()
		if seen {
			break
		}
		if time.Now().After(deadline) {
			return demoResult{}, fmt.Errorf("demo: the consumer saw %v of %v events", res.Consumed, res.Published)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return demoResult{}, ctx.Err()
		}
	}
	res.Elapsed = time.Since(start)
	if res.Flights, err = sis.Read(ctx, db, []string{"15", "16", "121112312", "7610151"}); err != nil {
		return demoResult{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	printDemoSummary(cfg.Out, &res)
	return res, nil
}

// demoRows reads the inbox rows of the demo's messages.
func demoRows(ctx context.Context, db *store.DB, stream string, ids []int64) ([]inbox.Row, error) {
	out := make([]inbox.Row, 0, len(ids))
	for _, id := range ids {
		r, err := inbox.Get(ctx, db, stream, id)
		if err == inbox.ErrNotFound {
			r = inbox.Row{ID: id, Status: inbox.Pending}
		} else if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func printDemoSummary(w io.Writer, r *demoResult) {
	fmt.Fprintf(w, "\nmessages: %d in %s\n", r.Messages, r.Elapsed.Round(time.Millisecond))
	for _, s := range []inbox.Status{inbox.Succeeded, inbox.Skipped, inbox.Dead, inbox.Failed, inbox.Pending} {
		if n := r.ByStatus[s]; n > 0 || s == inbox.Dead {
			fmt.Fprintf(w, "  %-9s %4d\n", s, n)
		}
	}
	reasons := make([]string, 0, len(r.Reasons))
	for reason := range r.Reasons {
		reasons = append(reasons, reason)
	}
	slices.Sort(reasons)
	for _, reason := range reasons {
		fmt.Fprintf(w, "    %4d  %s\n", r.Reasons[reason], reason)
	}
	flids := make([]string, 0, len(r.Flights))
	for id := range r.Flights {
		flids = append(flids, id)
	}
	slices.Sort(flids)
	fmt.Fprintf(w, "flights: %d\n", len(flids))
	for _, id := range flids {
		f := r.Flights[id]
		colls := make([]string, 0, len(f.Collections))
		for c, items := range f.Collections {
			colls = append(colls, fmt.Sprintf("%s×%d", c, len(items)))
		}
		slices.Sort(colls)
		fmt.Fprintf(w, "  FLID %-9s %s %-7s %s%s  version %d, %d fields, collections %s\n", id, f.OperationDay, f.Status,
			f.Fields["ALCD"], strings.TrimPrefix(f.Fields["FLNO"], f.Fields["ALCD"]), f.Version, len(f.Fields), strings.Join(colls, " "))
	}
	topics := make([]string, 0, len(r.Published))
	for t := range r.Published {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	fmt.Fprintln(w, "events by topic (published by the relay / consumed):")
	for _, t := range topics {
		fmt.Fprintf(w, "  %-9s %4d / %d\n", t, r.Published[t], r.Consumed[t])
	}
	fmt.Fprintf(w, "  (%d tombstones)\n", r.Tombstones)
	if len(r.Dead) == 0 {
		fmt.Fprintln(w, "dead letters: none")
		return
	}
	fmt.Fprintln(w, "dead letters:")
	for _, d := range r.Dead {
		fmt.Fprintf(w, "  %s\n", d)
	}
}
