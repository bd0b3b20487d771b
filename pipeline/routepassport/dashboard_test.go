package routepassport

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/deploy"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestDashboardMetrics: the dashboard's route-passport panels query
// metrics, and group by labels, that a running pipeline exports (the
// service-wide panels are checked by cmd/msgx's TestServeProduction).
func TestDashboardMetrics(t *testing.T) {
	e := newEnv(t, 1)
	reg := prometheus.NewRegistry()
	p := newPipeline(t, storetest.NewPostgres(t, store.WithMigrate(Schema())), e.broker(testkit.Quiet()), e.options(reg, testkit.Quiet())...)
	startPipeline(t, p)
	in := e.reader(e.routeIn)
	e.produce(append(records("D", 0, 3), []byte(`{"not":"a passport"`))...)
	in.waitFor(t, 3, 60*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for counter(t, reg, "route_passport_ingest_failure_total", nil) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the malformed record was not counted as a failure")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	qs, err := deploy.Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	var route []deploy.Query
	for _, q := range qs {
		if len(q.Metrics) > 0 && strings.HasPrefix(q.Metrics[0], "route_passport_") {
			route = append(route, q)
		}
	}
	if len(route) == 0 {
		t.Fatal("the dashboard has no route-passport panel")
	}
	for _, m := range deploy.CheckExposition(route, rec.Body.String(), nil) {
		t.Errorf("the dashboard queries %s", m)
	}
}
