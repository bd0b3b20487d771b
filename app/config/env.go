package config

import (
	"fmt"
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

// applyEnv sets every key whose variable is in environ.
func applyEnv(cfg *Config, environ []string) []string {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	var problems []string
	walk(reflect.ValueOf(cfg).Elem(), "", func(path string, v reflect.Value) {
		raw, ok := env[EnvName(path)]
		if !ok {
			return
		}
		if err := setScalar(v, raw); err != nil {
			problems = append(problems, fmt.Sprintf("%s (from %s): %v", path, EnvName(path), err))
		}
	})
	return problems
}

// walk calls fn for every settable scalar reachable from v. Maps of structs
// and of strings are walked through their existing entries.
func walk(v reflect.Value, prefix string, fn func(path string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		path := tag
		if prefix != "" {
			path = prefix + "." + tag
		}
		fv := v.Field(i)
		switch {
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

var durationType = reflect.TypeOf(Duration(0))

// setScalar parses raw into v by v's type; lists are comma-separated.
func setScalar(v reflect.Value, raw string) error {
	if v.Type() == durationType {
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
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", raw)
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
