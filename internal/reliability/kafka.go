package reliability

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

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
// sample's relay retry policy (1 s doubling to 60 s, 15 s publish timeout:
// about 90 s before an event's five attempts are spent) instead of the
// shortened one (about 28 s), so the outage is checked against what
// production would do rather than against the campaign's haste.
func kafkaEnv(d time.Duration) []string {
	if d <= 10*time.Second {
		return nil
	}
	return []string{"MSGX_RELAY_BACKOFF_INITIAL=1s", "MSGX_RELAY_BACKOFF_MAX=60s", "MSGX_RELAY_PUBLISH_TIMEOUT=15s"}
}

// instanceEnv gives each slot its own stable instance id: both instances
// run on this host with admin port 0, so the default (the host name) would
// be shared, and a restart in a slot must take back that slot's Kafka group
// membership.
func (c *campaign) instanceEnv(slot int) []string {
	return append(c.env[:len(c.env):len(c.env)], "MSGX_INSTANCE_ID=reliability-"+strconv.Itoa(slot))
}

// routeGroupFigures reads the route-passport group at the end: its
// generation (one per completed rebalance) and its members.
func routeGroupFigures(kf *kfake.Cluster, k *kafkaWatch, f *Figures) {
	f.RouteJoins = int(k.joins.Load())
	if g := kf.GroupInfo(routeGroup); g != nil {
		f.RouteGeneration, f.RouteMembers = int(g.Epoch), len(g.Members)
	}
}

// routeTiming measures the route-passport pipeline's liveness from the
// wire: how long each valid record waited for its event on the route-in
// topic (its timestamp minus the input record's), and the longest gap
// between two successive first events while records kept coming.
func routeTiming(recs []produced, w *wire, f *Figures) {
	produceAt := map[string]time.Time{}
	for _, p := range recs {
		if p.hostile == "" {
			produceAt[fmt.Sprintf("%d/%d", p.partition, p.offset)] = p.at
		}
	}
	wrecs, _ := w.snapshot()
	seen := map[string]bool{}
	var lags []time.Duration
	var times []time.Time
	for _, r := range wrecs {
		if r.topic != routeIn || seen[r.id] {
			continue
		}
		seen[r.id] = true
		at, ok := produceAt[fmt.Sprintf("%d/%d", r.srcPartition, r.srcOffset)]
		if !ok {
			continue
		}
		lags = append(lags, r.at.Sub(at))
		times = append(times, r.at)
	}
	if len(lags) == 0 {
		return
	}
	slices.Sort(lags)
	f.RouteLagMax = lags[len(lags)-1]
	f.RouteLagP99 = lags[len(lags)*99/100]
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(times); i++ {
		f.RouteGapMax = max(f.RouteGapMax, times[i].Sub(times[i-1]))
	}
}
