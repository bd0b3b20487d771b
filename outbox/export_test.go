package outbox

// Floor returns where the claims of an unordered target's lane start.
func Floor(r *Relay, target string) int64 {
	for _, l := range r.lanes {
		if l.cfg.target == target {
			return l.floor.v.Load()
		}
	}
	return -1
}
