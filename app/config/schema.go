package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/msgx/msgx/broker/brokers"
)

// SchemaID is the $id of the configuration's JSON Schema.
const SchemaID = "https://github.com/msgx/msgx/deploy/msgx.schema.json"

// durationPattern is what time.ParseDuration takes (the configuration's
// durations: 500ms, 10s, 1h30m, 0).
const durationPattern = `^(0|[-+]?(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))*)$`

// Schema is the JSON Schema (2020-12) of the configuration file, made from
// the configuration's types and, for each broker kind of adapters, from that
// adapter's Config: the keys `serve --check` knows, each with its type, and
// no other (an unknown key is an error, as it is at load). Editors check and
// complete a file by it (deploy/msgx.schema.json, `msgx config schema`).
func Schema(adapters *brokers.Registry) ([]byte, error) {
	root := object(reflect.TypeOf(Config{}))
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = SchemaID
	root["title"] = "msgx configuration"
	root["description"] = "The configuration file of msgx serve (docs/operations.md, Configuration reference). Every key can also be set by MSGX_ and its path in upper case."
	props := root["properties"].(map[string]any)
	props["brokers"] = map[string]any{
		"type":                 "object",
		"description":          "Brokers by name; each block's keys are those of its kind.",
		"additionalProperties": broker(adapters),
	}
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("config: schema: %w", err)
	}
	return append(b, '\n'), nil
}

// broker is the schema of a broker block: kind, then the keys of the
// adapter that kind names.
func broker(adapters *brokers.Registry) map[string]any {
	kinds := adapters.Kinds()
	var cases []any
	for _, k := range kinds {
		s, _ := adapters.New(k)
		settings := object(reflect.TypeOf(s).Elem())
		cases = append(cases, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"kind": map[string]any{"const": k}}},
			"then": map[string]any{"properties": settings["properties"]},
		})
	}
	return map[string]any{
		"type":                  "object",
		"required":              []string{"kind"},
		"properties":            map[string]any{"kind": map[string]any{"enum": kinds}},
		"allOf":                 cases,
		"unevaluatedProperties": false,
	}
}

// object is the schema of a struct: its yaml keys, no other.
func object(t reflect.Type) map[string]any {
	props := map[string]any{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		props[tag] = typeSchema(f.Type)
	}
	return map[string]any{"type": "object", "properties": props, "additionalProperties": false}
}

var durationTypes = map[reflect.Type]bool{reflect.TypeOf(Duration(0)): true, reflect.TypeOf(time.Duration(0)): true}

// typeSchema is the schema of a value of type t as YAML writes it.
func typeSchema(t reflect.Type) map[string]any {
	if durationTypes[t] {
		return map[string]any{"type": "string", "pattern": durationPattern}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeSchema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": typeSchema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem())}
	case reflect.Struct:
		return object(t)
	}
	return map[string]any{}
}
