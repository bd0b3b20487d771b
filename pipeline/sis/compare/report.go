package compare

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText writes the report for a reader: each differing flight with
// its differences (incumbent value, then msgx's; "-" for absent), the
// flights only one side has, and the summary.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range r.Flights {
		fmt.Fprintf(tw, "flight %s %s (incumbent row %d) differs:\n", f.FLID, f.OperationDay, f.Row)
		fmt.Fprintf(tw, "  \tincumbent\tmsgx\n")
		for _, d := range f.Fields {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", named(d.Name, d.Label), show(d.Incumbent), show(d.Msgx))
		}
		for _, d := range f.Collections {
			what := named(d.Name, d.Label) + " " + d.Item
			in, ms := show(d.Incumbent), show(d.Msgx)
			if d.Child != "" {
				what += " " + d.Child
			} else {
				// A whole item, as its JSON.
				in, ms = showRaw(d.Incumbent), showRaw(d.Msgx)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", what, in, ms)
		}
	}
	for _, f := range r.OnlyIncumbent {
		fmt.Fprintf(tw, "flight %s %s (incumbent row %d) is only in the incumbent%s\n", f.FLID, f.OperationDay, f.Row, other(f.OtherDay, "msgx"))
	}
	for _, f := range r.OnlyMsgx {
		fmt.Fprintf(tw, "flight %s %s is only in msgx%s\n", f.FLID, f.OperationDay, other(f.OtherDay, "the incumbent"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := r.Summary
	days := "all operation days"
	switch {
	case s.From != "" && s.To != "":
		days = "operation days " + s.From + " to " + s.To
	case s.From != "":
		days = "operation days from " + s.From
	case s.To != "":
		days = "operation days up to " + s.To
	}
	verdict := "EQUAL"
	if !r.Equal() {
		verdict = "DIFFERENT"
	}
	_, err := fmt.Fprintf(w, `%s: %d flights of the incumbent, %d of msgx (%s): %d on both sides, %d equal, %d differ (%d field and %d collection differences); %d only in the incumbent, %d only in msgx
fields compared: %s
collections compared: %s
`, verdict, s.Incumbent, s.Msgx, days, s.Matched, s.Equal, s.Differing, s.FieldDiffs, s.CollectionDiffs,
		s.OnlyIncumbent, s.OnlyMsgx, list(s.Fields), list(s.Collections))
	if err == nil && s.DeletedLeftOut > 0 {
		_, err = fmt.Fprintf(w, "msgx's DELETED flights left out (the mapping has no STATUS column): %d\n", s.DeletedLeftOut)
	}
	return err
}

func named(name, label string) string {
	if label == "" {
		return name
	}
	return name + " (" + label + ")"
}

// show quotes a value so that white space shows; "-" for absent.
func show(v *string) string {
	if v == nil {
		return "-"
	}
	return strconv.Quote(*v)
}

func showRaw(v *string) string {
	if v == nil {
		return "-"
	}
	return *v
}

func other(day, side string) string {
	if day == "" {
		return ""
	}
	return " (" + side + " has it on " + day + ")"
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}
