// Command msgx-reliability runs the fault campaign on the real msgx binary
// (package lab/reliability) and prints its figures; it exits 1 when
// the checker finds a violation. Run it from the module's root:
//
//	go run ./cmd/msgx-reliability --duration 10m --kills 100 --crash-loop 1m --outage 30s --second \
//	    --skew 40s --private-db --restarts 2 --aimed 20 --private-rabbit
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/lab/reliability"
)

func main() {
	var cfg reliability.Config
	flag.StringVar(&cfg.Root, "root", ".", "the module's root: the binary is built from it")
	flag.StringVar(&cfg.Workdir, "workdir", filepath.Join(os.TempDir(), "msgx-reliability"), "where the binary and msgx.log go")
	flag.StringVar(&cfg.PostgresURL, "postgres", envOr("MSGX_TEST_POSTGRES", "postgres://root@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (a fresh schema is created and dropped)")
	flag.StringVar(&cfg.MariaDSN, "mariadb", envOr("MSGX_TEST_MYSQL", "root@tcp(127.0.0.1:3306)/test"), "MariaDB DSN (a uniquely named mailbox table is created and dropped)")
	flag.BoolVar(&cfg.Race, "race", false, "build msgx with the race detector")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "traffic and faults")
	flag.IntVar(&cfg.Kills, "kills", 100, "kill -9 at random moments")
	flag.IntVar(&cfg.Aimed, "aimed", 20, "aimed kills: an instance restarted with one failpoint armed (MSGX_FAILPOINTS) kills itself inside the window it names; the points in turn")
	flag.DurationVar(&cfg.CrashLoop, "crash-loop", time.Minute, "length of the crash loop (a kill every 1-2 s); 0: none")
	flag.IntVar(&cfg.Cuts, "cuts", 5, "cuts of every database connection")
	flag.DurationVar(&cfg.Outage, "outage", 30*time.Second, "one PostgreSQL outage and one MariaDB black hole of this length; 0: none")
	kafkaOutage := flag.Duration("kafka-outage", -1, "one outage of Kafka of this length (every request's connection closed); 0: none; default: as --outage")
	flag.BoolVar(&cfg.RejectOne, "reject-one", true, "as Kafka comes back from its outage it refuses one SIS msg event for itself until the campaign, as the operator, has checked that the event's flight waits behind it and replays it (needs a Kafka outage)")
	flag.StringVar(&cfg.RabbitURL, "rabbit", envOr("MSGX_TEST_RABBITMQ", rabbitmq.DefaultURL), "RabbitMQ URL of the RabbitMQ sender and the sis stream's broker source (an exchange and queue of its own, deleted at the end); empty: no RabbitMQ traffic")
	rabbitOutage := flag.Duration("rabbit-outage", -1, "one RabbitMQ outage (connections cut, new ones refused) and one black hole of this length; 0: none; default: as --outage")
	flag.BoolVar(&cfg.PrivateRabbit, "private-rabbit", false, "run a RabbitMQ node of the campaign's own (own node name, ports and data in a temporary directory) instead of --rabbit")
	rabbitRestarts := flag.Int("rabbit-restarts", -1, "kill -9 and start of the private RabbitMQ node (needs --private-rabbit); default: as --restarts")
	flag.DurationVar(&cfg.StreamLease, "stream-lease", 0, "the SIS stream's lease (MSGX_STREAMS_SIS_LEASE); 0: the sample's (30s). A killed leader's stream waits for it to expire")
	flag.BoolVar(&cfg.Second, "second", true, "run two instances at once")
	flag.DurationVar(&cfg.Skew, "skew", 0, "clock skew: the first instance runs this far ahead of the host, the second this far behind (MSGX_CLOCK_SKEW)")
	flag.BoolVar(&cfg.PrivateDB, "private-db", false, "run a PostgreSQL and a MariaDB server of the campaign's own (initdb, mariadb-install-db) instead of --postgres and --mariadb")
	flag.IntVar(&cfg.Restarts, "restarts", 0, "real restarts of the private servers (--private-db, --private-rabbit): PostgreSQL crashed and started, MariaDB killed -9 and started, the RabbitMQ node killed -9 and started")
	flag.BoolVar(&cfg.BadInput, "bad-input", true, "send the hostile bodies")
	flag.DurationVar(&cfg.Soak, "soak", 5*time.Minute, "steady traffic without faults after them, memory and goroutines watched")
	flag.IntVar(&cfg.Writers, "writers", 4, "concurrent mailbox writers")
	flag.IntVar(&cfg.Clients, "clients", 2, "concurrent HTTP ingress clients")
	flag.IntVar(&cfg.Flights, "flights", 20, "flights announced by the DNLD")
	flag.IntVar(&cfg.Routes, "routes", 10, "routes of the route-passport records on Kafka; 0: no route-passport pipeline")
	flag.DurationVar(&cfg.Pace, "pace", 100*time.Millisecond, "pause between two messages of a writer or client")
	flag.Float64Var(&cfg.DupRate, "dup-rate", 0.05, "share of mailbox inserts sent twice (a lost acknowledgement)")
	flag.Parse()
	cfg.KafkaOutage = *kafkaOutage
	if cfg.KafkaOutage < 0 {
		cfg.KafkaOutage = cfg.Outage
	}
	cfg.RejectOne = cfg.RejectOne && cfg.KafkaOutage > 0
	if *rabbitOutage < 0 {
		*rabbitOutage = cfg.Outage
	}
	if cfg.RabbitURL != "" || cfg.PrivateRabbit {
		cfg.RabbitOutage, cfg.RabbitBlackHole = *rabbitOutage, *rabbitOutage
	}
	cfg.RabbitRestarts = *rabbitRestarts
	if cfg.RabbitRestarts < 0 {
		cfg.RabbitRestarts = 0
		if cfg.PrivateRabbit {
			cfg.RabbitRestarts = cfg.Restarts
			if !cfg.PrivateDB {
				cfg.Restarts = 0 // --restarts names the private node's only
			}
		}
	}
	cfg.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	f, err := reliability.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "msgx-reliability:", err)
		os.Exit(2)
	}
	fmt.Printf("campaign of %s (wall %s):\n%s", cfg.Duration, time.Since(start).Round(time.Second), f)
	if f.Violations.Count() > 0 {
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
