package console

import (
	g "maragu.dev/gomponents"
	h "maragu.dev/gomponents/html"
)

// layout is the frame of every page: the head, the navigation and who is
// logged in (with the logout form), then the page's own content.
func layout(v view, p page) g.Node {
	return h.Doctype(el("html", attr("lang", "en"),
		el("head",
			el("meta", attr("charset", "utf-8")),
			el("meta", attr("name", "viewport"), attr("content", "width=device-width, initial-scale=1")),
			el("title", text(p.Title+" · msgx console")),
			el("link", attr("rel", "stylesheet"), href(to("static/console.css"))),
			el("script", attr("src", string(to("static/console.js"))), attr("defer")),
		),
		el("body",
			el("header", class("top"),
				el("a", class("brand"), href(to("")), text("msgx console")),
				g.If(v.Session.ID != "", g.Group{nav(p.In), who(v)}),
			),
			el("main", p.Main),
		),
	))
}

func nav(in section) g.Node {
	entry := func(s section, r ref, label string) g.Node {
		return el("a", href(r), g.If(s == in, class("on")), text(label))
	}
	return el("nav",
		entry(inOverview, to(""), "Overview"),
		entry(inDead, to("dead"), "Dead letters"),
		entry(inReplay, to("replay"), "Replay"),
		entry(inFlights, to("flights"), "Flights"),
		entry(inRequests, to("requests"), "Requests"),
		entry(inGaps, to("gaps"), "Mailbox gaps"),
	)
}

// who shows the session's scope, token name and note; the open console
// (no token configured) has no session to log out of.
func who(v view) g.Node {
	s := v.Session
	return el("div", class("who"),
		el("span", class("scope scope-"+s.Scope.String()), text(s.Scope.String())),
		g.If(s.Name != "", text(" "+s.Name)),
		g.If(s.Note != "", g.Group{text(" "), el("span", class("note"), text("("+s.Note+")"))}),
		g.If(s.ID != "open", el("form", attr("method", "post"), action(to("logout")), class("inline"),
			csrfInput(v), el("button", class("link"), text("Log out")))),
	)
}

func csrfInput(v view) g.Node { return hidden("csrf", v.CSRF) }

func hidden(name, value string) g.Node {
	return el("input", attr("type", "hidden"), attr("name", name), attr("value", value))
}

func loginPage(errText string) page {
	return page{Title: "Log in", Main: el("section", class("login card"),
		el("h1", text("Log in")),
		el("p", text("Paste the service's admin token: the "), el("b", text("read")), text(" token shows the state, the "),
			el("b", text("operator")), text(" token can also replay.")),
		alert(errText),
		el("form", attr("method", "post"), action(to("login")),
			el("label", text("Admin token "), el("input", attr("type", "password"), attr("name", "token"), attr("autocomplete", "off"), attr("autofocus"), attr("required"))),
			el("label", text("Your name (for the audit, optional) "), el("input", attr("type", "text"), attr("name", "name"), attr("maxlength", "60"))),
			el("button", class("primary"), attr("type", "submit"), text("Log in")),
		),
	)}
}

func errorPage(v view, title, msg string) page {
	back := el("a", href(to("login")), text("Log in"))
	if v.Session.ID != "" {
		back = el("a", href(to("")), text("Back to the overview"))
	}
	return page{Title: title, Main: el("section", class("card"),
		el("h1", text(title)),
		el("p", class("alert"), text(msg)),
		el("p", back),
	)}
}

// The small parts the pages share.

// alert is an error shown above a form; nothing without one.
func alert(msg string) g.Node {
	return g.If(msg != "", el("p", class("alert"), text(msg)))
}

func muted(s string) g.Node { return el("span", class("muted"), text(s)) }

func reason(s string) g.Node { return el("span", class("reason"), text(s)) }

// orMuted is a cell's text, or the muted placeholder when it is empty.
func orMuted(s, placeholder string) g.Node {
	if s == "" {
		return muted(placeholder)
	}
	return text(s)
}

func th(s string) g.Node    { return el("th", text(s)) }
func thNum(s string) g.Node { return el("th", class("num"), text(s)) }
func td(s string) g.Node    { return el("td", text(s)) }

func tdNum(children ...g.Node) g.Node { return el("td", class("num"), g.Group(children)) }

// heads is a table's header row.
func heads(cells ...g.Node) g.Node { return el("thead", el("tr", cells...)) }

// rows is a table's body: a row per item, or one row saying there is none.
func rows[T any](items []T, cols int, none string, row func(T) g.Node) g.Node {
	if len(items) == 0 {
		return el("tbody", el("tr", el("td", attr("colspan", itoa(cols)), class("empty"), text(none))))
	}
	return el("tbody", g.Map(items, row))
}

// fact is a term and its description in a list of facts.
func fact(term string, desc ...g.Node) g.Node {
	return g.Group{el("dt", text(term)), el("dd", desc...)}
}

// choice is an option of a select whose value is its text.
func choice(label, current string) g.Node {
	return el("option", g.If(label == current, attr("selected")), text(label))
}

func choices(opts []string, current string) g.Node {
	return g.Map(opts, func(o string) g.Node { return choice(o, current) })
}

// unavailable is the notice of a page whose query no pipeline answers here.
func unavailable(msg string) g.Node {
	return g.If(msg != "", el("section", class("card unavailable"), el("h2", text("Not available")), el("p", attr("id", "unavailable"), text(msg)),
		el("p", class("muted"), text("This page shows its data once the pipeline that answers it runs in this service."))))
}
