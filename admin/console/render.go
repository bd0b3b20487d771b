package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/msgx/msgx/admin"
)

// pageNames are the templates that render a whole page inside layout.html;
// the fragment templates are defined inside them.
var pageNames = []string{"login", "error", "overview", "dead", "deadinbox", "deadoutbox", "replay", "replayresult", "query", "gaps",
	"flights", "flight", "flightjson", "flighthistory"}

var funcs = template.FuncMap{
	"when": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil || v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return "—"
	},
	"age":  age,
	"ago":  ago,
	"join": strings.Join,
}

// ago is how long before now t was, as an operator reads it at a glance
// ("3 min ago"); "—" for no time.
func ago(t any, now time.Time) string {
	var at time.Time
	switch v := t.(type) {
	case time.Time:
		at = v
	case *time.Time:
		if v != nil {
			at = *v
		}
	}
	if at.IsZero() {
		return "—"
	}
	d := now.Sub(at)
	if d < 0 {
		return "in " + roughly(-d)
	}
	if d < time.Second {
		return "just now"
	}
	return roughly(d) + " ago"
}

// roughly is a duration at a glance: "12 s", "4 min", "2 h 5 min", "3 d 4 h".
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		if m := int(d.Minutes()) % 60; m != 0 {
			return fmt.Sprintf("%d h %d min", int(d.Hours()), m)
		}
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d d %d h", int(d.Hours())/24, int(d.Hours())%24)
}

func age(secs float64) string {
	if secs <= 0 {
		return "—"
	}
	d := time.Duration(secs * float64(time.Second))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, p := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		out[p] = t
	}
	return out, nil
}

// view is what every template gets.
type view struct {
	Page    string
	Session session
	CanAct  bool
	CSRF    string
	Prefix  string
	Data    map[string]any
}

func (c *Console) view(page string, s session, data map[string]any) view {
	v := view{Page: page, Session: s, CanAct: s.Scope >= admin.Operator, Prefix: Prefix, Data: data}
	if s.ID != "" {
		v.CSRF = c.csrf(s)
	}
	return v
}

// render executes a page (layout.html) or, with a fragment name, only that
// template of the page.
func (c *Console) render(w http.ResponseWriter, _ *http.Request, status int, page string, s session, data map[string]any) {
	c.exec(w, status, page, "layout.html", s, data)
}

func (c *Console) fragment(w http.ResponseWriter, status int, page, name string, s session, data map[string]any) {
	c.exec(w, status, page, name, s, data)
}

func (c *Console) exec(w http.ResponseWriter, status int, page, name string, s session, data map[string]any) {
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, name, c.view(page, s, data)); err != nil {
		c.log.Error("console: render", "page", page, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// table is a query answer laid out for the page: rows of objects become
// columns by key; anything else is shown as indented JSON.
type table struct {
	Cols []string
	Rows [][]string
	JSON string
}

func asTable(v any) table {
	b, err := json.Marshal(v)
	if err != nil {
		return table{JSON: fmt.Sprint(v)}
	}
	var generic any
	_ = json.Unmarshal(b, &generic)
	var objs []map[string]any
	switch g := generic.(type) {
	case []any:
		for _, e := range g {
			m, ok := e.(map[string]any)
			if !ok {
				objs = nil
				break
			}
			objs = append(objs, m)
		}
	case map[string]any:
		// One object: a row per key.
		t := table{Cols: []string{"field", "value"}}
		keys := make([]string, 0, len(g))
		for k := range g {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Rows = append(t.Rows, []string{k, cell(g[k])})
		}
		return t
	}
	if objs == nil {
		ind, _ := json.MarshalIndent(generic, "", "  ")
		return table{JSON: string(ind)}
	}
	var t table
	for _, o := range objs {
		for k := range o {
			if !slices.Contains(t.Cols, k) {
				t.Cols = append(t.Cols, k)
			}
		}
	}
	sort.Strings(t.Cols)
	for _, o := range objs {
		row := make([]string, len(t.Cols))
		for i, k := range t.Cols {
			row[i] = cell(o[k])
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	}
	b, _ := json.Marshal(v)
	return string(b)
}
