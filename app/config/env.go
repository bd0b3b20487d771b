package config

import (
	"fmt"
	"maps"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts every variable that overrides a key.
const EnvPrefix = "MSGX_"

// EnvName is the variable overriding a key path ("store.dsn" → MSGX_STORE_DSN).
func EnvName(path string) string {
	var b strings.Builder
	b.WriteString(EnvPrefix)
	for _, r := range strings.ToUpper(path) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Keys lists every key path of cfg with its environment variable, in order:
// the scalar fields, and the fields of each named broker, mailbox, stream,
// pipeline and relay target it has (a variable overrides an entry the file
// or the default defines; it cannot add one).
func Keys(cfg *Config) []string {
	var out []string
	walk(reflect.ValueOf(cfg).Elem(), "", func(path string, _ reflect.Value) { out = append(out, path) })
	sort.Strings(out)
	return out
}

// OtherVariables are the MSGX_ variables that are not configuration keys:
// those the msgx command reads itself, and those of the repository's test
// suites (never set those in service). Every other MSGX_ variable must be
// the variable of a key of the configuration: a misspelt one (MSGX_STORE_DNS)
// or one of an entry the file does not define is an error, as an unknown key
// in the file is, rather than a value silently ignored.
func OtherVariables() []string {
	return []string{
		// the command
		"MSGX_CONFIG", "MSGX_ADMIN_URL", "MSGX_ADMIN_TOKEN",
		"MSGX_CLOCK_SKEW", "MSGX_CLOCK_SKEW_IN_PRODUCTION", "MSGX_FAILPOINTS", "MSGX_FAILPOINTS_IN_PRODUCTION",
		// the test suites
		"MSGX_TEST_POSTGRES", "MSGX_TEST_MYSQL", "MSGX_TEST_RABBITMQ", "MSGX_RABBITMQ_ADDR", "MSGX_MQTT_ADDR", "MSGX_PULSAR_URL",
		"MSGX_KAFKA_TEST_LOG", "MSGX_KAFKA_TEST_CHILD", "MSGX_OUTBOX_TEST_CRASH_CHILD", "MSGX_OUTBOX_TEST_CRASH_AT",
		"MSGX_TCK_REPORT", "MSGX_TCK_TIMEOUT", "MSGX_BENCH_N", "MSGX_INBOXBENCH_N",
		"MSGX_REQUIRE_BROWSER", "MSGX_CONSOLE_SCREENSHOTS", "MSGX_UPDATE_DOCS", "MSGX_TEST_LOG",
	}
}

// applyEnv sets every key whose variable is in environ, and refuses the
// MSGX_ variables that are neither a key's, nor one of OtherVariables, nor
// one of cleared (those that cleared a broker key).
func applyEnv(cfg *Config, environ []string, cleared map[string]bool) []string {
	env := envMap(environ)
	var problems []string
	known := maps.Clone(cleared)
	if known == nil {
		known = map[string]bool{}
	}
	walk(reflect.ValueOf(cfg).Elem(), "", func(path string, v reflect.Value) {
		known[EnvName(path)] = true
		raw, ok := env[EnvName(path)]
		if !ok {
			return
		}
		if err := setScalar(v, raw); err != nil {
			problems = append(problems, fmt.Sprintf("%s (from %s): %v", path, EnvName(path), err))
		}
	})
	for _, name := range OtherVariables() {
		known[name] = true
	}
	var unknown []string
	for name := range env {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		msg := fmt.Sprintf("%s: no configuration key has this variable", name)
		if near := nearest(name, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		// A variable overrides a key of an entry (a broker, a stream…) the
		// file or the default defines; it cannot add an entry.
		problems = append(problems, msg+"; a variable can only override a key the file or the default has (see msgx serve --check for the list)")
	}
	return problems
}

// nearest is the name of known closest to name, when it is close enough to
// be a typo of it (at most 2 edits, or 3 for long names); "" otherwise.
func nearest(name string, known map[string]bool) string {
	limit := 2
	if len(name) >= 16 {
		limit = 3
	}
	best, bestD := "", limit+1
	for k := range known {
		if d := editDistance(name, k); d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// walk calls fn for every settable scalar reachable from v. Maps of structs
// and of strings are walked through their existing entries.
func walk(v reflect.Value, prefix string, fn func(path string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if (tag == "" || tag == "-") && f.Tag.Get("config") != "inline" {
			continue
		}
		path := tag
		if prefix != "" {
			path = prefix + "." + tag
		}
		fv := v.Field(i)
		switch {
		case f.Tag.Get("config") == "inline":
			// A broker's settings: their keys sit beside kind.
			if fv.Kind() == reflect.Interface && !fv.IsNil() && fv.Elem().Kind() == reflect.Pointer {
				walk(fv.Elem().Elem(), prefix, fn)
			}
		case fv.Kind() == reflect.Struct:
			walk(fv, path, fn)
		case fv.Kind() == reflect.Map:
			if fv.IsNil() {
				continue
			}
			keys := fv.MapKeys()
			sort.Slice(keys, func(a, b int) bool { return keys[a].String() < keys[b].String() })
			for _, k := range keys {
				ep := path + "." + k.String()
				elem := reflect.New(fv.Type().Elem()).Elem()
				elem.Set(fv.MapIndex(k))
				if elem.Kind() == reflect.Struct {
					walk(elem, ep, fn)
				} else {
					fn(ep, elem)
				}
				fv.SetMapIndex(k, elem)
			}
		default:
			fn(path, fv)
		}
	}
}

var (
	durationType   = reflect.TypeOf(Duration(0))
	goDurationType = reflect.TypeOf(time.Duration(0))
)

// setScalar parses raw into v by v's type; lists are comma-separated.
func setScalar(v reflect.Value, raw string) error {
	if v.Type() == durationType || v.Type() == goDurationType {
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 500ms, 10s, 5m)", raw)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%q is not true or false", raw)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || v.OverflowInt(n) {
			return fmt.Errorf("%q is not an integer (of %d bits)", raw, v.Type().Bits())
		}
		v.SetInt(n)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if err := setScalar(p.Elem(), raw); err != nil {
			return err
		}
		v.Set(p)
	case reflect.Slice:
		var parts []string
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				parts = append(parts, s)
			}
		}
		v.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("cannot be set from the environment")
	}
	return nil
}
