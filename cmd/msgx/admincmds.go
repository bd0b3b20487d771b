package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/pipeline/sis"
)

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "status", Short: "Streams (lease holder, head and its error, backlog, dead, mailbox readability), relay targets (pending, lag, dead, paused, last error) and readiness of a running service", Args: cobra.NoArgs}
	c := clientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var st admin.Status
		if err := c.call(cmd.Context(), "GET", "/v1/status", nil, nil, &st); err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if c.json {
			return printJSON(out, st)
		}
		return printStatus(out, st)
	}
	return cmd
}

// printStatus renders GET /v1/status for a reader in a hurry: one block of
// labelled lines per stream (a new field is one more line), a table of the
// relay targets and one of the readiness checks. Every absolute time has its
// age beside it, measured from the status's own time.
func printStatus(out io.Writer, st admin.Status) error {
	now := st.Time
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, s := range st.Streams {
		fmt.Fprintf(tw, "STREAM %s\n", s.Stream)
		line := func(label, format string, args ...any) {
			fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{label}, args...)...)
		}
		switch {
		case s.LeaseHolder == "":
			line("lease", "held by no instance: nothing pumps the stream")
		case s.LeaseExpires != nil && !s.LeaseExpires.After(now):
			line("lease", "last held by %s, expired %s: nothing pumps the stream", s.LeaseHolder, when(*s.LeaseExpires, now))
		default:
			this := ""
			if s.Leader {
				this = " (the instance answering)"
			}
			line("lease", "held by %s%s, until %s", s.LeaseHolder, this, when(*s.LeaseExpires, now))
		}
		if s.HeadID == 0 {
			line("head", "- (nothing unfinished)")
		} else {
			head := fmt.Sprintf("%d %s", s.HeadID, s.HeadStatus)
			if s.HeadReceived != nil {
				head += ", received " + when(*s.HeadReceived, now)
			}
			if s.HeadAttempts > 0 {
				head += fmt.Sprintf(", %d attempts", s.HeadAttempts)
			}
			if s.HeadBlocked > 0 {
				head += ", retried for " + roughly(secondsD(s.HeadBlocked))
			}
			line("head", "%s", head)
			if s.HeadClass != "" || s.HeadReason != "" {
				line("head error", "%s", reasonLine(s.HeadClass, s.HeadReason))
			}
		}
		line("backlog", "%d unfinished (%d failed, awaiting retry); %d dead", s.Backlog, s.Failed, s.Dead)
		if s.LastSuccess != nil {
			line("last success", "%s, by the instance answering", when(*s.LastSuccess, now))
		} else {
			line("last success", "- (none by the instance answering since it started)")
		}
		if s.MailboxUnreadable > 0 {
			line("mailbox", "unreadable for %s: %s", roughly(secondsD(s.MailboxUnreadable)), orDash(s.MailboxError))
		}
		line("watermark", "%d", s.Watermark)
		if s.GapFrom != 0 {
			line("gap", "waiting for id %d for %s; %d declared so far (%d ids skipped)", s.GapFrom, roughly(secondsD(s.GapOpen)), s.GapsSkipped, s.IDsSkipped)
		} else {
			line("gap", "- (%d declared so far, %d ids skipped)", s.GapsSkipped, s.IDsSkipped)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "TARGET\tRELAY\tPENDING\tLAG\tDEAD\tPAUSED\tLAST ERROR")
	for _, t := range st.Targets {
		paused := "no"
		if t.Paused && t.PausedSince != nil {
			paused = "since " + when(*t.PausedSince, now) + " (broker unavailable)"
		}
		lastErr := "-"
		if t.LastError != "" && t.LastErrorAt != nil {
			lastErr = when(*t.LastErrorAt, now) + " " + clip(t.LastError, 80)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", t.Target, targetState(t), t.Pending, ago(t.Lag), t.Dead, paused, lastErr)
	}
	fmt.Fprintln(tw)
	printWAL(tw, st)
	printBlocked(tw, st)
	fmt.Fprintln(tw, "CHECK\tOK\tERROR")
	for _, ch := range st.Checks {
		fmt.Fprintf(tw, "%s\t%v\t%s\n", ch.Name, ch.OK, orDash(ch.Error))
	}
	return tw.Flush()
}

// printBlocked lists the keys of per-key targets held by a DEAD event (the
// first admin.BlockedShown of each target), when there are any.
func printBlocked(tw io.Writer, st admin.Status) {
	shown := false
	for _, t := range st.Targets {
		if t.BlockedKeys == 0 {
			continue
		}
		if !shown {
			fmt.Fprintln(tw, "BLOCKED KEY\tTARGET\tHELD BY (DEAD)\tDEAD SINCE\tWAITING")
			shown = true
		}
		for _, b := range t.Blocked {
			since := "-"
			if b.DeadAt != nil {
				since = when(*b.DeadAt, st.Time)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", clip(b.Key, 40), t.Target, b.EventID, since, b.Waiting)
		}
		if more := t.BlockedKeys - int64(len(t.Blocked)); more > 0 {
			fmt.Fprintf(tw, "(%d more)\t%s\t\t\t\n", more, t.Target)
		}
	}
	if shown {
		fmt.Fprintln(tw, "(msgx replay --source outbox --ids … sends the dead event first, then the waiting ones; msgx skip --ids … lets them go without it)")
		fmt.Fprintln(tw)
	}
}

// targetState says whether a relay of the instance answering serves the
// target (whether it has it paused is the PAUSED column).
func targetState(t admin.TargetStatus) string {
	if !t.Relayed {
		return "NO RELAY (relay.targets lacks it)"
	}
	return "relayed"
}

// reasonLine is a failure's class and reason with the class said once,
// whether or not the stored reason starts with it.
func reasonLine(class, reason string) string {
	switch {
	case class == "":
		return clip(reason, 200)
	case reason == "":
		return class
	case strings.HasPrefix(reason, class+": "):
		return clip(reason, 200)
	}
	return clip(class+": "+reason, 200)
}

// when is t in UTC with how long ago (or how soon) it is from now:
// "2026-12-06T06:20:01Z (4 min ago)".
func when(t, now time.Time) string {
	abs := t.UTC().Format(time.RFC3339)
	if d := now.Sub(t); d < 0 {
		return abs + " (in " + roughly(-d) + ")"
	}
	return abs + " (" + roughly(now.Sub(t)) + " ago)"
}

// roughly is a duration as an operator reads it at a glance: "12 s",
// "4 min", "2 h 5 min", "3 d 4 h".
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d d %d h", int(d.Hours())/24, int(d.Hours())%24)
}

func secondsD(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }

func newDeadCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dead", Short: "Dead letters of the inbox streams and the relay targets"}
	c := clientFlags(cmd)
	var source, stream, class, target string
	var limit, after int
	list := &cobra.Command{
		Use: "list", Short: "List FAILED/DEAD inbox messages and DEAD outbox events", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			for k, v := range map[string]string{"source": source, "stream": stream, "class": class, "target": target} {
				if v != "" {
					q.Set(k, v)
				}
			}
			q.Set("limit", strconv.Itoa(limit))
			q.Set("after", strconv.Itoa(after))
			var dl admin.DeadList
			if err := c.call(cmd.Context(), "GET", "/v1/dead", q, nil, &dl); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if c.json {
				return printJSON(out, dl)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			if source != "outbox" {
				fmt.Fprintln(tw, "STREAM\tID\tSTATUS\tCLASS\tREPLAYABLE\tATTEMPTS\tRECEIVED\tREASON")
				for _, d := range dl.Inbox {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%v\t%d\t%s\t%s\n", d.Stream, d.ID, d.Status, d.Class, d.Replayable, d.Attempts,
						d.ReceivedAt.Format(time.RFC3339), clip(d.Reason, 80))
				}
				fmt.Fprintf(tw, "(%d inbox messages)\n\n", len(dl.Inbox))
			}
			if source != "inbox" {
				fmt.Fprintln(tw, "TARGET\tEVENT\tTOPIC\tKEY\tATTEMPTS\tDEAD AT\tLAST ERROR")
				for _, e := range dl.Outbox {
					at := "-"
					if e.DoneAt != nil {
						at = e.DoneAt.Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.Target, e.EventID, e.Topic, e.Key, e.Attempts, at, clip(e.LastError, 80))
				}
				fmt.Fprintf(tw, "(%d outbox events)\n", len(dl.Outbox))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&source, "source", "", "inbox or outbox (default both)")
	list.Flags().StringVar(&stream, "stream", "", "only this stream")
	list.Flags().StringVar(&class, "class", "", "only this failure class (inbox)")
	list.Flags().StringVar(&target, "target", "", "only this relay target (outbox)")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many per stream and target")
	list.Flags().IntVar(&after, "after", 0, "start after this id (inbox message id or outbox row id), for paging")

	show := &cobra.Command{
		Use:   "show (inbox STREAM ID | outbox EVENT_ID)",
		Short: "One dead letter with its reason and history",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			switch {
			case args[0] == "inbox" && len(args) == 3:
				var d admin.DeadDetail
				if err := c.call(cmd.Context(), "GET", "/v1/dead/inbox/"+url.PathEscape(args[1])+"/"+url.PathEscape(args[2]), nil, nil, &d); err != nil {
					return err
				}
				if c.json {
					return printJSON(out, d)
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintf(tw, "stream\t%s\nid\t%d\nstatus\t%s\nclass\t%s\nreplayable\t%v\nattempts\t%d\nkind\t%s\nidentity\t%s\nreceived\t%s\nreason\t%s\n",
					d.Stream, d.ID, d.Status, orDash(d.Class), d.Replayable, d.Attempts, orDash(d.Kind), orDash(d.Identity), d.ReceivedAt.Format(time.RFC3339), orDash(d.Reason))
				fmt.Fprintln(tw, "\nATTEMPT\tAT\tCLASS\tREASON")
				for _, h := range d.History {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", h.Attempt, h.At.Format(time.RFC3339), h.Class, h.Reason)
				}
				return tw.Flush()
			case args[0] == "outbox" && len(args) == 2:
				var e admin.DeadEvent
				if err := c.call(cmd.Context(), "GET", "/v1/dead/outbox/"+url.PathEscape(args[1]), nil, nil, &e); err != nil {
					return err
				}
				if c.json {
					return printJSON(out, e)
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintf(tw, "event\t%s\ntarget\t%s\ntopic\t%s\nkey\t%s\nstatus\t%s\nattempts\t%d\ncreated\t%s\nlast error\t%s\n",
					e.EventID, e.Target, e.Topic, e.Key, e.Status, e.Attempts, e.CreatedAt.Format(time.RFC3339), orDash(e.LastError))
				return tw.Flush()
			}
			return fmt.Errorf("usage: msgx dead show inbox STREAM ID | msgx dead show outbox EVENT_ID")
		},
	}
	cmd.AddCommand(list, show)
	return cmd
}

// replayChunk bounds the ids of one replay request, so a long list shows
// progress and each transaction stays short.
const replayChunk = 500

func newReplayCmd() *cobra.Command {
	var req admin.ReplayRequest
	var ids string
	var yes bool
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay dead letters by class (inbox), target (outbox) or ids: a dry run first, --yes to carry it out (audited)",
		Example: `  msgx replay --stream sis --class INFRA --reason "database back"            # dry run
  msgx replay --stream sis --class INFRA --reason "database back" --yes      # replay
  msgx replay --source outbox --target kafka:msg --reason "topic created" --yes
  msgx replay --source outbox --ids 3f2a…,9c1b… --reason "consumer fixed" --yes`,
		Args: cobra.NoArgs,
	}
	c := clientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		out := cmd.OutOrStdout()
		for _, id := range strings.Split(ids, ",") {
			if id = strings.TrimSpace(id); id != "" {
				req.IDs = append(req.IDs, id)
			}
		}
		// The dry run, always.
		preview := req
		preview.DryRun = true
		var dry admin.ReplayResult
		if err := c.call(cmd.Context(), "POST", "/v1/replay", nil, preview, &dry); err != nil {
			return err
		}
		if !yes || len(dry.Replayed) == 0 {
			if c.json {
				if err := printJSON(out, dry); err != nil {
					return err
				}
			} else {
				printReplay(out, req, dry, "would be replayed")
				if len(dry.Replayed) > 0 {
					fmt.Fprintln(out, "dry run: nothing changed; add --yes to replay")
				}
			}
			return refusedError(dry)
		}
		total := admin.ReplayResult{Source: req.Source, Replayed: []string{}, Refused: map[string]string{}}
		for k, v := range dry.Refused {
			total.Refused[k] = v
		}
		// Replay exactly what the dry run showed, in chunks with progress.
		todo := dry.Replayed
		for start := 0; start < len(todo); start += replayChunk {
			part := req
			part.Class, part.Target, part.IDs = "", "", todo[start:min(start+replayChunk, len(todo))]
			var res admin.ReplayResult
			if err := c.call(cmd.Context(), "POST", "/v1/replay", nil, part, &res); err != nil {
				return fmt.Errorf("after %d of %d replayed: %w", len(total.Replayed), len(todo), err)
			}
			total.Replayed = append(total.Replayed, res.Replayed...)
			for k, v := range res.Refused {
				total.Refused[k] = v
			}
			if !c.json {
				fmt.Fprintf(cmd.ErrOrStderr(), "replayed %d/%d\n", len(total.Replayed), len(todo))
			}
		}
		if c.json {
			if err := printJSON(out, total); err != nil {
				return err
			}
		} else {
			printReplay(out, req, total, "replayed")
		}
		return refusedError(total)
	}
	f := cmd.Flags()
	f.StringVar(&req.Source, "source", "inbox", "inbox or outbox")
	f.StringVar(&req.Stream, "stream", "", "inbox stream")
	f.StringVar(&req.Class, "class", "", "inbox failure class: CODEC_ERROR, UNSUPPORTED, INFRA, EXHAUSTED or LATE")
	f.StringVar(&req.Target, "target", "", "relay target (outbox): every dead event of it")
	f.StringVar(&ids, "ids", "", "comma-separated message ids (inbox) or event ids (outbox)")
	f.StringVar(&req.Reason, "reason", "", "why (required; audited)")
	f.IntVar(&req.Limit, "limit", 10000, "at most this many by class or target")
	f.BoolVar(&yes, "yes", false, "carry the replay out (without it: dry run only)")
	return cmd
}

// refusedError makes the command fail (exit status 1) when any id was
// refused, so that a script replaying a list learns that part of it was not.
func refusedError(r admin.ReplayResult) error {
	if len(r.Refused) == 0 {
		return nil
	}
	if r.DryRun {
		return fmt.Errorf("%d of the selected ids refused (listed above); the others would be replayed", len(r.Refused))
	}
	return fmt.Errorf("%d of the selected ids refused (listed above); the others were replayed", len(r.Refused))
}

func printReplay(w io.Writer, req admin.ReplayRequest, r admin.ReplayResult, verb string) {
	if len(r.Replayed) == 0 {
		fmt.Fprintf(w, "nothing to replay: %s\n", selection(req))
	} else {
		fmt.Fprintf(w, "%d %s: %s\n", len(r.Replayed), verb, clip(strings.Join(r.Replayed, ", "), 400))
	}
	keys := make([]string, 0, len(r.Refused))
	for k := range r.Refused {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "refused %s: %s\n", k, r.Refused[k])
	}
	for _, k := range slices.Sorted(maps.Keys(r.Warnings)) {
		fmt.Fprintf(w, "warning %s: %s\n", k, r.Warnings[k])
	}
	printWaiting(w, r.Waiting, "sent after it, in order")
}

// printWaiting says how many events of its key wait behind each DEAD event
// of a per-key target (only those with any).
func printWaiting(w io.Writer, waiting map[string]int64, then string) {
	for _, k := range slices.Sorted(maps.Keys(waiting)) {
		if n := waiting[k]; n > 0 {
			fmt.Fprintf(w, "waiting behind %s: %d events of its key (%s)\n", k, n, then)
		}
	}
}

func newSkipCmd() *cobra.Command {
	var req admin.SkipRequest
	var ids string
	var yes bool
	cmd := &cobra.Command{
		Use:   "skip",
		Short: "Let the events waiting behind DEAD outbox events of per-key targets go without them: a dry run first, --yes to carry it out (audited; the skipped events stay DEAD)",
		Example: `  msgx skip --ids 3f2a…,9c1b… --reason "payload cannot be fixed"          # dry run
  msgx skip --ids 3f2a…,9c1b… --reason "payload cannot be fixed" --yes`,
		Args: cobra.NoArgs,
	}
	c := clientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		out := cmd.OutOrStdout()
		for _, id := range strings.Split(ids, ",") {
			if id = strings.TrimSpace(id); id != "" {
				req.IDs = append(req.IDs, id)
			}
		}
		req.DryRun = !yes
		var res admin.SkipResult
		if err := c.call(cmd.Context(), "POST", "/v1/skip", nil, req, &res); err != nil {
			return err
		}
		if c.json {
			if err := printJSON(out, res); err != nil {
				return err
			}
		} else {
			verb, then := "skipped", "sent now, in order"
			if res.DryRun {
				verb, then = "would be skipped", "would be sent, in order"
			}
			if len(res.Skipped) == 0 {
				fmt.Fprintf(out, "nothing to skip: none of the %d ids given is a DEAD event not skipped yet\n", len(req.IDs))
			} else {
				fmt.Fprintf(out, "%d %s (they stay DEAD, marked skipped): %s\n", len(res.Skipped), verb, clip(strings.Join(res.Skipped, ", "), 400))
			}
			for _, k := range slices.Sorted(maps.Keys(res.Refused)) {
				fmt.Fprintf(out, "refused %s: %s\n", k, res.Refused[k])
			}
			printWaiting(out, res.Waiting, then)
			if res.DryRun && len(res.Skipped) > 0 {
				fmt.Fprintln(out, "dry run: nothing changed; add --yes to skip")
			}
		}
		if len(res.Refused) > 0 {
			return fmt.Errorf("%d of the selected ids refused (listed above)", len(res.Refused))
		}
		return nil
	}
	f := cmd.Flags()
	f.StringVar(&ids, "ids", "", "comma-separated DEAD outbox event ids")
	f.StringVar(&req.Reason, "reason", "", "why (required; audited)")
	f.BoolVar(&yes, "yes", false, "carry the skip out (without it: dry run only)")
	return cmd
}

// selection says in words what a replay request selected, for "nothing to
// replay: …".
func selection(req admin.ReplayRequest) string {
	var what string
	switch {
	case len(req.IDs) > 0:
		what = fmt.Sprintf("none of the %d ids given is replayable", len(req.IDs))
	case req.Source == "outbox" && req.Target != "":
		what = fmt.Sprintf("no DEAD outbox event of target %s", req.Target)
	case req.Source == "outbox":
		what = "no DEAD outbox event matches"
	case req.Class != "":
		what = fmt.Sprintf("no replayable FAILED or DEAD message of class %s", strings.ToUpper(req.Class))
	default:
		what = "no replayable FAILED or DEAD message"
	}
	if req.Source != "outbox" && req.Stream != "" && len(req.IDs) == 0 {
		what += " in stream " + req.Stream
	}
	return what
}

// newQueryCmd is a command printing a registered admin query (requests,
// flights) as a table, or its JSON with --json. print renders the answer.
func newQueryCmd(name, short string, print func(out io.Writer, raw json.RawMessage, now time.Time) error) *cobra.Command {
	var params []string
	cmd := &cobra.Command{Use: name, Short: short, Args: cobra.NoArgs}
	c := clientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		q := url.Values{}
		for _, p := range params {
			k, v, ok := strings.Cut(p, "=")
			if !ok {
				return fmt.Errorf("--param %q: want key=value", p)
			}
			q.Add(k, v)
		}
		var raw json.RawMessage
		if err := c.call(cmd.Context(), "GET", "/v1/"+name, q, nil, &raw); err != nil {
			return err
		}
		if c.json {
			_, err := cmd.OutOrStdout().Write(raw)
			return err
		}
		return print(cmd.OutOrStdout(), raw, time.Now())
	}
	cmd.Flags().StringArrayVar(&params, "param", nil, "query parameter key=value (repeatable)")
	return cmd
}

// printFlights renders GET /v1/flights: one line per flight.
func printFlights(out io.Writer, raw json.RawMessage, _ time.Time) error {
	var page sis.FlightPage
	if err := json.Unmarshal(raw, &page); err != nil {
		return fmt.Errorf("the flight query's answer: %w", err)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FLID\tDAY\tSTATUS\tFLNO\tVERSION\tLAST MSG")
	for _, f := range page.Flights {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", f.FLID, orDash(f.OperationDay), f.Status, orDash(f.Fields["FLNO"]), f.StateVersion, f.LastMsgID)
	}
	fmt.Fprintf(tw, "(%d flights)\n", len(page.Flights))
	if page.Next != "" {
		fmt.Fprintf(tw, "next page: --param after=%s\n", page.Next)
	}
	return tw.Flush()
}

// printRequests renders GET /v1/requests: one line per request, newest
// first, its times with their ages.
func printRequests(out io.Writer, raw json.RawMessage, now time.Time) error {
	var page struct {
		Requests []sis.Request `json:"requests"`
		Next     int64         `json:"next"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return fmt.Errorf("the requests query's answer: %w", err)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tANSWER\tSTATUS\tREGISTERED\tEXPIRES\tREASON")
	for _, r := range page.Requests {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Kind, orDash(r.AnswerType), r.Status, when(r.RegisteredAt, now),
			when(r.ExpiresAt, now), orDash(clip(r.Reason, 80)))
	}
	fmt.Fprintf(tw, "(%d requests)\n", len(page.Requests))
	if page.Next != 0 {
		fmt.Fprintf(tw, "next page: --param before=%d\n", page.Next)
	}
	return tw.Flush()
}

func newBackfillCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "backfill", Short: "The processed marks written back to the mailboxes"}
	c := clientFlags(cmd)
	cmd.AddCommand(&cobra.Command{
		Use: "status", Short: "Per stream: marks pending, overdue and failing", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var bs []admin.BackfillStatus
			if err := c.call(cmd.Context(), "GET", "/v1/backfill", nil, nil, &bs); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if c.json {
				return printJSON(out, bs)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "STREAM\tPENDING\tOVERDUE\tFAILING\tOLDEST RECEIVED")
			for _, b := range bs {
				oldest := "-"
				if b.Oldest != nil {
					oldest = b.Oldest.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", b.Stream, b.Pending, b.Overdue, b.Failing, oldest)
			}
			return tw.Flush()
		},
	})
	return cmd
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
