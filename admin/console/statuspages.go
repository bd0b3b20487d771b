package console

import (
	"net/url"
	"time"

	g "maragu.dev/gomponents"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/outbox"
)

// The overview, the mailbox gaps and the requests query.

// overviewView is the state the overview shows.
type overviewView struct {
	Status          admin.Status
	Brokers, Checks []admin.CheckResult
	Ready           bool
	Charts          []chart
}

func overviewPage(d overviewView) page {
	return page{Title: "Overview", In: inOverview, Main: el("div",
		attr("data-refresh", string(to("fragment/overview"))), attr("data-every", "15000"),
		overviewBody(d),
	)}
}

// overviewBody is the part of the overview its script refreshes.
func overviewBody(d overviewView) g.Node {
	now := d.Status.Time
	ready := el("span", class("bad"), text("NOT READY"))
	if d.Ready {
		ready = el("span", class("ok"), text("ready"))
	}
	return g.Group{
		el("p", class("stamp"), text("State at "+when(now)+" · refreshes every 15 s · "), ready),
		el("section",
			el("h2", text("Streams")),
			el("table",
				heads(th("Stream"), th("Lease holder"), thNum("Head id"), th("Head age"), th("Head state"), thNum("Backlog"),
					thNum("Failed"), thNum("Dead"), th("Last success"), th("Mailbox gap")),
				rows(d.Status.Streams, 10, "No stream runs in this service.", func(st admin.StreamStatus) g.Node { return streamRow(st, now) }),
			),
		),
		el("section",
			el("h2", text("Relay lanes")),
			el("table",
				heads(th("Target"), th("State"), thNum("Pending"), th("Lag"), thNum("Dead"), th("Keys held by a dead event"), th("Last error")),
				rows(d.Status.Targets, 7, "No relay target is configured.", func(t admin.TargetStatus) g.Node { return targetRow(t, now) }),
			),
			g.Iff(d.Status.WAL != nil, func() g.Node { return walTable(d.Status.WAL) }),
		),
		el("div", class("cols"),
			el("section",
				el("h2", text("Brokers")),
				el("ul", class("checks"), g.Map(d.Brokers, func(c admin.CheckResult) g.Node { return check(c, "connected", "down") }),
					g.If(len(d.Brokers) == 0, el("li", class("empty"), text("No broker is configured.")))),
				el("h2", text("Checks")),
				el("ul", class("checks"), g.Map(d.Checks, func(c admin.CheckResult) g.Node { return check(c, "ok", "failing") })),
			),
			el("section",
				el("h2", text("Last hour")),
				el("div", class("charts"), g.Map(d.Charts, chartFigure)),
			),
		),
	}
}

func streamRow(st admin.StreamStatus, now time.Time) g.Node {
	holder := muted("none")
	if st.LeaseHolder != "" {
		holder = el("code", text(st.LeaseHolder))
	}
	head, state := text("—"), text("idle")
	if st.HeadID != 0 {
		head = el("a", href(to("dead/inbox", st.Stream, itoa(st.HeadID))), text(itoa(st.HeadID)))
		state = g.Group{
			text(st.HeadStatus),
			g.If(st.HeadAttempts != 0, text(", "+itoa(st.HeadAttempts)+" attempts")),
			g.If(st.HeadClass != "", g.Group{text(" · "), el("b", text(st.HeadClass))}),
			g.If(st.HeadReason != "", el("div", class("reason"), text(st.HeadReason))),
		}
	}
	dead := text("0")
	if st.Dead != 0 {
		dead = el("a", href(to("dead").with(url.Values{"stream": {st.Stream}})), text(itoa(st.Dead)))
	}
	gap := text("none open")
	if st.GapFrom != 0 {
		gap = text("waiting for id " + itoa(st.GapFrom) + " for " + age(st.GapOpen))
	}
	return el("tr", g.If(st.HeadReason != "" || st.Dead > 0, class("warn")),
		el("td", el("b", text(st.Stream))),
		el("td", holder,
			g.If(st.Leader, g.Group{text(" "), el("span", class("ok"), text("(this instance)"))}),
			g.If(st.LeaseExpires != nil, el("div", class("muted"), text("lease until "+when(st.LeaseExpires))))),
		tdNum(head),
		td(age(st.HeadAge)),
		el("td", state),
		tdNum(text(itoa(st.Backlog))),
		tdNum(text(itoa(st.Failed))),
		tdNum(dead),
		el("td", text(when(st.LastSuccess)), g.If(st.LastSuccess != nil, g.Group{text(" "), muted("(" + ago(st.LastSuccess, now) + ")")})),
		el("td", gap, g.If(st.GapsSkipped != 0, g.Group{text(" · "), el("a", href(to("gaps")), text(itoa(st.GapsSkipped)+" declared"))})),
	)
}

func targetRow(t admin.TargetStatus, now time.Time) g.Node {
	var state g.Node
	switch {
	case !t.Relayed:
		state = g.Group{el("span", class("bad"), text("no relay")), text(" (relay.targets lacks it)")}
	case t.Paused:
		state = g.Group{el("span", class("bad"), text("paused")), text(": broker unavailable since " + when(t.PausedSince) + " "),
			muted("(" + ago(t.PausedSince, now) + ")")}
	default:
		state = text("relaying")
	}
	dead := text("0")
	if t.Dead != 0 {
		dead = el("a", href(to("dead").with(url.Values{"source": {"outbox"}, "target": {t.Target}})), text(itoa(t.Dead)))
	}
	blocked := text("—")
	if t.BlockedKeys != 0 {
		blocked = g.Group{text(itoa(t.BlockedKeys) + ":"), g.Map(t.Blocked, func(b outbox.BlockedKey) g.Node {
			return g.Group{text(" "), el("span", class("blocked"), text(b.Key+" held by "),
				el("a", href(to("dead/outbox", b.EventID)), text(b.EventID)), text(", "+itoa(b.Waiting)+" waiting")), text(";")}
		})}
	}
	lastErr := text("—")
	if t.LastError != "" {
		lastErr = g.Group{text(when(t.LastErrorAt) + " "), muted("(" + ago(t.LastErrorAt, now) + ")"), text(" "), reason(t.LastError)}
	}
	return el("tr", g.If(t.Dead > 0 || t.Paused || !t.Relayed, class("warn")),
		el("td", el("b", text(t.Target))),
		el("td", state),
		tdNum(text(itoa(t.Pending))), td(age(t.Lag)),
		tdNum(dead),
		el("td", blocked),
		el("td", lastErr),
	)
}

func walTable(w *outbox.WALStatus) g.Node {
	var holder g.Node
	switch {
	case w.Holder:
		holder = text("this instance")
	case w.Active:
		holder = text("another instance (backend " + itoa(w.ActivePID) + ")")
	default:
		holder = g.Group{el("span", class("bad"), text("none")), text(": nothing streams the events")}
	}
	var state g.Node
	switch {
	case w.Invalidated:
		state = g.Group{el("span", class("bad"), text("invalidated")), text(": events were lost with its WAL (docs/outbox.md)")}
	case w.Paused:
		state = g.Group{el("span", class("bad"), text("paused")), text(": a broker is unavailable")}
	default:
		state = text("streaming")
	}
	confirmed := w.Confirmed
	if confirmed == "" {
		confirmed = "—"
	}
	return g.Group{
		el("h2", text("WAL relay")),
		el("table",
			heads(th("Slot"), th("Holder"), th("Confirmed"), thNum("Lag (bytes)"), thNum("Retained WAL (bytes)"), th("State")),
			el("tbody", el("tr", g.If(w.Invalidated || w.Paused || !w.Active, class("warn")),
				el("td", el("b", text(w.Slot))),
				el("td", holder),
				td(confirmed),
				tdNum(text(itoa(w.LagBytes))), tdNum(text(itoa(w.RetainedBytes))),
				el("td", state),
			)),
		),
	}
}

// check is a readiness check's line: its state in words, its name, its error.
func check(c admin.CheckResult, ok, failing string) g.Node {
	state := el("span", class("bad"), text("● "+failing))
	if c.OK {
		state = el("span", class("ok"), text("● "+ok))
	}
	return el("li", state, text(" "), el("b", text(c.Name)), g.If(c.Error != "", g.Group{text(" "), reason(c.Error)}))
}

func chartFigure(c chart) g.Node {
	caption := c.Title
	if c.Unit != "" {
		caption += " (" + c.Unit + ")"
	}
	if c.Empty {
		return el("figure", class("chart"), el("figcaption", text(caption)), el("p", class("empty"), text("No sample yet (one a minute).")))
	}
	return el("figure", class("chart"),
		el("figcaption", text(caption+": now "), el("b", text(c.Last)), text(", max "+c.Max)),
		el("svg", attr("viewBox", "0 0 300 60"), attr("preserveAspectRatio", "none"), attr("role", "img"), attr("aria-label", c.Title),
			el("polyline", attr("points", c.Points))),
	)
}

// gapsView is the mailbox gaps page: the gaps open now (from the streams'
// status) and those declared.
type gapsView struct {
	Streams []admin.StreamStatus
	Gaps    []admin.Gap
}

func gapsPage(d gapsView) page {
	return page{Title: "Mailbox gaps", In: inGaps, Main: g.Group{
		el("h1", text("Mailbox gaps")),
		el("p", text("Ids missing from a legacy mailbox: the poller waits for a missing id, then declares a permanent gap and goes on. "+
			"Rows that show up in a gap later are taken in late or refused, and counted here.")),
		el("section",
			el("h2", text("Open now")),
			el("table", heads(th("Stream"), thNum("Watermark"), th("Waiting for"), th("Since")),
				rows(d.Streams, 4, "No stream runs in this service.", func(st admin.StreamStatus) g.Node {
					waiting, since := "nothing", "—"
					if st.GapFrom != 0 {
						waiting, since = "id "+itoa(st.GapFrom), age(st.GapOpen)
					}
					return el("tr", g.If(st.GapFrom != 0, class("warn")), el("td", el("b", text(st.Stream))), tdNum(text(itoa(st.Watermark))),
						td(waiting), td(since))
				})),
		),
		el("section",
			el("h2", text("Declared")),
			el("table", heads(th("Stream"), thNum("From id"), thNum("To id"), thNum("Ids"), th("First seen"), th("Declared"), thNum("Late rows")),
				rows(d.Gaps, 7, "No gap has been declared.", func(gp admin.Gap) g.Node {
					return el("tr", td(gp.Stream), tdNum(text(itoa(gp.From))), tdNum(text(itoa(gp.To))), tdNum(text(itoa(gp.IDs()))),
						td(when(gp.FirstSeenAt)), td(when(gp.DeclaredAt)), tdNum(text(itoa(gp.LateRows))))
				})),
		),
	}}
}

// requestsView is the outbound requests page: the query's filter and its
// answer (a table), or why there is none.
type requestsView struct {
	Status string
	noAnswer
	Table *table
}

func requestsPage(d requestsView) page {
	return page{Title: "Requests", In: inRequests, Main: g.Group{
		el("h1", text("Outbound requests")),
		el("p", text("The requests (RQFD, RQRD) sent to the airport system, with their status.")),
		el("form", attr("method", "get"), action(to("requests")), class("filters"),
			el("label", text("Status "), el("input", attr("type", "text"), attr("name", "status"), attr("value", d.Status))),
			el("button", attr("type", "submit"), text("Show")),
		),
		unavailable(d.Unavailable),
		alert(d.Error),
		answerTable(d.Table),
	}}
}

// answerTable shows a query's answer: a table, or indented JSON when it
// has no table's shape.
func answerTable(t *table) g.Node {
	if t == nil {
		return nil
	}
	if len(t.Cols) == 0 {
		return el("pre", class("payload"), text(t.JSON))
	}
	return el("table",
		el("thead", el("tr", g.Map(t.Cols, th))),
		rows(t.Rows, len(t.Cols), "Nothing.", func(r []string) g.Node { return el("tr", g.Map(r, td)) }),
	)
}
