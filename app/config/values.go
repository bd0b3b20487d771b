package config

import (
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Redacted stands for a secret's value in Values.
const Redacted = "[redacted]"

// Values lists every key of cfg with its effective value ("path = value"),
// sorted by path: what the file, the environment and the defaults (the
// components' own, see setDefaults) make of it. Secrets are redacted: the
// value of a key whose name says it holds one (a word of it is password,
// token, secret, seed, passphrase or credentials) and the password inside a
// DSN or URL.
func Values(cfg *Config) []string {
	var out []string
	walk(reflect.ValueOf(cfg).Elem(), "", func(path string, v reflect.Value) {
		out = append(out, path+" = "+redact(path, formatValue(v)))
	})
	sort.Strings(out)
	return out
}

// formatValue is v as a variable would set it: durations as 1m30s, lists
// comma-separated (an empty one "(none)"), an unset optional value as
// "(unset)".
func formatValue(v reflect.Value) string {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return "(unset)"
		}
		return formatValue(v.Elem())
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
		return v.String()
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Slice:
		if v.Len() == 0 {
			return "(none)"
		}
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = formatValue(v.Index(i))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v.Interface())
}

// secretWords mark a key whose whole value is a secret: one of the
// dash-separated words of its name (read-token, nkey-seed) is one of them.
var secretWords = []string{"password", "token", "secret", "seed", "passphrase", "credentials"}

// redact hides the secret in the value of the key at path.
func redact(path, value string) string {
	if value == `""` || value == "(unset)" {
		return value
	}
	name := strings.ToLower(path[strings.LastIndex(path, ".")+1:])
	for _, part := range strings.Split(name, "-") {
		if slices.Contains(secretWords, part) {
			return Redacted
		}
	}
	if strings.Contains(name, "dsn") || strings.Contains(name, "url") {
		return redactDSN(value)
	}
	return value
}

var (
	// mysqlUserinfo is go-sql-driver/mysql's user:password@ prefix.
	mysqlUserinfo = regexp.MustCompile(`^([^:@/]*):[^@]*@`)
	// keywordPassword is a password=… of a key/value connection string.
	keywordPassword = regexp.MustCompile(`(?i)\bpassword=('[^']*'|\S*)`)
)

// redactDSN hides the password of a connection string: a URL's
// (postgres://u:p@h/db), a MySQL DSN's (u:p@tcp(h)/db) or a key/value
// string's (password=p).
func redactDSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return Redacted // cannot tell where its password is
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
			return strings.Replace(u.String(), ":REDACTED@", ":"+Redacted+"@", 1)
		}
		return dsn
	}
	dsn = keywordPassword.ReplaceAllString(dsn, "password="+Redacted)
	return mysqlUserinfo.ReplaceAllString(dsn, "${1}:"+Redacted+"@")
}

// RedactDSN is dsn with its password hidden, for a line an operator reads.
func RedactDSN(dsn string) string { return redactDSN(dsn) }
