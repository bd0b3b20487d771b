// Package testkit holds what the repository's tests share: a bounded wait
// for a condition (Eventually), a bounded quiet period in which a condition
// must keep holding (Consistently), a logger that keeps a test's output quiet
// (Quiet), the value of a metric (MetricValue), and a log destination that
// tests read while the code under test writes to it (Buffer).
package testkit
