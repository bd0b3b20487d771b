package console

import (
	"net/url"
	"time"

	g "maragu.dev/gomponents"

	"github.com/msgx/msgx/pipeline/sis"
)

// The flight search, one flight, its raw JSON and its history.

// flightSearch is the flight search as the form sent it.
type flightSearch struct {
	FLID, FLNO, Day, Status string
}

// flightsView is the flight search page: the search and its answer (a
// page of flights and the query of the next), or why there is none.
type flightsView struct {
	Q flightSearch
	noAnswer
	Flights []flightRow
	Next    url.Values
}

func flightsPage(d flightsView) page {
	q := d.Q
	status := func(value string) g.Node {
		return el("option", attr("value", value), g.If(q.Status == value, attr("selected")), text(value))
	}
	var searchFor g.Node
	if q != (flightSearch{}) {
		searchFor = el("p", class("muted"), attr("id", "search-for"), text("Flights"),
			g.If(q.FLID != "", text(" with FLID "+q.FLID)),
			g.If(q.FLNO != "", text(" with flight number "+q.FLNO)),
			g.If(q.Day != "", text(" on "+q.Day)),
			g.If(q.Status != "", text(", "+q.Status)),
			text(":"))
	}
	var answer g.Node
	if d.Unavailable == "" && d.Error == "" {
		answer = g.Group{
			el("table", attr("id", "flights"),
				heads(th("FLID"), th("Flight number"), th("Operation day"), th("Movement"), th("Scheduled"), th("Status"), thNum("Version")),
				rows(d.Flights, 7, "No flight matches.", func(f flightRow) g.Node {
					return el("tr", el("td", el("a", href(to("flights", f.FLID)), text(f.FLID))), td(f.FLNO), el("td", class("nowrap"), text(f.Day)), td(f.Movement),
						el("td", class("nowrap"), text(f.SODT)), el("td", statusBadge(f.Status)), tdNum(text(itoa(f.Version))))
				}),
			),
			g.If(d.Next != nil, el("p", el("a", href(to("flights").with(d.Next)), attr("id", "next-page"), text("Next page →")))),
		}
	}
	return page{Title: "Flights", In: inFlights, Main: g.Group{
		el("h1", text("Flights")),
		el("p", text("Find a flight, then open it: its fields and collections, and every version with the message that made it.")),
		el("form", attr("method", "get"), action(to("flights")), class("filters"), attr("id", "flight-search"),
			el("label", text("FLID "), el("input", attr("type", "text"), attr("name", "flid"), attr("value", q.FLID), attr("placeholder", "15 or 15,16"))),
			el("label", text("Flight number "), el("input", attr("type", "text"), attr("name", "flno"), attr("value", q.FLNO), attr("placeholder", "YG9028"))),
			el("label", text("Operation day "), el("input", attr("type", "date"), attr("name", "day"), attr("value", q.Day))),
			el("label", text("Status "), el("select", attr("name", "status"), el("option", attr("value", ""), text("any")), status("ACTIVE"), status("DELETED"))),
			el("button", attr("type", "submit"), text("Find")),
		),
		searchFor,
		unavailable(d.Unavailable),
		alert(d.Error),
		answer,
	}}
}

// statusBadge is a flight's or a version's status.
func statusBadge(status string) g.Node {
	return el("span", class("status status-"+status), text(status))
}

// flightView is one flight: its fields labelled, its collections as tables.
type flightView struct {
	F           sis.SchdEvent
	Fields      []labelled
	Collections []collTable
}

func flightPage(d flightView) page {
	f := d.F
	return page{Title: "Flight " + f.FLID, In: inFlights, Main: g.Group{
		el("p", el("a", href(to("flights")), text("← flights"))),
		el("h1", text("Flight "+f.FLID+" "), muted(f.Fields["FLNO"])),
		el("section", class("card"),
			el("dl", class("facts"), attr("id", "identity"),
				fact("FLID", text(f.FLID)),
				fact("Flight number", text(f.Fields["FLNO"])),
				fact("Operation day", text(f.OperationDay)),
				fact("Movement", text(f.Fields["MVIN"])),
				fact("Status", el("b", attr("id", "flight-status"), class("status status-"+f.Status), text(f.Status))),
				g.Group{el("dt", text("Version")), el("dd", attr("id", "flight-version"), text(itoa(f.StateVersion)))},
				fact("Last message", text(itoa(f.LastMsgID))),
			),
			el("p", el("a", class("button primary"), attr("id", "history-link"), href(to("flights", f.FLID, "history")), text("History: every version and its message")),
				text(" "), el("a", href(to("flights", f.FLID, "json")), attr("id", "json-link"), text("Raw JSON"))),
		),
		el("section",
			el("h2", text("Fields")),
			el("table", attr("id", "fields"),
				heads(th("SIS name"), th("Field"), th("Value")),
				rows(d.Fields, 3, "No field.", func(l labelled) g.Node {
					return el("tr", attr("data-field", l.Name), el("td", el("code", text(l.Name))), el("td", orMuted(l.Label, "unknown to msgx, kept as sent")),
						el("td", class("value"), text(l.Value)))
				}),
			),
		),
		g.Map(d.Collections, func(t collTable) g.Node {
			title := t.Label
			if title == "" {
				title = "Kept as sent"
			}
			return el("section",
				el("h2", attr("id", "coll-"+t.Name), text(title+" "), el("span", class("muted"), el("code", text(t.Name)), text(", "+itoa(len(t.Rows))+" item(s)"))),
				collectionTable(t),
			)
		}),
		g.If(len(d.Collections) == 0, el("p", class("muted"), text("No collection."))),
	}}
}

// collectionTable is a collection as a table, each column headed by its
// label and SIS name.
func collectionTable(t collTable) g.Node {
	return el("table", class("collection"), attr("data-collection", t.Name),
		el("thead", el("tr", g.Map(t.Cols, func(c labelled) g.Node {
			if c.Label == "" {
				return el("th", attr("title", c.Name), text(c.Name))
			}
			return el("th", attr("title", c.Name), text(c.Label+" "), muted(c.Name))
		}))),
		el("tbody", g.Map(t.Rows, func(r []string) g.Node { return el("tr", g.Map(r, td)) })),
	)
}

// flightJSONPage is a flight as the query API answers it.
func flightJSONPage(flid, js string) page {
	return page{Title: "Flight " + flid + " as JSON", In: inFlights, Main: g.Group{
		el("p", el("a", href(to("flights", flid)), text("← flight "+flid))),
		el("h1", text("Flight "+flid+" "), muted("as the query API answers it")),
		el("pre", class("payload"), attr("id", "flight-json"), text(js)),
	}}
}

// historyView is a page of a flight's versions, newest first; Next is the
// version before which the next page starts (0: this is the last).
type historyView struct {
	FLID     string
	Versions []versionView
	Next     int64
	Now      time.Time
}

func historyPage(d historyView) page {
	return page{Title: "History of flight " + d.FLID, In: inFlights, Main: g.Group{
		el("p", el("a", href(to("flights", d.FLID)), text("← flight "+d.FLID))),
		el("h1", text("History of flight "+d.FLID)),
		el("p", text("Every version, newest first: the message that made it, what it changed (before → after) and the events it produced.")),
		versions(d.Versions, d.Now, false),
		g.If(d.Next != 0, el("p", el("a", href(to("flights", d.FLID, "history").with(url.Values{"before": {itoa(d.Next)}})), text("Older versions →")))),
	}}
}

// versions shows flight versions: on a message's page (effects) each
// names its flight, on a flight's history only its number.
func versions(vs []versionView, now time.Time, effects bool) g.Node {
	if len(vs) == 0 {
		none := "No version recorded: the flight is unknown, or the history sweep moved it."
		if effects {
			none = "No flight changed by this message (or its flights were moved to history)."
		}
		return el("p", class("empty"), text(none))
	}
	return g.Map(vs, func(v versionView) g.Node { return version(v, now, effects) })
}

func version(v versionView, now time.Time, effects bool) g.Node {
	n := itoa(v.Number)
	title := text("Version " + n)
	if effects {
		title = g.Group{text("Flight "), el("a", href(to("flights", v.FLID)), text(v.FLID)), text(", version " + n)}
	}
	kind := v.TYPE
	if v.STYP != "" {
		kind += "/" + v.STYP
	}
	msg := v.Stream + "/" + itoa(v.MsgID)
	var status g.Node
	if st := v.Changes.Status; st != nil {
		status = el("p", text("Status: "), orMuted(st.Before, "new flight"), text(" → "), el("b", text(st.After)))
	}
	var fields g.Node
	if len(v.Fields) > 0 {
		fields = el("table", class("changes"),
			heads(th("SIS name"), th("Field"), th("Before"), th("After")),
			el("tbody", g.Map(v.Fields, func(f fieldChange) g.Node {
				return el("tr", attr("data-field", f.Name), el("td", el("code", text(f.Name))), td(f.Label), el("td", orMuted(f.Before, "—")), el("td", orMuted(f.After, "cleared")))
			})),
		)
	}
	events := g.Group{text("Events: ")}
	for i, e := range v.Events {
		if i > 0 {
			events = append(events, text(", "))
		}
		events = append(events, el("code", text(e.ID)), text(" ("+e.Type+" on "+e.Topic+")"))
	}
	return el("section", class("card version"), attr("id", "v"+v.FLID+"-"+n), attr("data-version", n),
		el("h2", title, text(" "), statusBadge(v.Status)),
		el("p", class("muted"), text(when(v.At)+" ("+ago(v.At, now)+") · message "), el("a", class("msg-link"), href(to("messages", v.Stream, itoa(v.MsgID))), text(msg)),
			text(" · SEQN "+itoa(v.SEQN)+" · "+kind+" · from "+v.SNDR)),
		status,
		fields,
		g.Map(v.Collections, collectionChange),
		el("p", class("muted"), events),
	)
}

// collectionChange is a collection before and after, side by side.
func collectionChange(c collChange) g.Node {
	title := c.Label
	if title == "" {
		title = c.Name
	}
	side := func(name string, t *collTable, none string) g.Node {
		body := el("p", class("muted"), text(none))
		if t != nil {
			body = collectionTable(*t)
		}
		return el("div", el("p", class("muted"), text(name)), body)
	}
	return el("div", class("collchange"), attr("data-collection", c.Name),
		el("h3", text(title+" "), el("span", class("muted"), el("code", text(c.Name)))),
		el("div", class("cols"), side("Before", c.Before, "none"), side("After", c.After, "none (cleared)")),
	)
}
