// Package reliability is the fault campaign on the real msgx binary: it
// builds and runs `msgx serve` in the production profile against
// PostgreSQL, a MariaDB mailbox and a Kafka (kfake), feeds traffic the way
// the legacy systems do, injects faults (kill -9, crash loops, connection
// cuts, outages and black holes through TCP proxies, Kafka outages through
// kfake's control hook, two instances, clocks skewed between them, real
// restarts of private database servers; RabbitMQ feeding the sis stream's
// broker source, cut, black-holed and restarted: rabbit.go), records
// the history and checks it afterwards against an oracle of its own.
package reliability

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/go-sql-driver/mysql" // the mailbox driver
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/msgx/msgx/internal/tcpproxy"
	"github.com/msgx/msgx/source/mailbox"
)

// Config is one campaign.
type Config struct {
	Root        string // the module's root (the binary is built from it)
	Workdir     string // binary and logs
	PostgresURL string // server URL; a fresh schema is created and dropped
	MariaDSN    string // go-sql-driver DSN; a uniquely named mailbox table is created and dropped
	Race        bool   // build the binary with -race

	Duration  time.Duration // traffic and faults
	Kills     int           // kill -9 at random moments, spread over Duration
	CrashLoop time.Duration // a crash loop (killed every 1–2 s) of this length, 0: none
	Cuts      int           // cuts of every PostgreSQL and MariaDB connection (a restart as msgx sees it)
	Outage    time.Duration // one PostgreSQL outage (refused) and one black hole of the MariaDB connections of this length, 0: none
	Second    bool          // run a second instance all along (the kills pick either)
	BadInput  bool          // send the hostile bodies through the ingress and the mailbox
	// LateRow: a writer takes a mailbox id and commits its row only after
	// the poller declared the id a permanent gap (max-commit-delay is
	// lateCommitDelay then). The default late-rows policy refuses it: it
	// must end DEAD as LATE, recorded, and not applied.
	LateRow   bool
	Soak      time.Duration // steady traffic without faults after them; memory and goroutines are scraped over it
	Skew      time.Duration // clock skew: the first instance runs this far ahead of the host, the second this far behind
	PrivateDB bool          // run PostgreSQL and MariaDB servers of the campaign's own instead of PostgresURL and MariaDSN
	Restarts  int           // real restarts of the private servers (PrivateDB), spread over Duration
	// KafkaOutage is one outage of the in-process Kafka of this length (every
	// request's connection closed), 0: none.
	KafkaOutage time.Duration
	// RejectOne: as Kafka comes back from the outage, it refuses the first
	// SIS msg event it is sent (a per-key target) for itself, until the
	// campaign, as the operator, has seen the event DEAD with its flight's
	// later events waiting behind it while the other flights' flow, and
	// replays it (see replayRejected). The oracle's per-key order on the
	// wire then covers the replay.
	RejectOne bool
	// RabbitURL is the RabbitMQ server of the RabbitMQ sender and the sis
	// stream's broker source (see rabbit.go); "" and no PrivateRabbit: no
	// RabbitMQ traffic.
	RabbitURL       string
	RabbitOutage    time.Duration // one RabbitMQ outage (cut and refused) of this length, 0: none
	RabbitBlackHole time.Duration // one black hole of the RabbitMQ connections of this length, 0: none
	PrivateRabbit   bool          // run a RabbitMQ node of the campaign's own instead of RabbitURL
	RabbitRestarts  int           // kill -9 and start of the private node (PrivateRabbit), spread over Duration
	// Aimed is the number of aimed kills: an instance restarted with one
	// failpoint armed, cycling through failpoint.Points (see aimed.go).
	Aimed int
	// StreamLease is the SIS stream's lease (streams.sis.lease), 0: the
	// sample's. After a leader dies, the stream waits for it to expire.
	StreamLease time.Duration

	Writers int           // concurrent mailbox writers
	Clients int           // concurrent HTTP ingress clients
	Flights int           // flights announced by the DNLD
	Routes  int           // routes of the route-passport records on Kafka; 0: the pipeline is not run
	Pace    time.Duration // pause between two messages of one writer or client
	DupRate float64       // share of mailbox inserts whose acknowledgement is "lost": the writer inserts again

	Progress io.Writer // a line per phase and fault
}

// Figures are the result of a campaign.
type Figures struct {
	Kills, CrashLoopKills, Cuts, Outages, BlackHoles int
	CrashLoop                                        time.Duration
	OutageLength                                     time.Duration
	Instances                                        int
	Skew                                             time.Duration
	Restarts                                         int // real restarts of both private servers
	MailboxRows, MailboxDuplicates, IngressPosts     int
	IngressRetries                                   int
	BadInputTried, BadInputRefused                   int // refused: at the door (HTTP 4xx, the mailbox's own column check)
	BadInputOutcomes                                 []string
	LateRows, LateRefused                            int // rows committed after their gap was declared permanent; of them refused as LATE
	EventsExpected, EventsSeen, WireDuplicates       int
	RouteRecords                                     int // valid route-passport records produced
	KafkaOutages, KafkaRefused                       int // Kafka outages, requests refused in them
	KafkaOutageLength                                time.Duration
	Rejected                                         string        // the event Kafka refused (RejectOne)
	RejectedRefusals, RejectedWaiting                int           // produce requests refused for it; its key's events waiting behind it before the replay
	RouteJoins, RouteGeneration, RouteMembers        int           // route-passport group: joins of a process, rebalances, members at the end
	RouteIngestMax, RouteIngestP99, RouteGapMax      time.Duration // see routeTiming
	RouteLagMax, RouteLagP99                         time.Duration
	Goroutines, RSS                                  []float64 // scraped during the run
	RabbitSent, RabbitConfirmed, RabbitResent        int       // the RabbitMQ sender's publishes, confirmed messages, re-sends after no confirm
	RabbitLostAcks, RabbitPending                    int       // re-sends after a simulated lost confirm; never confirmed at the end
	RabbitRows, RabbitDuplicates                     int       // mailbox rows of confirmed RabbitMQ messages, of them later copies
	RabbitOutages, RabbitBlackHoles, RabbitRestarts  int
	RabbitOutageLength, RabbitBlackHoleLength        time.Duration
	RabbitStart                                      time.Duration   // the private node's first start
	RabbitRestartTimes                               []time.Duration // each restart: from the kill until it took connections
	Drain, Soak                                      time.Duration
	Tables                                           map[string]int
	Aimed                                            map[string]*AimedPoint // by failpoint
	Violations                                       Violations
}

func (f *Figures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kills %d (crash loop: %d in %s), connection cuts %d, outages %d of %s, black holes %d, instances %d\n",
		f.Kills+f.CrashLoopKills, f.CrashLoopKills, f.CrashLoop, f.Cuts, f.Outages, f.OutageLength, f.BlackHoles, f.Instances)
	b.WriteString(f.aimedString())
	fmt.Fprintf(&b, "clock skew ±%s between the instances, real database restarts %d\n", f.Skew, f.Restarts)
	fmt.Fprintf(&b, "mailbox rows %d (duplicate inserts %d), ingress posts %d (retries %d), bad inputs %d (%d refused at the door)\n",
		f.MailboxRows, f.MailboxDuplicates, f.IngressPosts, f.IngressRetries, f.BadInputTried, f.BadInputRefused)
	fmt.Fprintf(&b, "late mailbox rows %d (refused as LATE %d)\n", f.LateRows, f.LateRefused)
	fmt.Fprintf(&b, "route-passport records %d; group: %d joins, generation %d, %d members at the end\n",
		f.RouteRecords, f.RouteJoins, f.RouteGeneration, f.RouteMembers)
	fmt.Fprintf(&b, "route-passport wait until ingested max %s, p99 %s; longest time without ingestion %s; until the event max %s, p99 %s\n",
		f.RouteIngestMax.Round(time.Millisecond), f.RouteIngestP99.Round(time.Millisecond), f.RouteGapMax.Round(time.Millisecond),
		f.RouteLagMax.Round(time.Millisecond), f.RouteLagP99.Round(time.Millisecond))
	fmt.Fprintf(&b, "Kafka outages %d of %s (%d requests refused)\n", f.KafkaOutages, f.KafkaOutageLength, f.KafkaRefused)
	if f.Rejected != "" {
		fmt.Fprintf(&b, "event refused by Kafka: %s (%d produce requests), %d events of its key waited behind it until the replay\n", f.Rejected, f.RejectedRefusals, f.RejectedWaiting)
	}
	b.WriteString(f.rabbitFigures())
	fmt.Fprintf(&b, "events expected %d, seen %d, duplicates on the wire %d, drain after the faults %s\n",
		f.EventsExpected, f.EventsSeen, f.WireDuplicates, f.Drain.Round(time.Second))
	if n := len(f.Goroutines); n > 0 {
		if f.Soak > 0 {
			fmt.Fprintf(&b, "over the soak of %s: ", f.Soak)
		}
		fmt.Fprintf(&b, "goroutines first/max/last %.0f/%.0f/%.0f, RSS MiB first/max/last %.0f/%.0f/%.0f (%d scrapes)\n",
			f.Goroutines[0], maxOf(f.Goroutines), f.Goroutines[n-1], f.RSS[0]/(1<<20), maxOf(f.RSS)/(1<<20), f.RSS[n-1]/(1<<20), n)
	}
	fmt.Fprintf(&b, "tables %v\n", f.Tables)
	sort.Strings(f.BadInputOutcomes)
	for _, o := range f.BadInputOutcomes {
		fmt.Fprintf(&b, "bad input %s\n", o)
	}
	v := f.Violations
	fmt.Fprintf(&b, "lost %d, doubled %d, order %d, state %d, dead by faults %d, stuck %d, wrong duplicates %d, bad-input fates %d, leaks %d, blocked %d\n",
		len(v.Lost), len(v.Doubled), len(v.Order), len(v.State), len(v.DeadByFault), len(v.Stuck), len(v.WrongDup), len(v.BadInputFates), len(v.Leak), len(v.Blocked))
	b.WriteString(v.String())
	return b.String()
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// campaign is the running state of one Run.
type campaign struct {
	cfg     Config
	fig     *Figures
	bin     string
	env     []string
	config  string
	log     io.Writer
	logMu   sync.Mutex
	mu      sync.Mutex
	inst    []*Instance // by slot; nil while down
	kw      *kafkaWatch
	hostile map[int64]string
	private *privateDBs    // PrivateDB: the servers Restarts restarts
	rabbit  *rabbitSide    // RabbitMQ traffic and faults; nil: none
	late    map[int64]bool // ids of the rows LateRow committed late
	aim     *aimer         // Aimed
}

func (c *campaign) say(format string, args ...any) {
	if c.cfg.Progress != nil {
		fmt.Fprintf(c.cfg.Progress, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
	}
}

// Run runs the campaign and checks the history. The error is the harness's
// own failure; what the checker finds is in Figures.Violations.
func Run(ctx context.Context, cfg Config) (*Figures, error) {
	if cfg.Restarts > 0 && !cfg.PrivateDB {
		return nil, errors.New("real restarts need the private servers (PrivateDB)")
	}
	if (cfg.RabbitRestarts > 0 && !cfg.PrivateRabbit) || ((cfg.RabbitOutage > 0 || cfg.RabbitBlackHole > 0) && !cfg.PrivateRabbit && cfg.RabbitURL == "") {
		return nil, errors.New("RabbitMQ faults need RabbitMQ traffic (RabbitURL or PrivateRabbit), restarts the private node")
	}
	if cfg.RejectOne && cfg.KafkaOutage == 0 {
		return nil, errors.New("a rejected event (RejectOne) comes with a Kafka outage")
	}
	c := &campaign{cfg: cfg, fig: &Figures{Tables: map[string]int{}, Skew: cfg.Skew}, hostile: map[int64]string{}, late: map[int64]bool{}}
	if cfg.PrivateDB {
		p, err := startPrivate(ctx, c.say)
		if err != nil {
			return nil, err
		}
		defer p.stop()
		c.private = p
		cfg.PostgresURL, cfg.MariaDSN = p.pg.URL(), p.maria.DSN()
		c.cfg = cfg
	}
	if cfg.PrivateRabbit || cfg.RabbitURL != "" {
		stop, err := c.openRabbit(ctx)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	if err := os.MkdirAll(cfg.Workdir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(cfg.Workdir, "msgx.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	c.log = logf
	c.say("building msgx")
	if c.bin, err = Build(ctx, cfg.Root, cfg.Workdir, cfg.Race); err != nil {
		return nil, err
	}
	// The sample production configuration, plus the route-passport
	// pipeline on the same broker when routes are asked for.
	base, err := os.ReadFile(filepath.Join(cfg.Root, "deploy", "msgx.production.yaml"))
	if err != nil {
		return nil, err
	}
	if cfg.Routes > 0 {
		const entry = "  routepassport:\n    broker: main\n"
		if i := bytes.Index(base, []byte("\npipelines:\n")); i >= 0 {
			i += len("\npipelines:\n")
			base = append(base[:i:i], append([]byte(entry), base[i:]...)...)
		} else {
			base = append(base, "pipelines:\n"+entry...)
		}
	}
	if c.rabbit != nil {
		if base, err = c.rabbit.addConfig(base); err != nil {
			return nil, err
		}
	}
	c.config = filepath.Join(cfg.Workdir, "msgx.yaml")
	if err := os.WriteFile(c.config, base, 0o644); err != nil {
		return nil, err
	}

	// PostgreSQL: a fresh schema, reached by msgx through a proxy.
	var rb [4]byte
	_, _ = crand.Read(rb[:])
	suffix := hex.EncodeToString(rb[:])
	schema := "rel_" + suffix
	pg, err := openPool(ctx, cfg.PostgresURL, schema)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	defer pg.Close()
	if _, err := pg.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, err
	}
	defer func() { _, _ = pg.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") }()
	pu, err := url.Parse(cfg.PostgresURL)
	if err != nil {
		return nil, err
	}
	pgProxy, err := tcpproxy.New(pu.Host)
	if err != nil {
		return nil, err
	}
	defer pgProxy.Close()
	pu.Host = pgProxy.Addr()
	q := pu.Query()
	q.Set("search_path", schema)
	pu.RawQuery = q.Encode()

	// MariaDB: a uniquely named mailbox; the writers reach it directly, msgx
	// through a proxy.
	table := "cminmsgs_rel_" + suffix
	mb, err := mailbox.OpenMySQL(ctx, cfg.MariaDSN, mailbox.WithTable(table))
	if err != nil {
		return nil, fmt.Errorf("MariaDB: %w", err)
	}
	if err := mb.Create(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = mb.Drop(context.Background()); _ = mb.Close() }()
	mdb, err := sql.Open("mysql", cfg.MariaDSN)
	if err != nil {
		return nil, err
	}
	defer mdb.Close()
	maddr, mproxyDSN, err := proxiedMaria(cfg.MariaDSN)
	if err != nil {
		return nil, err
	}
	mProxy, err := tcpproxy.New(maddr)
	if err != nil {
		return nil, err
	}
	defer mProxy.Close()
	mproxyDSN = strings.Replace(mproxyDSN, "@@PROXY@@", mProxy.Addr(), 1)

	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, append([]string{"sis.msg", "sis.schd"}, routeTopics...)...))
	if err != nil {
		return nil, err
	}
	defer kf.Close()
	c.kw = watchKafka(kf)
	w, stopWire, err := consume(ctx, kf.ListenAddrs(), "sis.msg", "sis.schd", routeDLQ, routeIn, routeGeo)
	if err != nil {
		return nil, err
	}
	defer stopWire()

	c.env = []string{
		"MSGX_STORE_DSN=" + pu.String(),
		"MSGX_STORE_MAX_CONNS=8",
		"MSGX_MAILBOXES_SHARED_DSN=" + mproxyDSN,
		"MSGX_MAILBOXES_SHARED_TABLE=" + table,
		"MSGX_MAILBOXES_SHARED_START=from-beginning",
		"MSGX_MAILBOXES_SHARED_POLL_INTERVAL=100ms",
		"MSGX_BROKERS_MAIN_SEEDS=" + strings.Join(kf.ListenAddrs(), ","),
		"MSGX_ADMIN_LISTEN=127.0.0.1:0",
		"MSGX_INGRESS_LISTEN=127.0.0.1:0",
		// The sample's sender, posting from this host.
		"MSGX_INGRESS_SENDERS_AODB_ADDRESSES=127.0.0.1",
		"MSGX_INGRESS_MAX_BYTES=1048576",
		"MSGX_ADMIN_READ_TOKEN=rL6kW2qZ9xV4nB7mT3cJ1hF8dS5gP0aYi",
		"MSGX_ADMIN_OPERATOR_TOKEN=" + operatorToken,
		"MSGX_STREAMS_SIS_POLL_INTERVAL=100ms",
		"MSGX_STREAMS_SIS_BACKOFF_INITIAL=200ms",
		"MSGX_STREAMS_SIS_BACKOFF_MAX=5s",
		"MSGX_RELAY_BACKOFF_INITIAL=200ms",
		"MSGX_RELAY_BACKOFF_MAX=5s",
		"MSGX_RELAY_PUBLISH_TIMEOUT=5s",
		"MSGX_RELAY_LEASE=40s",
		"MSGX_RELAY_TARGETS_KAFKA_SCHD_FLUSH_PERIOD=1s",
		"MSGX_LOG_LEVEL=info",
	}
	c.env = append(c.env, kafkaEnv(cfg.KafkaOutage)...)
	if c.rabbit != nil {
		c.env = append(c.env, c.rabbit.env()...)
	}
	c.env = append(c.env, leaseEnv(cfg.StreamLease)...)
	if cfg.LateRow {
		c.env = append(c.env, "MSGX_MAILBOXES_SHARED_MAX_COMMIT_DELAY="+lateCommitDelay.String())
	}
	slots := 1
	if cfg.Second {
		slots = 2
	}
	c.fig.Instances = slots
	c.inst = make([]*Instance, slots)
	for i := range slots {
		if err := c.start(ctx, i); err != nil {
			return nil, err
		}
	}
	defer c.stopAll()

	// Traffic: the DNLD first (it must be processed before the FLOPs of its
	// flights make sense), then the writers, the clients and the faults.
	g := newGen(cfg.Flights, time.Now().Unix()%1_000_000*1000)
	if _, err := mb.Insert(ctx, g.dnld(), time.Now(), mailbox.Meta{}); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 90*time.Second, func() bool {
		var n int
		return pg.QueryRow(ctx, "SELECT COUNT(*) FROM flight_schd").Scan(&n) == nil && n == cfg.Flights
	}); err != nil {
		return nil, fmt.Errorf("the DNLD was not applied: %w", err)
	}
	c.say("flights announced; traffic and faults for %s", cfg.Duration)
	c.aim = &aimer{mb: mb, g: g}

	tctx, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var rows, dupIns, posts, retries atomic.Int64
	for i := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for tctx.Err() == nil {
				body := g.flop(r)
				copies := 1
				if r.Float64() < cfg.DupRate {
					copies = 2 // the acknowledgement was lost: the writer inserts again
				}
				for k := 0; k < copies; {
					if _, err := mb.Insert(ctx, body, time.Now(), mailbox.Meta{}); err != nil {
						pause(tctx, 100*time.Millisecond)
						continue
					}
					rows.Add(1)
					if k > 0 {
						dupIns.Add(1)
					}
					k++
				}
				pause(tctx, cfg.Pace)
			}
		}()
	}
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(100+i), uint64(time.Now().UnixNano())))
			hc := &http.Client{Timeout: 10 * time.Second}
			for tctx.Err() == nil {
				body := g.flop(r)
				// A refused or unanswered post is sent again, as the legacy
				// senders do: when the first had been stored, that is a duplicate.
				for ctx.Err() == nil {
					addr := c.ingress()
					if addr != "" {
						if code, _, err := post(hc, addr, body); err == nil && code == 200 {
							posts.Add(1)
							break
						}
					}
					retries.Add(1)
					pause(ctx, 200*time.Millisecond)
				}
				pause(tctx, cfg.Pace)
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); c.scrape(tctx) }()
	if c.rabbit != nil {
		wg.Add(1)
		go func() { defer wg.Done(); c.rabbit.produce(tctx, g, cfg.Pace, cfg.DupRate, c.say) }()
	}
	routes := &routeLog{}
	if cfg.Routes > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := produceRoutes(tctx, kf.ListenAddrs(), cfg.Routes, cfg.Pace, cfg.BadInput, routes); err != nil {
				c.say("route-passport producer: %v", err)
			}
		}()
	}

	var late sync.WaitGroup
	if cfg.LateRow {
		late.Add(1)
		go func() { defer late.Done(); c.lateRow(ctx, mdb, pg, table, g) }()
	}
	if cfg.BadInput {
		if err := c.badInput(ctx, g, mb); err != nil {
			stopTraffic()
			wg.Wait()
			return nil, err
		}
	}
	c.faults(tctx, pgProxy, mProxy)
	if cfg.Soak > 0 {
		// The figures of memory and goroutines are the soak's: a process
		// killed every few seconds never grows.
		c.mu.Lock()
		c.fig.Goroutines, c.fig.RSS, c.fig.Soak = nil, nil, cfg.Soak
		c.mu.Unlock()
		c.say("soak of %s without faults", cfg.Soak)
		pause(tctx, cfg.Soak)
		c.mu.Lock()
		g, r := c.fig.Goroutines, c.fig.RSS
		c.mu.Unlock()
		// Flat: the second half of the soak no higher than the first half's
		// peak plus a margin (allocator and scheduler noise).
		if n := len(g); n >= 10 {
			if a, b := maxOf(g[:n/2]), maxOf(g[n/2:]); b > a*1.2+10 {
				c.fig.Violations.Leak = append(c.fig.Violations.Leak, fmt.Sprintf("goroutines: peak %.0f in the first half of the soak, %.0f in the second", a, b))
			}
			if a, b := maxOf(r[:n/2]), maxOf(r[n/2:]); b > a*1.25 {
				c.fig.Violations.Leak = append(c.fig.Violations.Leak, fmt.Sprintf("RSS: peak %.0f MiB in the first half of the soak, %.0f MiB in the second", a/(1<<20), b/(1<<20)))
			}
		}
	}
	stopTraffic()
	wg.Wait()
	late.Wait()
	c.fig.IngressPosts, c.fig.IngressRetries = int(posts.Load()), int(retries.Load())

	// After the faults: every instance up, then wait for the drain.
	for i := range c.inst {
		if c.get(i) == nil {
			if err := c.start(ctx, i); err != nil {
				return nil, err
			}
		}
	}
	if cfg.RejectOne {
		c.replayRejected(ctx, pg)
	}
	c.say("faults over; waiting for the drain")
	drainStart := time.Now()
	next := time.Now().Add(20 * time.Second)
	if err := waitFor(ctx, 5*time.Minute, func() bool {
		sis, rp := c.drained(ctx, pg, mdb, table), routeMissing(routes.snapshot(), w)
		if time.Now().After(next) {
			next = time.Now().Add(20 * time.Second)
			c.say("draining: SIS done %v; route passports: %s", sis, rp)
		}
		return sis && rp == "" && (c.rabbit == nil || c.rabbit.drained(ctx, mdb, table))
	}); err != nil {
		c.say("not drained after 5 minutes: the checker reports what is stuck")
	}
	c.fig.Drain = time.Since(drainStart)
	// The wire gets a moment past the outbox: the relay marks sent after the
	// broker's acknowledgement, the consumer reads a little later.
	_ = waitFor(ctx, 30*time.Second, func() bool {
		_, ids := w.snapshot()
		mrows, err := readMailbox(ctx, mdb, table)
		if err != nil {
			return false
		}
		late, err := readLate(ctx, pg)
		if err != nil {
			return false
		}
		for id := range replay(applied(mrows, late)).events {
			if ids[id] == 0 {
				return false
			}
		}
		return true
	})

	mrows, err := readMailbox(ctx, mdb, table)
	if err != nil {
		return nil, err
	}
	c.fig.MailboxRows = len(mrows)
	for _, t := range []string{"msgx_inbox", "msgx_inbox_identity", "msgx_outbox", "msgx_outbox_sent", "flight_schd", "flight_gate"} {
		var n int
		if err := pg.QueryRow(ctx, "SELECT COUNT(*) FROM "+t).Scan(&n); err == nil {
			c.fig.Tables[t] = n
		}
	}
	v, err := check(ctx, pg, mrows, c.hostile, c.late, w, c.fig)
	if err != nil {
		return nil, err
	}
	if c.rabbit != nil {
		if err := c.checkRabbit(ctx, pg, mrows, &v); err != nil {
			return nil, err
		}
	}
	checkRoutes(routes.snapshot(), w, c.fig, &v)
	if cfg.Routes > 0 {
		if err := routeTiming(ctx, pg, routes.snapshot(), w, c.fig); err != nil {
			return nil, err
		}
	}
	routeGroupFigures(kf, c.kw, c.fig)
	v.Leak = c.fig.Violations.Leak
	v.Blocked = c.fig.Violations.Blocked
	v.BadInputFates = append(c.fig.Violations.BadInputFates, v.BadInputFates...)
	v.Stuck = append(c.fig.Violations.Stuck, v.Stuck...) // an armed instance that exited otherwise
	for _, in := range c.snapshot() {
		if in != nil && !in.Alive() {
			v.Stuck = append(v.Stuck, in.Name+" exited by itself")
		}
	}
	c.fig.Violations = v
	_ = dupIns.Load() // the oracle counts the duplicates from the mailbox itself
	return c.fig, nil
}

// proxiedMaria returns the MariaDB address of dsn and the DSN with a
// placeholder for the proxy's address.
func proxiedMaria(dsn string) (addr, proxied string, err error) {
	i, j := strings.Index(dsn, "tcp("), strings.Index(dsn, ")/")
	if i < 0 || j < i {
		return "", "", errors.New("the MariaDB DSN must name a tcp(host:port) address")
	}
	return dsn[i+4 : j], dsn[:i+4] + "@@PROXY@@" + dsn[j:], nil
}

func (c *campaign) start(ctx context.Context, slot int) error {
	in, err := Launch(ctx, "msgx-"+strconv.Itoa(slot), c.bin, c.config, c.instanceEnv(slot), c.log, &c.logMu)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.inst[slot] = in
	c.mu.Unlock()
	return nil
}

func (c *campaign) get(slot int) *Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inst[slot]
}

func (c *campaign) snapshot() []*Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Instance(nil), c.inst...)
}

// ingress is the address of a running instance's ingress, "" when none runs.
func (c *campaign) ingress() string {
	for _, in := range c.snapshot() {
		if in != nil && in.Alive() {
			return in.Ingest
		}
	}
	return ""
}

func (c *campaign) kill(slot int) {
	c.mu.Lock()
	in := c.inst[slot]
	c.inst[slot] = nil
	c.mu.Unlock()
	if in != nil {
		in.Kill()
	}
}

func (c *campaign) stopAll() {
	for i := range c.snapshot() {
		c.mu.Lock()
		in := c.inst[i]
		c.inst[i] = nil
		c.mu.Unlock()
		if in != nil {
			_ = in.Stop(30 * time.Second)
		}
	}
}

// faults injects the configured faults over the duration, spread at random.
func (c *campaign) faults(ctx context.Context, pgProxy, mProxy *tcpproxy.Proxy) {
	cfg := c.cfg
	type fault struct {
		at   time.Duration
		name string
	}
	var plan []fault
	spread := func(n int, name string) {
		for i := range n {
			slice := cfg.Duration / time.Duration(n)
			plan = append(plan, fault{time.Duration(i)*slice + time.Duration(rand.Int64N(int64(slice))), name})
		}
	}
	spread(cfg.Kills, "kill")
	spread(cfg.Cuts, "cut")
	spread(cfg.Restarts, "restart")
	spread(cfg.Aimed, "aimed")
	if cfg.Outage > 0 {
		plan = append(plan, fault{cfg.Duration / 4, "outage"}, fault{cfg.Duration / 2, "blackhole"})
	}
	if cfg.CrashLoop > 0 {
		plan = append(plan, fault{cfg.Duration * 3 / 4, "crashloop"})
	}
	if cfg.KafkaOutage > 0 {
		plan = append(plan, fault{cfg.Duration * 5 / 8, "kafka"})
	}
	if cfg.RabbitOutage > 0 {
		plan = append(plan, fault{cfg.Duration * 3 / 8, "rabbit-outage"})
	}
	if cfg.RabbitBlackHole > 0 {
		plan = append(plan, fault{cfg.Duration * 7 / 8, "rabbit-blackhole"})
	}
	spread(cfg.RabbitRestarts, "rabbit-restart")
	// In time order.
	for i := range plan {
		for j := i + 1; j < len(plan); j++ {
			if plan[j].at < plan[i].at {
				plan[i], plan[j] = plan[j], plan[i]
			}
		}
	}
	begin := time.Now()
	for _, f := range plan {
		if !pause(ctx, time.Until(begin.Add(f.at))) {
			return
		}
		switch f.name {
		case "kill":
			slot := rand.IntN(len(c.inst))
			c.kill(slot)
			c.fig.Kills++
			if err := c.start(ctx, slot); err != nil {
				c.say("restart after a kill: %v", err)
			}
		case "restart":
			c.restart(ctx)
		case "aimed":
			c.aimedKill(ctx)
		case "cut":
			n := pgProxy.Cut() + mProxy.Cut()
			c.fig.Cuts++
			c.say("cut %d connections", n)
		case "outage":
			c.say("PostgreSQL outage of %s", cfg.Outage)
			pgProxy.Refuse(true)
			pgProxy.Cut()
			pause(ctx, cfg.Outage)
			pgProxy.Refuse(false)
			c.fig.Outages++
			c.fig.OutageLength = cfg.Outage
		case "blackhole":
			c.say("MariaDB black hole of %s", cfg.Outage)
			mProxy.BlackHole(true)
			pause(ctx, cfg.Outage)
			mProxy.BlackHole(false)
			c.fig.BlackHoles++
		case "kafka":
			c.kafkaOutage(ctx, cfg.KafkaOutage)
		case "rabbit-outage", "rabbit-blackhole", "rabbit-restart":
			c.rabbitFault(ctx, f.name)
		case "crashloop":
			c.say("crash loop of %s", cfg.CrashLoop)
			end := time.Now().Add(cfg.CrashLoop)
			for time.Now().Before(end) && ctx.Err() == nil {
				slot := rand.IntN(len(c.inst))
				c.kill(slot)
				c.fig.CrashLoopKills++
				lctx, cancel := context.WithTimeout(ctx, time.Second+time.Duration(rand.Int64N(int64(time.Second))))
				in, err := Launch(lctx, "msgx-"+strconv.Itoa(slot), c.bin, c.config, c.instanceEnv(slot), c.log, &c.logMu)
				if err == nil {
					c.mu.Lock()
					c.inst[slot] = in
					c.mu.Unlock()
					<-lctx.Done()
				}
				cancel()
			}
			c.fig.CrashLoop = cfg.CrashLoop
			for i := range c.inst {
				if c.get(i) == nil {
					if err := c.start(ctx, i); err != nil {
						c.say("restart after the crash loop: %v", err)
					}
				}
			}
		}
	}
	pause(ctx, time.Until(begin.Add(cfg.Duration)))
}

// drained: every mailbox row in the inbox and finished, every processed
// mark written, no event pending.
func (c *campaign) drained(ctx context.Context, pg *pgxpool.Pool, mdb *sql.DB, table string) bool {
	var rows, marked, inbox, open, late, pending int
	if mdb.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(CMINMSGS_STATUS = 'PROCESSED'),0) FROM "+table).Scan(&rows, &marked) != nil {
		return false
	}
	// A late row refused as LATE is not processed, so it gets no mark.
	if pg.QueryRow(ctx, "SELECT COUNT(*), COUNT(*) FILTER (WHERE status IN ('PENDING','FAILED')), "+
		"COUNT(*) FILTER (WHERE status = 'DEAD' AND error_class = 'LATE') FROM msgx_inbox WHERE stream = 'sis'").Scan(&inbox, &open, &late) != nil {
		return false
	}
	marked += late
	if pg.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_outbox WHERE status = 'PENDING'").Scan(&pending) != nil {
		return false
	}
	return inbox == rows && open == 0 && marked == rows && pending == 0
}

// scrape reads go_goroutines and process_resident_memory_bytes of the first
// instance every 2 s.
func (c *campaign) scrape(ctx context.Context) {
	hc := &http.Client{Timeout: 2 * time.Second}
	for pause(ctx, 2*time.Second) {
		in := c.get(0)
		if in == nil {
			continue
		}
		resp, err := hc.Get("http://" + in.Admin + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		g, r := metric(body, "go_goroutines"), metric(body, "process_resident_memory_bytes")
		if g > 0 && r > 0 {
			c.mu.Lock()
			c.fig.Goroutines = append(c.fig.Goroutines, g)
			c.fig.RSS = append(c.fig.RSS, r)
			c.mu.Unlock()
		}
	}
}

func metric(body []byte, name string) float64 {
	for _, line := range bytes.Split(body, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(name+" ")); ok {
			v, _ := strconv.ParseFloat(string(rest), 64)
			return v
		}
	}
	return 0
}

// badInput sends every hostile body through the ingress and the mailbox,
// and an oversize body through the ingress, which must refuse it.
func (c *campaign) badInput(ctx context.Context, g *gen, mb *mailbox.Table) error {
	hc := &http.Client{Timeout: 30 * time.Second}
	for kind, body := range hostile(g) {
		if id, err := mb.Insert(ctx, body, time.Now(), mailbox.Meta{}); err == nil {
			c.hostile[id] = "mailbox " + kind
		} else {
			c.fig.BadInputRefused++
			c.fig.BadInputTried++
			c.say("the mailbox refused the %s body: %v", kind, err)
		}
		code, text, err := post(hc, c.ingress(), body)
		if err != nil {
			return fmt.Errorf("ingress, %s body: %w", kind, err)
		}
		if code == 200 {
			id, _ := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
			c.hostile[id] = "ingress " + kind
		} else {
			c.fig.BadInputRefused++
			c.fig.BadInputTried++
			c.say("the ingress answered %d to the %s body: %s", code, kind, text)
		}
	}
	code, _, err := post(hc, c.ingress(), bytes.Repeat([]byte("x"), 2<<20))
	if err != nil || code != http.StatusRequestEntityTooLarge {
		c.fig.Violations.BadInputFates = append(c.fig.Violations.BadInputFates, fmt.Sprintf("oversize body through the ingress: %d %v", code, err))
	}
	c.fig.BadInputTried++
	c.fig.BadInputRefused++
	return nil
}

func post(hc *http.Client, addr string, body []byte) (int, string, error) {
	resp, err := hc.Post("http://"+addr+"/cminmsgs/send", "application/xml", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// pause waits d or until ctx ends; false when ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		if !pause(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// lateCommitDelay is the mailbox's max-commit-delay in a campaign with a
// late row: the late writer holds its transaction at least this long.
const lateCommitDelay = 10 * time.Second

// lateRow is a mailbox writer slower than max-commit-delay: it takes an id,
// waits until msgx declared it a permanent gap (the rows above it are taken
// in meanwhile) and only then commits its row. A transaction that a fault
// ends (a restart of the private server) is tried again, up to three times.
func (c *campaign) lateRow(ctx context.Context, mdb *sql.DB, pg *pgxpool.Pool, table string, g *gen) {
	r := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	for attempt := 1; attempt <= 3 && ctx.Err() == nil; attempt++ {
		id, err := c.commitLate(ctx, mdb, pg, table, g.flop(r))
		if err == nil {
			c.mu.Lock()
			c.late[id] = true
			c.fig.LateRows++
			c.mu.Unlock()
			c.say("late row %d committed after its gap was declared permanent", id)
			return
		}
		c.say("late row, attempt %d: %v", attempt, err)
	}
	c.mu.Lock()
	c.fig.Violations.Stuck = append(c.fig.Violations.Stuck, "the late row could not be committed in its gap")
	c.mu.Unlock()
}

func (c *campaign) commitLate(ctx context.Context, mdb *sql.DB, pg *pgxpool.Pool, table string, body []byte) (int64, error) {
	conn, err := mdb.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (CMINMSGS_CLOB_MSG) VALUES (?)", string(body))
	if err != nil {
		return 0, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	if err := waitFor(ctx, 2*time.Minute, func() bool {
		var n int
		return pg.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_inbox_gap WHERE stream = 'sis' AND $1 BETWEEN from_id AND to_id", id).Scan(&n) == nil && n > 0
	}); err != nil {
		return 0, fmt.Errorf("id %d was not declared a permanent gap: %w", id, err)
	}
	return id, tx.Commit()
}
