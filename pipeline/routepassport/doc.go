// Package routepassport is the route-passport pipeline: it consumes records
// of pcp.request.survey-georeference.v1 through the broker port, validates
// them against the input contract (package schema) and converts their GeoJSON
// geometry to WKT (package geowkt), stores each route passport and two outbox
// events (pcp.route.in.v1, pcp.route.georeference.v1) in one database
// transaction, completes the delivery only after that commit, and sends
// records that break the contract to pcp.request.survey-georeference-dlq.v1
// with the reason in headers. docs/routepassport.md has the design, the
// payloads and the measurements.
package routepassport
