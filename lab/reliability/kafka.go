package reliability

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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
	reject  rejection
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
		if p, ok := req.(*kmsg.ProduceRequest); ok {
			if resp := k.reject.check(p); resp != nil {
				return resp, nil, true
			}
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
	if c.cfg.RejectOne {
		c.kw.reject.arm()
	}
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

// rejection is a broker that refuses one SIS msg event for itself, as a
// topic policy refuses a message by its content: armed, it picks the first
// sis.msg event produced (by its msgx-event-id header) and answers every
// produce that carries it with POLICY_VIOLATION for that event's partition
// (the other partitions of the request get NOT_ENOUGH_REPLICAS, which the
// client retries), until the operator's fix lifts it.
type rejection struct {
	mu      sync.Mutex
	armed   bool
	id, key string // the event refused, once picked
	refused int    // produce requests refused for it
	dec     kgo.Decompressor
}

// arm makes the next sis.msg event the refused one.
func (r *rejection) arm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed, r.id, r.key, r.dec = true, "", "", kgo.DefaultDecompressor()
}

// lift ends the refusal (the operator fixed the policy) and says which
// event it refused and how many times.
func (r *rejection) lift() (id, key string, refused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = false
	return r.id, r.key, r.refused
}

// picked is the refused event and its key, "" until one is picked.
func (r *rejection) picked() (id, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id, r.key
}

// check answers p when it carries the refused event, nil otherwise.
func (r *rejection) check(p *kmsg.ProduceRequest) kmsg.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.armed {
		return nil
	}
	type tp struct {
		ti int
		p  int32
	}
	var hit *tp
	for ti, t := range p.Topics {
		for _, part := range t.Partitions {
			for _, rec := range r.records(part.Records) {
				id := header(rec, "msgx-event-id")
				if r.id == "" && strings.Contains(id, ":msg:") {
					r.id, r.key = id, string(rec.Key)
				}
				if id != "" && id == r.id {
					hit = &tp{ti, part.Partition}
				}
			}
		}
	}
	if hit == nil {
		return nil
	}
	r.refused++
	resp := p.ResponseKind().(*kmsg.ProduceResponse)
	resp.Version = p.Version
	why := "msgx campaign: the broker refuses event " + r.id + " by policy"
	for ti, t := range p.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, part := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.BaseOffset = part.Partition, -1
			rp.ErrorCode = kerr.NotEnoughReplicas.Code
			if ti == hit.ti && part.Partition == hit.p {
				rp.ErrorCode, rp.ErrorMessage = kerr.PolicyViolation.Code, &why
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// records decodes the records of a produce request's batch; nil for what
// it cannot read (the request is then let through).
func (r *rejection) records(raw []byte) []kmsg.Record {
	var b kmsg.RecordBatch
	if b.ReadFrom(raw) != nil {
		return nil
	}
	data := b.Records
	if codec := kgo.CompressionCodecType(b.Attributes & 0x07); codec != kgo.CodecNone {
		var err error
		if data, err = r.dec.Decompress(data, codec); err != nil {
			return nil
		}
	}
	var out []kmsg.Record
	for range b.NumRecords {
		l, n := binary.Varint(data)
		if n <= 0 || l < 0 || int(l) > len(data)-n {
			return out
		}
		var rec kmsg.Record
		if rec.ReadFrom(data[:n+int(l)]) != nil {
			return out
		}
		out = append(out, rec)
		data = data[n+int(l):]
	}
	return out
}

func header(r kmsg.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// operatorToken is the campaign's operator-scope admin token.
const operatorToken = "rO9pN4vB7cX2zL6kJ3hG1fD8sA5qW0eTu"

// replayRejected is the operator's part of RejectOne, once the traffic has
// stopped: wait until the event Kafka refuses is DEAD; wait until every
// other flight's msg events are sent while its flight's later ones still
// wait (nothing of them sent); then lift the refusal and replay
// the event with msgx replay. What goes wrong is a violation of kind
// blocked.
func (c *campaign) replayRejected(ctx context.Context, pg *pgxpool.Pool) {
	blocked := func(format string, a ...any) {
		c.fig.Violations.Blocked = append(c.fig.Violations.Blocked, fmt.Sprintf(format, a...))
	}
	var id, key, target string
	var seq int64
	err := waitFor(ctx, 2*time.Minute, func() bool {
		id, key = c.kw.reject.picked()
		var status string
		return id != "" && pg.QueryRow(ctx, "SELECT status, target, id FROM msgx_outbox WHERE event_id = $1", id).
			Scan(&status, &target, &seq) == nil && status == "DEAD"
	})
	if err != nil {
		blocked("the event Kafka refuses (%q) did not go DEAD", id)
		c.kw.reject.lift()
		return
	}
	c.say("event %s (flight %s) DEAD: Kafka refused it; waiting for the other flights", id, key)
	var others, waiting, sent int
	err = waitFor(ctx, 3*time.Minute, func() bool {
		return pg.QueryRow(ctx, `SELECT
			(SELECT COUNT(*) FROM msgx_outbox WHERE target = $1 AND status = 'PENDING' AND partition_key <> $2),
			(SELECT COUNT(*) FROM msgx_outbox WHERE target = $1 AND status = 'PENDING' AND partition_key = $2 AND id > $3),
			(SELECT COUNT(*) FROM msgx_outbox_sent WHERE target = $1 AND partition_key = $2 AND id > $3)`, target, key, seq).
			Scan(&others, &waiting, &sent) == nil && others == 0
	})
	switch {
	case err != nil:
		blocked("the other flights' events did not flow while %s was DEAD: %d still pending", id, others)
	case sent > 0:
		blocked("%d events of flight %s were sent past its DEAD event %s", sent, key, id)
	case waiting == 0:
		blocked("no event of flight %s waited behind its DEAD event %s", key, id)
	}
	c.fig.RejectedWaiting = waiting
	_, _, refused := c.kw.reject.lift()
	c.fig.Rejected, c.fig.RejectedRefusals = id, refused
	in := c.get(0)
	if in == nil {
		blocked("no instance to replay %s on", id)
		return
	}
	out, err := exec.CommandContext(ctx, c.bin, "replay", "--source", "outbox", "--ids", id, "--reason", "campaign: the broker's policy fixed",
		"--yes", "--admin", "http://"+in.Admin, "--token", operatorToken).CombinedOutput()
	if err != nil {
		blocked("msgx replay %s: %v: %s", id, err, out)
		return
	}
	c.say("replayed %s; %d events of flight %s waited behind it", id, waiting, key)
}
