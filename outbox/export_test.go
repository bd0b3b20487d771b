package outbox

// WithHostClock sets the host clock that the database clock corrects.
var WithHostClock = withHostClock

// Floor returns where the claims of an unordered target's lane start.
func Floor(r *Relay, target string) int64 {
	for _, l := range r.lanes {
		if l.cfg.target == target {
			return l.floor.v.Load()
		}
	}
	return -1
}
