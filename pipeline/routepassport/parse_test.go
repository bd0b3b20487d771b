package routepassport

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/msgx/msgx/broker"
)

// A batch parsed on several goroutines gives each delivery the identity and
// the outcome one goroutine gives it, in the order of the batch (run with
// -race: the parser is shared).
func TestParseAllMatchesOneByOne(t *testing.T) {
	var ds []*broker.Delivery
	for i := range 100 {
		payload := record(fmt.Sprintf("R-%d", i%7), fmt.Sprintf("route %d", i), line(i))
		switch i % 10 {
		case 3:
			payload = []byte(`{"routeId":"bad","geometry":{`)
		case 7:
			payload = record("bad-geometry", "n", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`)
		}
		ds = append(ds, &broker.Delivery{Message: broker.Message{Key: fmt.Sprintf("R-%d", i%7), Payload: payload}, Topic: "in"})
	}
	build := func(workers int) *Pipeline {
		cfg := defaults()
		cfg.parseWorkers = workers
		parser, err := NewParser(cfg.maxRecordBytes, cfg.limits)
		if err != nil {
			t.Fatal(err)
		}
		return &Pipeline{cfg: cfg, parser: parser}
	}
	want := build(1).parseAll(ds)
	got := build(4).parseAll(ds)
	if len(got) != len(ds) {
		t.Fatalf("%d items for %d deliveries", len(got), len(ds))
	}
	for i := range ds {
		if got[i].d != ds[i] || got[i].sourceID != want[i].sourceID || !reflect.DeepEqual(got[i].rec, want[i].rec) ||
			fmt.Sprint(got[i].err) != fmt.Sprint(want[i].err) {
			t.Fatalf("item %d: got %+v, want %+v", i, got[i], want[i])
		}
		if (i%10 == 3 || i%10 == 7) != (got[i].err != nil) {
			t.Fatalf("item %d: error %v", i, got[i].err)
		}
	}
}
