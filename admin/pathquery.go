package admin

import (
	"context"
	"maps"
	"net/http"
)

// pathQuery answers a registered query whose main parameters are in the
// path (GET /v1/flights/{flid}/history): the path's values are the
// parameters of those names, in place of any the query string gives.
func (s *Server) pathQuery(name string, pathParams ...string) handler {
	return func(ctx context.Context, r *http.Request, _ string) (any, error) {
		params := maps.Clone(map[string][]string(r.URL.Query()))
		for _, p := range pathParams {
			params[p] = []string{r.PathValue(p)}
		}
		return s.Query(ctx, name, params)
	}
}
