package admin

import (
	"bytes"
	_ "embed"
	"net/http"
	"slices"
)

// openAPIDoc is the OpenAPI 3 document of the API, written by hand beside
// the handlers it describes; a test holds the two together (every route
// registered is documented, every documented answer is what the server
// answers).
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the OpenAPI 3 document of the API (GET /v1/openapi.json).
func OpenAPI() []byte { return bytes.Clone(openAPIDoc) }

// openAPI serves the document without a token: it describes the API and
// holds nothing of the service's state (it is a file of the source tree),
// and the tools that read it (generators, API explorers) fetch it before
// they hold credentials. Admit still applies: a foreign Host is refused.
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
}

// routeMux is the server's ServeMux, remembering the patterns registered on
// it: http.ServeMux cannot list them, and the OpenAPI document is checked
// against them.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers h for pattern.
func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Routes returns the patterns the server serves ("GET /v1/status"), in the
// order they were registered. Pipelines' handlers, mounted beside the
// server on the admin listener (RequireOperator), are not among them.
func (s *Server) Routes() []string { return slices.Clone(s.mux.patterns) }
