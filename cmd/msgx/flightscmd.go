package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/pipeline/sis"
)

// newFlightsCmd is `msgx flights` (the flight query) with its subcommand
// `msgx flights history FLID`.
func newFlightsCmd() *cobra.Command {
	cmd := newQueryCmd("flights", "The flight query of the SIS pipeline: a table, or --json", printFlights)
	cmd.AddCommand(newFlightHistoryCmd())
	return cmd
}

// newFlightHistoryCmd prints a flight's versions: which message made each,
// what it changed and the events it produced.
func newFlightHistoryCmd() *cobra.Command {
	var (
		limit  int
		before int64
	)
	cmd := &cobra.Command{
		Use:   "history FLID",
		Short: "A flight's versions, newest first: the message of each (stream/id, SEQN, TYPE/STYP, SNDR), what it changed (before → after) and its events",
		Args:  cobra.ExactArgs(1),
	}
	c := clientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if before > 0 {
			q.Set("before", strconv.FormatInt(before, 10))
		}
		var raw json.RawMessage
		if err := c.call(cmd.Context(), "GET", "/v1/flights/"+url.PathEscape(args[0])+"/history", q, nil, &raw); err != nil {
			return err
		}
		if c.json {
			_, err := cmd.OutOrStdout().Write(raw)
			return err
		}
		return printFlightHistory(cmd.OutOrStdout(), raw, time.Now())
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "versions per page (1 to 1000)")
	cmd.Flags().Int64Var(&before, "before", 0, "show the versions before this one (the previous page's next)")
	return cmd
}

// printFlightHistory renders GET /v1/flights/{flid}/history: per version a
// head line, then one line per change and the events.
func printFlightHistory(out io.Writer, raw json.RawMessage, now time.Time) error {
	var page sis.FlightHistoryPage
	if err := json.Unmarshal(raw, &page); err != nil {
		return fmt.Errorf("the flight history's answer: %w", err)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATUS\tAT\tMESSAGE\tSEQN\tKIND\tSNDR")
	for _, v := range page.Versions {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s/%d\t%d\t%s/%s\t%s\n", v.Version, v.Status, when(v.At, now), v.Stream, v.MsgID, v.SEQN,
			v.TYPE, orDash(v.STYP), orDash(v.SNDR))
		if s := v.Changes.Status; s != nil {
			fmt.Fprintf(tw, "\t  status\t%s → %s\n", orDash(s.Before), s.After)
		}
		for _, f := range v.Changes.Fields {
			fmt.Fprintf(tw, "\t  %s\t%s → %s\n", f.Name, orDash(f.Before), orDash(f.After))
		}
		for _, c := range v.Changes.Collections {
			fmt.Fprintf(tw, "\t  %s\t%s → %s\n", c.Name, items(c.Before), items(c.After))
		}
		var evs []string
		for _, e := range v.Events {
			evs = append(evs, e.ID+" ("+e.Type+")")
		}
		fmt.Fprintf(tw, "\t  events\t%s\n", orDash(strings.Join(evs, ", ")))
	}
	if len(page.Versions) == 0 {
		fmt.Fprintf(tw, "(no versions of flight %s: unknown, or moved to history by the sweep)\n", page.FLID)
	} else {
		fmt.Fprintf(tw, "(%d versions of flight %s)\n", len(page.Versions), page.FLID)
	}
	if page.Next != 0 {
		fmt.Fprintf(tw, "next page: --before %d\n", page.Next)
	}
	return tw.Flush()
}

// items is a collection as a line reads it: its items' JSON, clipped
// (--json has them whole); "-" for none.
func items(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "-"
	}
	return clip(string(raw), 160)
}
