package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/msgx/msgx/broker/brokers"
)

// decodeBrokers decodes each broker block with the adapter of its kind (the
// kind the environment gives, when it overrides the file's). A key the
// adapter does not have is refused, naming the key and the kind's keys,
// unless its variable is set empty: that clears it (for a kind changed from
// the environment). cleared lists those variables, which applyEnv then
// accepts.
func (c *Config) decodeBrokers(adapters *brokers.Registry, environ []string) (problems []string, cleared map[string]bool) {
	if adapters == nil {
		adapters = brokers.NewRegistry()
	}
	env := envMap(environ)
	cleared = map[string]bool{}
	kinds := strings.Join(adapters.Kinds(), ", ")
	for _, name := range slices.Sorted(maps.Keys(c.Brokers)) {
		b := c.Brokers[name]
		key := "brokers." + name
		if v, ok := env[EnvName(key+".kind")]; ok {
			b.Kind = v
		}
		s, ok := adapters.New(b.Kind)
		switch {
		case b.Kind == "":
			problems = append(problems, fmt.Sprintf("%s.kind: missing (%s)", key, kinds))
		case !ok:
			problems = append(problems, fmt.Sprintf("%s.kind: %q is not a broker kind of this build (%s)", key, b.Kind, kinds))
		}
		if !ok {
			c.Brokers[name] = b
			continue
		}
		if b.node != nil {
			problems = append(problems, decodeSettings(b.node, s, key, b.Kind, env, cleared)...)
		}
		b.Settings, b.node = s, nil
		c.Brokers[name] = b
	}
	return problems, cleared
}

// decodeSettings decodes a broker block n (but its kind) into s.
func decodeSettings(n *yaml.Node, s brokers.Config, key, kind string, env map[string]string, cleared map[string]bool) []string {
	t := reflect.TypeOf(s).Elem()
	rest := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if k == "kind" {
			continue
		}
		if _, known := yamlField(t, k); !known {
			if v, set := env[EnvName(key+"."+k)]; set && v == "" {
				cleared[EnvName(key+"."+k)] = true
				continue
			}
		}
		rest.Content = append(rest.Content, n.Content[i], n.Content[i+1])
	}
	// The known keys are decoded even so: a problem is reported once.
	problems, known := unknownKeys(rest, t, key, kind)
	if err := known.Decode(s); err != nil {
		problems = append(problems, fmt.Sprintf("%s: %v", key, strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")))
	}
	return problems
}

// unknownKeys refuses the keys of mapping n that struct type t has no field
// for, and those of the nested blocks; known is n without them (a copy: n
// may be an anchor other blocks share).
func unknownKeys(n *yaml.Node, t reflect.Type, path, kind string) (problems []string, known *yaml.Node) {
	known = &yaml.Node{Kind: n.Kind, Tag: n.Tag, Line: n.Line, Column: n.Column}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		f, ok := yamlField(t, k)
		if !ok {
			has := "it has no keys beside kind"
			if keys := yamlKeys(t); len(keys) > 0 {
				has = "its keys here: " + strings.Join(keys, ", ")
			}
			problems = append(problems, fmt.Sprintf("%s.%s: line %d: not a key of a %s broker (%s)", path, k, n.Content[i].Line, kind, has))
			continue
		}
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if f.Type.Kind() == reflect.Struct && v.Kind == yaml.MappingNode {
			var nested []string
			nested, v = unknownKeys(v, f.Type, path+"."+k, kind)
			problems = append(problems, nested...)
		}
		known.Content = append(known.Content, n.Content[i], v)
	}
	return problems, known
}

// mergeKeys is n with its merge keys (<<: *base) resolved, so that the
// keys they bring are checked as the block's own; n itself when it has none.
func mergeKeys(n *yaml.Node) (*yaml.Node, error) {
	merge := false
	for i := 0; i < len(n.Content); i += 2 {
		merge = merge || n.Content[i].Tag == "!!merge"
	}
	if !merge {
		return n, nil
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return nil, err
	}
	var out yaml.Node
	if err := out.Encode(m); err != nil {
		return nil, err
	}
	return &out, nil
}

// yamlField is t's field of YAML key k.
func yamlField(t reflect.Type, k string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == k {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKeys are t's YAML keys in order.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if k := yamlName(t.Field(i)); k != "" {
			keys = append(keys, k)
		}
	}
	return slices.Sorted(slices.Values(keys))
}

// yamlName is the key of field f ("" for none).
func yamlName(f reflect.StructField) string {
	name := strings.Split(f.Tag.Get("yaml"), ",")[0]
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

// envMap is the MSGX_ variables of environ by name.
func envMap(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	return env
}
