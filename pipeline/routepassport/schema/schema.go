// Package schema holds the input contract of the route-passport pipeline: the
// JSON Schema of a record of pcp.request.survey-georeference.v1
// (route-passport.schema.json) and examples of valid and invalid records
// with the errors the invalid ones must produce (examples/expected-errors.json).
package schema

import "embed"

// JSON is the JSON Schema (draft 2020-12) of an input record.
//
//go:embed route-passport.schema.json
var JSON []byte

// Examples holds examples/valid/*.json, examples/invalid/*.json and
// examples/expected-errors.json.
//
//go:embed examples
var Examples embed.FS
