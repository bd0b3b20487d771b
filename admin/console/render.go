package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	g "maragu.dev/gomponents"

	"github.com/msgx/msgx/admin"
)

// The pages are built in Go with gomponents rather than html/template: a
// template's execution makes reflect's MethodByName reachable, and then the
// linker keeps every exported method of every type in the binary. Every
// value from data goes in through text or attr (g.Text, g.Attr), both of
// which escape it (never g.Raw), and every URL is a ref: a path under the
// console's prefix with its segments and query escaped.

// view is what every page knows of its request: the session, whether it may
// act (the operator scope) and the CSRF token its forms carry.
type view struct {
	Session session
	CanAct  bool
	CSRF    string
}

func (c *Console) view(s session) view {
	v := view{Session: s, CanAct: s.Scope >= admin.Operator}
	if s.ID != "" {
		v.CSRF = c.csrf(s)
	}
	return v
}

// section is the navigation entry a page lies under (none for the login
// and error pages).
type section int

const (
	noSection section = iota
	inOverview
	inDead
	inReplay
	inFlights
	inRequests
	inGaps
)

// page is a whole page: its title, its section and what goes in <main>.
type page struct {
	Title string
	In    section
	Main  g.Node
}

// render answers a whole page in the layout.
func (c *Console) render(w http.ResponseWriter, status int, v view, p page) {
	c.write(w, status, p.Title, layout(v, p))
}

// write renders into a buffer first, so that a page that fails to render
// answers 500 rather than half a page.
func (c *Console) write(w http.ResponseWriter, status int, name string, n g.Node) {
	var buf bytes.Buffer
	if err := n.Render(&buf); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// ref is a URL of the console: the prefix, a fixed path, then escaped path
// segments and query. Pages link only through refs, so that no href,
// action or data-refresh can be a URL that data chose (a javascript: one,
// another site's).
type ref string

// to is the console's path (a constant under the prefix) followed by the
// segments, each escaped as one path segment.
func to(path string, segs ...string) ref {
	var b strings.Builder
	b.WriteString(Prefix)
	b.WriteString(path)
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return ref(b.String())
}

// with is the ref with a query (its values escaped).
func (r ref) with(q url.Values) ref {
	if len(q) == 0 {
		return r
	}
	return r + "?" + ref(q.Encode())
}

func href(r ref) g.Node   { return attr("href", string(r)) }
func action(r ref) g.Node { return attr("action", string(r)) }

// el, attr and text are gomponents' g.El, g.Attr and g.Text, called out of
// line. Each returns a closure, and the compiler counts a closure as cheap:
// called directly (or through the html package's helpers), the constructor
// is inlined at every element, attribute and text of every page, each with
// its own copy of the closure's code, which made the console's pages about
// 1 MB of the binary.

//go:noinline
func el(name string, children ...g.Node) g.Node { return g.El(name, children...) }

//go:noinline
func attr(name string, value ...string) g.Node { return g.Attr(name, value...) }

//go:noinline
func text(s string) g.Node { return g.Text(s) }

func class(v string) g.Node { return attr("class", v) }

// itoa prints a count or an id.
func itoa[N int | int64](n N) string { return strconv.FormatInt(int64(n), 10) }

// instant is a time as the admin's views hold it: a value, or a pointer
// for one that may be missing.
type instant interface{ time.Time | *time.Time }

// at is the time an instant holds (the zero time for a nil pointer).
func at[T instant](t T) time.Time {
	switch v := any(t).(type) {
	case time.Time:
		return v
	case *time.Time:
		if v != nil {
			return *v
		}
	}
	return time.Time{}
}

// when is a time as the pages print it, in UTC; "—" for no time.
func when[T instant](t T) string {
	v := at(t)
	if v.IsZero() {
		return "—"
	}
	return v.UTC().Format("2006-01-02 15:04:05Z")
}

// ago is how long before now t was, as an operator reads it at a glance
// ("3 min ago"); "—" for no time.
func ago[T instant](t T, now time.Time) string {
	v := at(t)
	if v.IsZero() {
		return "—"
	}
	d := now.Sub(v)
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
