package routepassport

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// OptionsFromSettings reads options from the string settings a service
// configuration carries for the pipeline (pipelines.routepassport.options):
//
//	test-controller     true|false: the record-injecting endpoint
//	                    (route-processing.test-controller.enabled; default false)
//	group               consumer group (default pcp-route-processing-service)
//	input-topic, dead-letter-topic, route-in-topic, georeference-topic
//	                    the four topics (defaults: the seed's names)
//	max-record-bytes    the input limit in bytes (default DefaultMaxRecordBytes);
//	                    with DeadLetterRoom it must fit under the broker's
//	                    message limit
//	stuck-after         age of the oldest unacknowledged record at which
//	                    the pipeline counts as stuck (default 5m)
//	stuck-after-failures
//	                    consecutive transient failures of a record at which
//	                    it counts as stuck (default 10)
//
// Unknown keys are an error; every problem is reported at once.
func OptionsFromSettings(settings map[string]string) ([]Option, error) {
	var (
		opts []Option
		errs []error
	)
	topics := map[string]string{
		"input-topic": InputTopic, "dead-letter-topic": DeadLetterTopic,
		"route-in-topic": RouteInTopic, "georeference-topic": GeoreferenceTopic,
	}
	stuckAge, stuckFailures := defaults().stuckAfter, defaults().stuckFailures
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		v := settings[k]
		switch k {
		case "test-controller":
			on, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("test-controller: %q is not true or false", v))
			}
			opts = append(opts, WithTestController(on))
		case "group":
			opts = append(opts, WithGroup(v))
		case "max-record-bytes":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("max-record-bytes: %q is not a positive number of bytes", v))
			}
			opts = append(opts, WithMaxRecordBytes(n))
		case "input-topic", "dead-letter-topic", "route-in-topic", "georeference-topic":
			if v == "" {
				errs = append(errs, fmt.Errorf("%s: empty", k))
			}
			topics[k] = v
		case "stuck-after":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("stuck-after: %q is not a positive duration", v))
			}
			stuckAge = d
		case "stuck-after-failures":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("stuck-after-failures: %q is not a number of at least 1", v))
			}
			stuckFailures = n
		default:
			errs = append(errs, fmt.Errorf("%s: unknown setting (known: test-controller, group, max-record-bytes, input-topic, dead-letter-topic, route-in-topic, georeference-topic, stuck-after, stuck-after-failures)", k))
		}
	}
	opts = append(opts, WithStuckAfter(stuckAge, stuckFailures))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("routepassport: %w", err)
	}
	return append(opts, WithTopics(topics["input-topic"], topics["dead-letter-topic"], topics["route-in-topic"], topics["georeference-topic"])), nil
}
