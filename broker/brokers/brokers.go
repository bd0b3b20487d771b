// Package brokers is the registry of broker adapters by kind, and what the
// adapters share: the interface of an adapter's configuration, the TLS
// settings every adapter takes, and the checks of those.
//
// Each adapter package (broker/kafka, broker/rabbitmq, broker/nats,
// broker/mqtt, broker/pulsar, broker/mem) owns a Config that decodes its
// block of the service's configuration and opens its driver, and offers an
// Adapter() that names its kind. A command builds a Registry of the adapters
// it links (cmd/msgx/adapters.go); the service's configuration decodes each
// broker block with the adapter its kind names, and the service opens the
// brokers through the Config interface alone: it imports no adapter.
package brokers

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/broker/driver"
)

// Config is an adapter's settings: the keys of a broker block beside kind,
// decoded from YAML (with the adapter's yaml tags) and from the environment.
// Implementations are pointers to structs of scalars, lists and nested
// structs, so that the configuration can list and override their keys.
type Config interface {
	// SetDefaults fills in the settings the block left out.
	SetDefaults()
	// Validate reports every invalid setting to c.
	Validate(c *Check)
	// Driver builds the broker's driver, not yet started.
	Driver(e Env) (driver.Broker, error)
}

// StartHinter is a Config that can say what else a failed start may mean
// (e.g. a refused SASL login shows as a closed connection).
type StartHinter interface {
	// StartHint is added to the error of a failed start ("" for none).
	StartHint() string
}

// Env is what a Config gets to build its driver.
type Env struct {
	// Name is the broker's name in the configuration.
	Name string
	// InstanceID is the process's instance id (Kafka static membership).
	InstanceID string
	Logger     *slog.Logger
	// Registerer takes the adapter's own metrics, already labelled with
	// the broker's name.
	Registerer prometheus.Registerer
}

// Prepare fills in the defaults of c and validates it as the broker name
// (as the service's configuration does): an error lists every problem.
func Prepare(name string, c Config) error {
	c.SetDefaults()
	chk := &Check{Prefix: name}
	c.Validate(chk)
	if len(chk.Problems) > 0 {
		return fmt.Errorf("broker %s: %s", name, strings.Join(chk.Problems, "; "))
	}
	return nil
}

// Adapter is one kind of broker.
type Adapter struct {
	// Kind is the value of a broker block's kind key ("kafka").
	Kind string
	// New returns empty settings of the kind to decode a block into.
	New func() Config
}

// Registry is the set of adapters a build links, by kind.
type Registry struct {
	adapters map[string]Adapter
}

// NewRegistry returns a registry of adapters; a kind given twice, or an
// adapter without a kind or New, panics (a programming error).
func NewRegistry(adapters ...Adapter) *Registry {
	r := &Registry{adapters: map[string]Adapter{}}
	for _, a := range adapters {
		r.Register(a)
	}
	return r
}

// Register adds an adapter.
func (r *Registry) Register(a Adapter) {
	if _, dup := r.adapters[a.Kind]; dup || a.Kind == "" || a.New == nil {
		panic(fmt.Sprintf("brokers: adapter %q registered twice, or without a kind or New", a.Kind))
	}
	r.adapters[a.Kind] = a
}

// Kinds lists the registered kinds in order.
func (r *Registry) Kinds() []string { return slices.Sorted(maps.Keys(r.adapters)) }

// New returns empty settings of kind; false when no adapter has it.
func (r *Registry) New(kind string) (Config, bool) {
	a, ok := r.adapters[kind]
	if !ok {
		return nil, false
	}
	return a.New(), true
}

// Check collects the problems of a broker's settings, each as
// "brokers.NAME.key: message" (Prefix "brokers.NAME").
type Check struct {
	// Production is whether the production profile applies: it refuses
	// settings that lose or expose data.
	Production bool
	// Prefix is the broker block's key path.
	Prefix string
	// EnvName names the environment variable of a key path (nil: none
	// is named).
	EnvName  func(path string) string
	Problems []string
}

// Addf reports a problem with key (relative to the block; "" for the
// block itself).
func (c *Check) Addf(key, format string, args ...any) {
	path := c.Prefix
	if key != "" {
		path += "." + key
	}
	c.Problems = append(c.Problems, path+": "+fmt.Sprintf(format, args...))
}

// Env is the hint to set key from its environment variable ("set
// MSGX_BROKERS_MAIN_SASL_PASSWORD"), for secrets.
func (c *Check) Env(key string) string {
	if c.EnvName == nil {
		return "set it"
	}
	return "set " + c.EnvName(c.Prefix+"."+key)
}
