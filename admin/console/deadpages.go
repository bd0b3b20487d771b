package console

import (
	"net/url"
	"strings"
	"time"

	g "maragu.dev/gomponents"

	"github.com/msgx/msgx/admin"
)

// The dead letters, one message or event, and the replay with its dry run.

// deadFilter is the dead letters' filter as the form sent it.
type deadFilter struct {
	Source, Stream, Class, Target, Since, Until string
}

// deadView is the dead letters page: the filter and its choices, and what
// it selected.
type deadView struct {
	F                         deadFilter
	Streams, Classes, Targets []string
	Inbox                     []admin.DeadMessage
	Outbox                    []admin.DeadEvent
	// AnyReplayable: some inbox message may be selected for a replay.
	AnyReplayable bool
}

func deadPage(v view, d deadView) page {
	f := d.F
	source := func(value, label string) g.Node {
		return el("option", attr("value", value), g.If(f.Source == value, attr("selected")), text(label))
	}
	all := el("option", attr("value", ""), text("all"))
	return page{Title: "Dead letters", In: inDead, Main: g.Group{
		el("h1", text("Dead letters")),
		el("form", attr("method", "get"), action(to("dead")), class("filters"),
			el("label", text("Source "), el("select", attr("name", "source"),
				el("option", attr("value", ""), text("inbox and outbox")), source("inbox", "inbox"), source("outbox", "outbox"))),
			el("label", text("Stream "), el("select", attr("name", "stream"), all, choices(d.Streams, f.Stream))),
			el("label", text("Class "), el("select", attr("name", "class"), all, choices(d.Classes, f.Class))),
			el("label", text("Target "), el("select", attr("name", "target"), all, choices(d.Targets, f.Target))),
			el("label", text("Since (UTC) "), el("input", attr("type", "datetime-local"), attr("name", "since"), attr("value", f.Since))),
			el("label", text("Until (UTC) "), el("input", attr("type", "datetime-local"), attr("name", "until"), attr("value", f.Until))),
			el("button", attr("type", "submit"), text("Filter")), text(" "), el("a", href(to("dead")), text("clear")),
		),
		el("section",
			el("h2", text("Inbox messages "), el("span", class("count"), text(itoa(len(d.Inbox))))),
			el("form", attr("method", "get"), action(to("replay")),
				hidden("source", "inbox"),
				el("table",
					heads(g.If(v.CanAct, el("th")), th("Stream"), thNum("Id"), th("Status"), th("Class"), th("Reason"), thNum("Attempts"), th("Received")),
					rows(d.Inbox, 8, "No inbox dead letter matches.", func(m admin.DeadMessage) g.Node { return deadMessageRow(v, m) }),
				),
				g.If(v.CanAct && d.AnyReplayable, el("div", class("actions"),
					el("label", text("Stream of the selection "), el("select", attr("name", "stream"), choices(d.Streams, f.Stream))),
					el("button", attr("type", "submit"), text("Replay the selected…")))),
			),
		),
		el("section",
			el("h2", text("Outbox events "), el("span", class("count"), text(itoa(len(d.Outbox))))),
			el("form", attr("method", "get"), action(to("replay")),
				hidden("source", "outbox"),
				el("table",
					heads(g.If(v.CanAct, el("th")), th("Event"), th("Target"), th("Topic"), th("Key"), thNum("Attempts"), th("Last error"), th("Created")),
					rows(d.Outbox, 8, "No outbox dead letter matches.", func(e admin.DeadEvent) g.Node { return deadEventRow(v, e) }),
				),
				g.If(v.CanAct && len(d.Outbox) > 0, el("div", class("actions"), el("button", attr("type", "submit"), text("Replay the selected…")))),
			),
		),
	}}
}

func deadMessageRow(v view, m admin.DeadMessage) g.Node {
	id := itoa(m.ID)
	return el("tr",
		g.If(v.CanAct, el("td", g.If(m.Replayable,
			el("input", attr("type", "checkbox"), attr("name", "ids"), attr("value", id), attr("data-stream", m.Stream), attr("aria-label", "select "+id))))),
		td(m.Stream),
		tdNum(el("a", href(to("dead/inbox", m.Stream, id)), text(id))),
		td(m.Status),
		el("td", el("b", text(m.Class)), g.If(!m.Replayable, g.Group{text(" "), muted("(not replayable)")})),
		el("td", class("reason"), text(m.Reason)), tdNum(text(itoa(m.Attempts))), el("td", class("nowrap"), text(when(m.ReceivedAt))),
	)
}

func deadEventRow(v view, e admin.DeadEvent) g.Node {
	return el("tr",
		g.If(v.CanAct, el("td", el("input", attr("type", "checkbox"), attr("name", "ids"), attr("value", e.EventID), attr("aria-label", "select "+e.EventID)))),
		el("td", class("nowrap"), el("a", href(to("dead/outbox", e.EventID)), text(e.EventID))),
		td(e.Target), td(e.Topic), td(e.Key), tdNum(text(itoa(e.Attempts))),
		el("td", class("reason"), text(e.LastError)), el("td", class("nowrap"), text(when(e.CreatedAt))),
	)
}

// messageView is one message's page: its state and history, what it
// changed, and the start of its payload.
type messageView struct {
	D admin.DeadDetail
	// Payload is the first Shown of Size bytes, as valid UTF-8 (NotUTF8:
	// it was not, the invalid bytes replaced).
	Payload     string
	Size, Shown int
	NotUTF8     bool
	Effects     []versionView
	Now         time.Time
}

func messagePage(v view, d messageView) page {
	m := d.D
	id := itoa(m.ID)
	back := el("a", href(to("")), text("← overview"))
	if m.Status == "FAILED" || m.Status == "DEAD" {
		back = el("a", href(to("dead").with(url.Values{"stream": {m.Stream}})), text("← dead letters of "+m.Stream))
	}
	replayable := muted("(not replayable)")
	if m.Replayable {
		replayable = text("(replayable)")
	}
	size := itoa(d.Size) + " bytes"
	if d.Shown < d.Size {
		size += ", the first " + itoa(d.Shown) + " shown"
	}
	if d.NotUTF8 {
		size += ", not UTF-8 (invalid bytes shown as �)"
	}
	return page{Title: "Message " + id, In: inDead, Main: g.Group{
		el("p", back, text(" · "), el("a", href(to("messages", m.Stream, id)), text("link to this message"))),
		el("h1", text("Message "+id+" "), muted("of stream "+m.Stream)),
		el("div", class("cols"),
			el("section", class("card"),
				el("dl", class("facts"),
					fact("Status", el("b", text(m.Status))),
					fact("Class", el("b", text(m.Class)), text(" "), replayable),
					fact("Reason", class("reason"), text(m.Reason)),
					fact("Kind", text(m.Kind)),
					fact("Identity", text(m.Identity)),
					fact("Attempts", text(itoa(m.Attempts))),
					fact("Received", text(when(m.ReceivedAt))),
					fact("Finished", text(when(m.FinishedAt))),
					fact("Next attempt", text(when(m.NextAttempt))),
					fact("Processed mark", text(when(m.BackfilledAt))),
				),
				g.If(v.CanAct && m.Replayable, el("p", el("a", class("button primary"),
					href(to("replay").with(url.Values{"source": {"inbox"}, "stream": {m.Stream}, "ids": {id}})), text("Replay this message…")))),
			),
			el("section",
				el("h2", text("Attempt history")),
				el("table", heads(thNum("Attempt"), th("Class"), th("Reason"), th("At")),
					rows(m.History, 4, "No failure recorded.", func(e admin.HistoryEntry) g.Node {
						return el("tr", tdNum(text(itoa(e.Attempt))), td(e.Class), el("td", class("reason"), text(e.Reason)),
							el("td", class("nowrap"), text(when(e.At))))
					})),
			),
		),
		el("section", attr("id", "effects"), el("h2", text("What it changed")), versions(d.Effects, d.Now, true)),
		el("section",
			el("h2", text("Payload "), muted(size)),
			el("pre", class("payload"), attr("id", "payload"), text(d.Payload)),
		),
	}}
}

func eventPage(v view, e admin.DeadEvent) page {
	return page{Title: "Event " + e.EventID, In: inDead, Main: g.Group{
		el("p", el("a", href(to("dead").with(url.Values{"source": {"outbox"}, "target": {e.Target}})), text("← dead letters of "+e.Target))),
		el("h1", text("Event "+e.EventID)),
		el("section", class("card"),
			el("dl", class("facts"),
				fact("Status", el("b", text(e.Status))),
				fact("Target", text(e.Target)),
				fact("Topic", text(e.Topic)),
				fact("Key", text(e.Key)),
				fact("Attempts", text(itoa(e.Attempts))),
				fact("Last error", class("reason"), text(e.LastError)),
				fact("Created", text(when(e.CreatedAt))),
				fact("Done", text(when(e.DoneAt))),
			),
			g.If(v.CanAct && e.Status == "DEAD", el("p", el("a", class("button primary"),
				href(to("replay").with(url.Values{"source": {"outbox"}, "ids": {e.EventID}})), text("Replay this event…")))),
		),
	}}
}

// replayView is the replay's form: the selection so far, its choices, and
// why the last dry run was refused.
type replayView struct {
	R                admin.ReplayRequest
	Streams, Targets []string
	Error            string
}

func replayPage(v view, d replayView) page {
	r := d.R
	if !v.CanAct {
		return page{Title: "Replay", In: inReplay, Main: g.Group{
			el("h1", text("Replay dead letters")),
			el("p", class("alert"), text("Your token has the read scope: it can look at dead letters but not replay them. Log in with the operator token to replay.")),
		}}
	}
	byIDs := el("option", attr("value", ""), text("— by ids —"))
	return page{Title: "Replay", In: inReplay, Main: g.Group{
		el("h1", text("Replay dead letters")),
		el("p", text("Choose what to replay, give the reason (it goes to the audit), then look at the dry run before you confirm. Nothing changes until you confirm.")),
		alert(d.Error),
		el("form", attr("method", "post"), action(to("replay/preview")), class("card stack"),
			csrfInput(v),
			el("fieldset", el("legend", text("Source")),
				el("label", class("radio"), el("input", attr("type", "radio"), attr("name", "source"), attr("value", "inbox"), g.If(r.Source != "outbox", attr("checked"))),
					text(" inbox message (by stream and class or ids)")),
				el("label", class("radio"), el("input", attr("type", "radio"), attr("name", "source"), attr("value", "outbox"), g.If(r.Source == "outbox", attr("checked"))),
					text(" outbox event (by target or event ids)")),
			),
			el("label", text("Stream (inbox) "), el("select", attr("name", "stream"), choices(d.Streams, r.Stream))),
			el("label", text("Class (inbox: every replayable dead letter of it) "), el("select", attr("name", "class"), byIDs,
				choices([]string{"CODEC_ERROR", "UNSUPPORTED", "INFRA", "EXHAUSTED"}, r.Class))),
			el("label", text("Target (outbox: every dead event of it) "), el("select", attr("name", "target"), byIDs, choices(d.Targets, r.Target))),
			el("label", text("Ids (message ids or event ids, comma-separated) "), el("input", attr("type", "text"), attr("name", "ids"), attr("value", strings.Join(r.IDs, ",")))),
			el("label", text("Reason (required, audited) "), el("input", attr("type", "text"), attr("name", "reason"), attr("value", r.Reason), attr("required"), attr("maxlength", "500"))),
			el("p", el("button", class("primary"), attr("type", "submit"), attr("id", "dry-run"), text("Dry run"))),
		),
	}}
}

// resultView is a replay's answer: its dry run (to confirm) or, Done, the
// replay itself (whose progress the page follows).
type resultView struct {
	R    admin.ReplayRequest
	Res  admin.ReplayResult
	Done bool
}

func resultPage(v view, d resultView) page {
	r, res := d.R, d.Res
	n := itoa(len(res.Replayed))
	ids := strings.Join(res.Replayed, ",")
	var head g.Node
	if d.Done {
		what := "message(s)"
		if r.Source == "outbox" {
			what = "event(s)"
		}
		inStream := ""
		if r.Source == "inbox" {
			inStream = " in stream " + r.Stream
		}
		progress := url.Values{"source": {r.Source}, "stream": {r.Stream}, "ids": {ids}}
		head = g.Group{
			el("h1", text("Replay done")),
			el("p", class("notice"), attr("id", "replay-done"), text(n+" "+what+" replayed"+inStream+". The replay is recorded in the audit.")),
			g.If(len(res.Replayed) > 0, el("section", class("card"),
				el("h2", text("Progress")),
				el("div", attr("data-refresh", string(to("fragment/progress").with(progress))), attr("data-every", "2000"), attr("data-now", "1"), attr("id", "progress"),
					el("p", class("muted"), text("Reading the status…"))),
			)),
		}
	} else {
		head = g.Group{
			el("h1", text("Dry run")),
			el("p", text("Source "), el("b", text(r.Source)),
				g.If(r.Source == "inbox", g.Group{text(", stream "), el("b", text(r.Stream))}),
				g.If(r.Class != "", g.Group{text(", class "), el("b", text(r.Class))}),
				g.If(r.Target != "", g.Group{text(", target "), el("b", text(r.Target))}),
				text(". Reason: "), el("i", text(r.Reason))),
			el("p", class("notice"), attr("id", "dry-run-result"), el("b", text(n)), text(" would be replayed"),
				g.If(len(res.Refused) > 0, g.Group{text(", "), el("b", text(itoa(len(res.Refused)))), text(" refused")}),
				text(". Nothing has changed yet.")),
		}
	}
	return page{Title: "Replay", In: inReplay, Main: g.Group{
		head,
		g.If(len(res.Replayed) > 0, el("details", g.If(!d.Done, attr("open")), el("summary", text(n+" selected")),
			el("p", class("ids"), text(strings.Join(res.Replayed, ", "))))),
		idTable("Warnings", "What replaying it does", res.Warnings),
		idTable("Refused", "Why", res.Refused),
		g.If(!d.Done && len(res.Replayed) > 0 && v.CanAct, el("form", attr("method", "post"), action(to("replay/run")), class("card"),
			csrfInput(v), hidden("source", r.Source), hidden("stream", r.Stream), hidden("ids", ids), hidden("reason", r.Reason),
			el("p", text("Confirm: replay exactly these "+n+".")),
			el("button", class("primary danger"), attr("type", "submit"), attr("id", "confirm"), text("Replay "+n+" now")),
			text(" "), el("a", href(to("dead")), text("Cancel")),
		)),
		el("p", el("a", href(to("dead")), text("Back to the dead letters"))),
	}}
}

// idTable is a heading and a table of ids, each with a text; nothing when
// there is none.
func idTable(title, col string, m map[string]string) g.Node {
	if len(m) == 0 {
		return nil
	}
	return g.Group{
		el("h2", text(title)),
		el("table", heads(th("Id"), th(col)), el("tbody", g.Map(sortedKeys(m), func(id string) g.Node { return el("tr", td(id), td(m[id])) }))),
	}
}

// progressView is a replay's progress: how many are in each status.
type progressView struct {
	Counts  map[string]int
	Total   int
	Settled bool
}

// progressBody is the fragment the replay's page refreshes.
func progressBody(d progressView) g.Node {
	summary := "Working: " + itoa(d.Total) + " replayed, not all settled yet."
	if d.Settled {
		summary = "All " + itoa(d.Total) + " settled."
	}
	return g.Group{
		el("p", g.If(d.Settled, class("ok")), attr("id", "progress-summary"), text(summary)),
		el("ul", class("counts"), g.Map(sortedKeys(d.Counts), func(status string) g.Node {
			return el("li", el("b", text(itoa(d.Counts[status]))), text(" "+status))
		})),
	}
}
