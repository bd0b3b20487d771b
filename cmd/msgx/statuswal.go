package main

import (
	"fmt"
	"io"

	"github.com/msgx/msgx/admin"
)

// printWAL shows the WAL relay's slot (outbox.mode wal): who streams from
// it, how far it has confirmed, and the WAL it holds on the server.
func printWAL(tw io.Writer, st admin.Status) {
	w := st.WAL
	if w == nil {
		return
	}
	holder := "another instance"
	switch {
	case w.Holder:
		holder = "this instance"
	case !w.Active:
		holder = "NONE (nothing streams the events)"
	}
	state := "streaming"
	switch {
	case w.Invalidated:
		state = "INVALIDATED: events were lost with its WAL (docs/outbox.md)"
	case w.Paused:
		state = "paused: a broker is unavailable"
	}
	fmt.Fprintln(tw, "WAL SLOT\tHOLDER\tCONFIRMED\tLAG\tRETAINED\tSTATE")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n\n", w.Slot, holder, orDash(w.Confirmed), bytesOf(w.LagBytes), bytesOf(w.RetainedBytes), state)
}

func bytesOf(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
