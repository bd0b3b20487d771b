package sis

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ConfigFromSettings reads a Config from the string settings a service
// configuration carries for a stream (streams.NAME.options):
//
//	timezone       airport time zone (IANA name; default Asia/Shanghai)
//	ignore         comma-separated kinds to skip as ignored ("" ignores nothing;
//	               absent: LDM,REGN,RSTA,EROR)
//	request-guard  true|false (default false)
//	request-skew   clock-skew tolerance of the request guard (duration; default 0)
//	msg-topic      topic of the msg events (default sis.msg)
//	schd-topic     topic of the schd events (default sis.schd)
//	ref-topic      topic of the reference events (default sis.ref)
//	max-bytes      largest payload accepted
//	identity.include-day-boundary  true|false (default false): the DTTM date joins the identity
//
// Unknown keys are an error, so that a misspelt setting is not ignored.
// Every problem is reported at once.
func ConfigFromSettings(settings map[string]string) (Config, error) {
	var (
		cfg  Config
		errs []error
	)
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		v := settings[k]
		switch k {
		case "timezone":
			loc, err := time.LoadLocation(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("timezone: %w", err))
			}
			cfg.Location = loc
		case "ignore":
			cfg.Ignore = []string{}
			for _, kind := range strings.Split(v, ",") {
				if kind = strings.TrimSpace(kind); kind != "" {
					cfg.Ignore = append(cfg.Ignore, kind)
				}
			}
		case "request-guard":
			on, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("request-guard: %q is not true or false", v))
			}
			cfg.RequestGuard = on
		case "identity.include-day-boundary":
			on, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("identity.include-day-boundary: %q is not true or false", v))
			}
			cfg.IncludeDayBoundary = on
		case "request-skew":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Errorf("request-skew: %q is not a duration", v))
			}
			cfg.RequestSkew = d
		case "msg-topic":
			cfg.MsgTopic = v
		case "schd-topic":
			cfg.SchdTopic = v
		case "ref-topic":
			cfg.RefTopic = v
		case "max-bytes":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Errorf("max-bytes: %q is not a positive number", v))
			}
			cfg.MaxBytes = n
		default:
			errs = append(errs, fmt.Errorf("%s: unknown setting (known: timezone, ignore, request-guard, request-skew, msg-topic, schd-topic, ref-topic, max-bytes, identity.include-day-boundary)", k))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("sis: %w", err)
	}
	return cfg, nil
}
