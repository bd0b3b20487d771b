package routepassport

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/msgx/msgx/broker"
)

// TestController returns the test controller: POST a record (the request
// body) and it is sent, confirmed, to the input topic with the record's
// routeId as key, as a producer would. It exists for test environments and
// is off unless enabled (WithTestController, the configuration key
// route-processing.test-controller.enabled): when off, every request gets
// 404 and nothing is sent.
func (p *Pipeline) TestController() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.cfg.testController {
			http.Error(w, "test controller disabled (route-processing.test-controller.enabled is false)", http.StatusNotFound)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a route passport record", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(p.cfg.maxRecordBytes)))
		if err != nil {
			http.Error(w, "record larger than "+strconv.Itoa(p.cfg.maxRecordBytes)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		// The key is the routeId when there is one; the record is sent as
		// it came either way, so that invalid records can be tested too.
		var head struct {
			RouteID string `json:"routeId"`
		}
		_ = json.Unmarshal(body, &head)
		msg := &broker.Message{Key: head.RouteID, Payload: body}
		if err := p.b.SendConfirmed(r.Context(), p.cfg.inputTopic, msg); err != nil {
			p.log.Warn("test controller: send failed", "topic", p.cfg.inputTopic, "exception_message", err.Error())
			http.Error(w, "send failed: "+err.Error(), http.StatusBadGateway)
			return
		}
		p.log.Info("test controller: record injected", "topic", p.cfg.inputTopic, "source_key", head.RouteID, "payload_size", len(body))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]string{"topic": p.cfg.inputTopic, "key": head.RouteID})
	})
}
