package routepassport

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestTestControllerOffByDefault(t *testing.T) {
	e := newEnv(t, 1)
	p := newPipeline(t, storetest.NewPostgres(t, store.WithMigrate(Schema())), e.broker(testkit.Quiet()), WithTopics(e.input, e.dlq, e.routeIn, e.georef))
	srv := httptest.NewServer(p.TestController())
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(string(record("R-1", "n", line(1)))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("disabled controller answered %d", resp.StatusCode)
	}
	// Nothing reached the input topic: a record produced now is its first.
	e.produce(record("R-2", "n", line(2)))
	first := e.reader(e.input).waitFor(t, 1, 30*time.Second)[0]
	if first.Offset != 0 || string(first.Key) != "R-2" {
		t.Fatalf("the input topic's first record is %q at offset %d", first.Key, first.Offset)
	}
}

func TestTestControllerInjectsARecord(t *testing.T) {
	e := newEnv(t, 1)
	p := newPipeline(t, storetest.NewPostgres(t, store.WithMigrate(Schema())), e.broker(testkit.Quiet()),
		append(e.options(prometheus.NewRegistry(), testkit.Quiet()), WithTestController(true))...)
	startPipeline(t, p)
	srv := httptest.NewServer(p.TestController())
	defer srv.Close()
	if resp, err := http.Get(srv.URL); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %v %v", resp, err)
	}
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(string(record("R-7", "injected", line(7)))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST answered %d", resp.StatusCode)
	}
	out := e.reader(e.routeIn).waitFor(t, 1, 60*time.Second)
	if string(out[0].Key) != "R-7" {
		t.Fatalf("route-in event for %q", out[0].Key)
	}
}
