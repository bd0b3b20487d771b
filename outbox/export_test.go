package outbox

// WithHostClock sets the host clock that the database clock corrects.
var WithHostClock = withHostClock
