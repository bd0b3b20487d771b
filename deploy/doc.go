// Package deploy holds what running msgx needs besides the binary: the
// configuration samples, the alert rules, the container image's build
// (container/), the Kubernetes manifests (kubernetes/) and the Grafana
// dashboard. Its tests check each of them against the code.
package deploy
