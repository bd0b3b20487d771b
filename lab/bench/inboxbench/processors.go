package inboxbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
)

// benchProc is a processor the workload measures: the toy one (FlopProcessor:
// one upsert and one event per message) or the real SIS pipeline's.
type benchProc struct {
	name string
	proc inbox.Processor
	// setup prepares the business state before the timing.
	setup func(ctx context.Context, db *store.DB) error
	// verify checks the run's outcome after the timing.
	verify func(ctx context.Context, db *store.DB, stream string, n int) error
}

func newBenchProc(name string, flids int) (benchProc, error) {
	switch name {
	case "toy":
		return benchProc{name: name, proc: inbox.Typed(FlopProcessor{}),
			setup:  func(context.Context, *store.DB) error { return nil },
			verify: verify}, nil
	case "sis":
		p, err := sis.NewProcessor(sis.Config{}, sis.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		if err != nil {
			return benchProc{}, err
		}
		return benchProc{name: name, proc: inbox.Typed(p),
			setup:  func(ctx context.Context, db *store.DB) error { return seedFlights(ctx, db, p, flids) },
			verify: verifySIS}, nil
	}
	return benchProc{}, fmt.Errorf("inboxbench: unknown processor %q (toy, sis)", name)
}

// withoutFDEL leaves out the FDEL fixture: under the real processor a
// deleted flight would turn the rest of its messages into cheap no-match
// skips. Both processors get the same messages in a run that measures sis.
func withoutFDEL(fx [][]byte) [][]byte {
	out := fx[:0:0]
	for _, m := range fx {
		if !bytes.Contains(m, []byte("<STYP>FDEL</STYP>")) {
			out = append(out, m)
		}
	}
	return out
}

var (
	bodyTimeRE = regexp.MustCompile(`>(\d\d[A-Z]{3}\d\d)\d{4}<`)
	flidRE     = regexp.MustCompile(`<FLID>[^<]*</FLID>`)
)

// varyUpdates makes the rotated fixtures update their flights the way real
// traffic does, with new values: message i's body times (ddMONyyHHmm) get
// the clock time i minutes after midnight, and its FLID is shifted by one
// more for every round of the fixtures, so that a flight does not meet the
// same few fixtures round after round (300 flights and 70 fixtures share the
// factor 10). Without it most messages would set values their flight already
// has, which the real processor recognises as no change and does not write:
// a much cheaper workload than real traffic.
func varyUpdates(msgs [][]byte, fixtures, flids int) {
	for i, m := range msgs {
		m = flidRE.ReplaceAll(m, []byte("<FLID>"+strconv.Itoa(900000+(i+i/fixtures)%flids)+"</FLID>"))
		hhmm := []byte(fmt.Sprintf("%02d%02d", (i/60)%24, i%60))
		msgs[i] = bodyTimeRE.ReplaceAllFunc(m, func(t []byte) []byte {
			out := append([]byte(nil), t[:8]...)
			out = append(out, hhmm...)
			return append(out, '<')
		})
	}
}

// seedFlights announces the workload's flights with one SCHD ADFT, processed
// outside the timing (the FLOPs of unknown flights would be skipped).
func seedFlights(ctx context.Context, db *store.DB, p *sis.Processor, flids int) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<MSG><META><SNDR>BENCH</SNDR><SEQN>1</SEQN><DTTM>20031215080000</DTTM><TYPE>SCHD</TYPE><STYP>ADFT</STYP></META><SCHD><RECS>%d</RECS>`, flids)
	for i := range flids {
		fmt.Fprintf(&b, `<FLTR><FLID>%d</FLID><ALCD>CA</ALCD><FLNO>CA%d</FLNO><MVIN>A</MVIN><SODT>15DEC031345</SODT></FLTR>`, 900000+i, 100+i)
	}
	b.WriteString(`</SCHD></MSG>`)
	d, err := p.Decode([]byte(b.String()))
	if err != nil {
		return err
	}
	msg := &inbox.Message{Stream: "seed", ID: 1, Attempt: 1, Identity: d.Identity, Kind: d.Kind, Decoded: d.Value, Now: time.Now()}
	return db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := p.Process(ctx, tx, msg, d.Value)
		return err
	})
}

// verifySIS checks that every message SUCCEEDED and that the msg events
// (one per message that changed its flight) were written in message order.
func verifySIS(ctx context.Context, db *store.DB, stream string, n int) error {
	counts, err := inbox.Counts(ctx, db, stream)
	if err != nil {
		return err
	}
	if counts[inbox.Succeeded] != n {
		return fmt.Errorf("%d of %d messages SUCCEEDED (%v)", counts[inbox.Succeeded], n, counts)
	}
	rows, err := db.Query(ctx, "SELECT event_id FROM msgx_outbox WHERE target = $1 ORDER BY id", sis.TargetMsg)
	if err != nil {
		return err
	}
	defer rows.Close()
	var prev int64
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		parts := strings.Split(id, ":")
		if len(parts) != 4 || parts[0] != stream {
			continue // the seeding ADFT's
		}
		m, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil {
			return fmt.Errorf("event id %q: %w", id, err)
		}
		if m <= prev {
			return fmt.Errorf("FIFO violated: event of message %d written after message %d", m, prev)
		}
		prev = m
	}
	return rows.Err()
}
