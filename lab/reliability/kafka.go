package reliability

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The Kafka side of the campaign. kfake runs in the harness's process and
// tells its clients its own address in metadata, so its connections cannot
// go through a proxy; its control hook sees every request of every client
// instead, which is where the outage is made and the group joins counted.

// routeGroup is the route-passport pipeline's consumer group (its default).
const routeGroup = "pcp-route-processing-service"

// errKafkaDown makes kfake close the connection a request came on.
var errKafkaDown = errors.New("reliability: Kafka outage")

// kafkaWatch is the campaign's hold on its kfake cluster.
type kafkaWatch struct {
	down    atomic.Bool
	refused atomic.Int64 // requests answered by closing their connection
	// joins counts the JoinGroup requests of the route-passport group
	// without a member id: a process's consumer joining (at a start or a
	// restart), as opposed to a member rejoining during a rebalance.
	joins atomic.Int64
}

// watchKafka installs the control hook on kf: while down, every request of
// every client (msgx's, the harness's producer and wire consumer alike) is
// answered by closing its connection, so nothing is produced, fetched,
// committed or heartbeated; otherwise requests pass and the route-passport
// group's joins are counted.
func watchKafka(kf *kfake.Cluster) *kafkaWatch {
	k := &kafkaWatch{}
	kf.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		if k.down.Load() {
			k.refused.Add(1)
			return nil, errKafkaDown, true
		}
		if j, ok := req.(*kmsg.JoinGroupRequest); ok && j.Group == routeGroup && j.MemberID == "" {
			k.joins.Add(1)
		}
		return nil, nil, false
	})
	return k
}

// kafkaOutage takes Kafka down for d while the traffic runs.
func (c *campaign) kafkaOutage(ctx context.Context, d time.Duration) {
	c.say("Kafka outage of %s: every request answered by closing its connection", d)
	before := c.kw.refused.Load()
	c.kw.down.Store(true)
	pause(ctx, d)
	c.kw.down.Store(false)
	c.fig.KafkaOutages++
	c.fig.KafkaOutageLength = d
	c.fig.KafkaRefused += int(c.kw.refused.Load() - before)
	c.say("Kafka back; %d requests were refused", c.kw.refused.Load()-before)
}

// kafkaEnv is the environment a Kafka outage of d needs: past 10 s, the
// sample's relay backoff (1 s doubling to 60 s) instead of the shortened one.
// With the campaign's 5 s publish timeout an event's five attempts would then
// span about 40 s instead of 28 s: the retry budget an outage no longer
// spends (the relay pauses the target and probes with this backoff), which
// TestBrokerOutageLongerThanTheRetryBudget checks with a longer outage.
func kafkaEnv(d time.Duration) []string {
	if d <= 10*time.Second {
		return nil
	}
	return []string{"MSGX_RELAY_BACKOFF_INITIAL=1s", "MSGX_RELAY_BACKOFF_MAX=60s"}
}

// instanceEnv is envFor plus the slot's own stable instance id: both instances
// run on this host with admin port 0, so the default (the host name) would
// be shared, and a restart in a slot must take back that slot's Kafka group
// membership.
func (c *campaign) instanceEnv(slot int) []string {
	return append(c.envFor(slot), "MSGX_INSTANCE_ID=reliability-"+strconv.Itoa(slot))
}

// routeGroupFigures reads the route-passport group at the end: its
// generation (one per completed rebalance) and its members.
func routeGroupFigures(kf *kfake.Cluster, k *kafkaWatch, f *Figures) {
	f.RouteJoins = int(k.joins.Load())
	if g := kf.GroupInfo(routeGroup); g != nil {
		f.RouteGeneration, f.RouteMembers = int(g.Epoch), len(g.Members)
	}
}

// routeTiming measures the route-passport pipeline's liveness. Ingestion:
// how long each valid record waited until the pipeline stored it
// (route_passport_sources.processed_at, the database's time, minus the
// record's timestamp; both clocks are this host's), and the longest time
// without any ingestion while records kept coming. Events: how long each
// waited for its event on the route-in topic (this adds the relay, whose
// claims a killed instance holds until their lease expires).
func routeTiming(ctx context.Context, pg *pgxpool.Pool, recs []produced, w *wire, f *Figures) error {
	produceAt := map[string]time.Time{}
	for _, p := range recs {
		if p.hostile == "" {
			produceAt[fmt.Sprintf("%d/%d", p.partition, p.offset)] = p.at
		}
	}
	rows, err := pg.Query(ctx, "SELECT source_id, processed_at FROM route_passport_sources WHERE source_id LIKE $1", routeInput+"/%")
	if err != nil {
		return fmt.Errorf("route-passport sources: %w", err)
	}
	var ingest []time.Duration
	var times []time.Time
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			rows.Close()
			return err
		}
		if p, ok := produceAt[strings.TrimPrefix(id, routeInput+"/")]; ok {
			ingest = append(ingest, at.Sub(p))
			times = append(times, at)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	f.RouteIngestMax, f.RouteIngestP99 = maxAndP99(ingest)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(times); i++ {
		f.RouteGapMax = max(f.RouteGapMax, times[i].Sub(times[i-1]))
	}

	wrecs, _ := w.snapshot()
	seen := map[string]bool{}
	var lags []time.Duration
	for _, r := range wrecs {
		if r.topic != routeIn || seen[r.id] {
			continue
		}
		seen[r.id] = true
		if at, ok := produceAt[fmt.Sprintf("%d/%d", r.srcPartition, r.srcOffset)]; ok {
			lags = append(lags, r.at.Sub(at))
		}
	}
	f.RouteLagMax, f.RouteLagP99 = maxAndP99(lags)
	return nil
}

func maxAndP99(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)-1], ds[len(ds)*99/100]
}
