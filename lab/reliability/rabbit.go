package reliability

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/internal/tcpproxy"
)

// The RabbitMQ side of the campaign: a legacy sender publishing SIS FLOP
// messages with publisher confirms to an exchange that a broker source of
// the sis stream consumes (the source stores each delivery in the stream's
// mailbox, then acknowledges it). Both the sender and msgx reach RabbitMQ
// through a proxy of the harness, so an outage or a black hole is one for
// both, as when the broker's host goes away.

// rabbitGroup is the sis stream's source group: its queue is TOPIC/GROUP.
const rabbitGroup = "msgx-sis"

// rabbitConfirmTimeout is how long the sender waits for a confirm before it
// takes the connection for dead and sends the message again.
const rabbitConfirmTimeout = 5 * time.Second

// rabbitSide is the campaign's hold on RabbitMQ.
type rabbitSide struct {
	direct string // the server's URL, for the topology and the checks
	topic  string // the source's exchange (a unique name per run)
	proxy  *tcpproxy.Proxy
	node   *PrivateRabbit // PrivateRabbit: the node the restarts restart

	mu        sync.Mutex
	confirmed map[string]bool // identities the broker confirmed
	sent      int             // publishes, re-sends included
	resent    int             // re-sends after no confirm
	lostAcks  int             // re-sends after a confirm that came but was "lost" (DupRate)
	pending   int             // at the end: published, never confirmed
}

// newRabbit names the run's topology; nothing is connected yet.
func newRabbit(serverURL string) *rabbitSide {
	var rb [4]byte
	_, _ = crand.Read(rb[:])
	return &rabbitSide{direct: serverURL, topic: "msgx.rel.sis." + hex.EncodeToString(rb[:]), confirmed: map[string]bool{}}
}

// addConfig adds the broker (its URL comes from the environment) and the
// sis stream's broker source to the configuration file.
func (r *rabbitSide) addConfig(base []byte) ([]byte, error) {
	brokerEntry := "  rabbit:\n    kind: rabbitmq\n    url: amqp://rabbit.internal:5672/\n"
	sourceEntry := fmt.Sprintf("    sources:\n      rabbit:\n        kind: broker\n        broker: rabbit\n        topic: %s\n        group: %s\n", r.topic, rabbitGroup)
	for _, ins := range []struct{ after, entry string }{{"\nbrokers:\n", brokerEntry}, {"\nstreams:\n  sis:\n", sourceEntry}} {
		i := bytes.Index(base, []byte(ins.after))
		if i < 0 {
			return nil, fmt.Errorf("RabbitMQ source: the configuration has no %q", ins.after)
		}
		i += len(ins.after)
		base = append(base[:i:i], append([]byte(ins.entry), base[i:]...)...)
	}
	return base, nil
}

// start declares the source's topology with the adapter itself (the same
// queue arguments msgx declares, so that the sender's first messages are
// routed before any consumer runs) and opens the proxy.
func (r *rabbitSide) start(ctx context.Context) error {
	// Its connection lines would mix with the campaign's progress lines.
	quiet := slog.New(slog.DiscardHandler)
	d := rabbitmq.New(rabbitmq.WithURL(r.direct), rabbitmq.WithConnectionName("msgx-reliability"), rabbitmq.WithLogger(quiet))
	if err := d.Start(ctx); err != nil {
		return fmt.Errorf("RabbitMQ: %w", err)
	}
	defer d.Close(context.Background())
	if err := d.DeclareSubscription(ctx, driver.SubscriptionSpec{Topic: r.topic, Group: rabbitGroup, DeadLetterTopic: r.topic + ".dlq"}); err != nil {
		return fmt.Errorf("RabbitMQ: %w", err)
	}
	u, err := url.Parse(r.direct)
	if err != nil {
		return err
	}
	if r.proxy, err = tcpproxy.New(u.Host); err != nil {
		return err
	}
	return nil
}

// proxied is the server's URL through the proxy.
func (r *rabbitSide) proxied() string {
	u, _ := url.Parse(r.direct)
	u.Host = r.proxy.Addr()
	return u.String()
}

// env is what msgx needs: the broker's URL, through the proxy.
func (r *rabbitSide) env() []string {
	return []string{"MSGX_BROKERS_RABBIT_URL=" + r.proxied()}
}

// close removes the run's topology and stops the proxy.
func (r *rabbitSide) close() {
	if r.proxy != nil {
		_ = r.proxy.Close()
	}
	_ = r.onChannel(context.Background(), func(ch *amqp.Channel) error {
		for _, q := range []string{rabbitmq.QueueName(r.topic, rabbitGroup), rabbitmq.QueueName(r.topic+".dlq", driver.DeadLetterGroup)} {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, e := range []string{r.topic, r.topic + ".dlq"} {
			_ = ch.ExchangeDelete(e, false, false)
		}
		return nil
	})
}

// onChannel runs fn on a channel of a direct connection of its own.
func (r *rabbitSide) onChannel(ctx context.Context, fn func(*amqp.Channel) error) error {
	conn, err := amqp.DialConfig(r.direct, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.CloseDeadline(time.Now().Add(5 * time.Second))
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fn(ch)
}

// queued is the number of messages ready in the source's queue and in its
// dead-letter queue.
func (r *rabbitSide) queued(ctx context.Context) (ready, dead int, err error) {
	err = r.onChannel(ctx, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(rabbitmq.QueueName(r.topic, rabbitGroup), true, false, false, false, nil)
		if err != nil {
			return err
		}
		d, err := ch.QueueDeclarePassive(rabbitmq.QueueName(r.topic+".dlq", driver.DeadLetterGroup), true, false, false, false, nil)
		if err != nil {
			return err
		}
		ready, dead = q.Messages, d.Messages
		return nil
	})
	return ready, dead, err
}

// produce publishes FLOPs to the exchange until ctx ends, each with the
// mandatory flag and waited for its confirm. A message without a confirm
// (a nack, a return, no answer within rabbitConfirmTimeout, a broken
// connection) is sent again on a new connection, as a legacy sender does:
// when the broker had it, that is a duplicate. A share dupRate of confirmed
// messages is sent again as if their confirm had been lost.
func (r *rabbitSide) produce(ctx context.Context, g *gen, pace time.Duration, dupRate float64, say func(string, ...any)) {
	rnd := rand.New(rand.NewPCG(uint64(200), uint64(time.Now().UnixNano())))
	var conn *amqp.Connection
	var ch *amqp.Channel
	var returns chan amqp.Return
	drop := func() {
		if conn != nil {
			_ = conn.CloseDeadline(time.Now().Add(time.Second))
		}
		conn, ch = nil, nil
	}
	defer drop()
	for ctx.Err() == nil {
		body := g.flop(rnd)
		p, _ := parse(string(body))
		copies := 1
		if rnd.Float64() < dupRate {
			copies = 2
		}
		retry := false
		for done := 0; done < copies && ctx.Err() == nil; {
			if ch == nil {
				var err error
				conn, err = amqp.DialConfig(r.proxied(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Heartbeat: 5 * time.Second})
				if err == nil {
					ch, err = conn.Channel()
				}
				if err == nil {
					err = ch.Confirm(false)
				}
				if err != nil {
					drop()
					pause(ctx, 200*time.Millisecond)
					continue
				}
				returns = ch.NotifyReturn(make(chan amqp.Return, 1))
			}
			ok, err := r.publish(ctx, ch, returns, body)
			r.count(func() {
				r.sent++
				if retry {
					r.resent++
				}
			})
			if !ok {
				if ctx.Err() != nil {
					retry = true
					break
				}
				say("RabbitMQ sender: %v; sending again on a new connection", err)
				drop()
				retry = true
				continue
			}
			retry = false
			r.count(func() { r.confirmed[p.identity] = true })
			done++
			if done < copies {
				r.count(func() { r.lostAcks++ })
			}
		}
		if retry {
			r.count(func() { r.pending++ }) // the traffic stopped before its confirm came
		}
		pause(ctx, pace)
	}
}

func (r *rabbitSide) count(fn func()) {
	r.mu.Lock()
	fn()
	r.mu.Unlock()
}

// publish sends one message and waits for its confirm; true only for an ack
// without a return.
func (r *rabbitSide) publish(ctx context.Context, ch *amqp.Channel, returns chan amqp.Return, body []byte) (bool, error) {
	pctx, cancel := context.WithTimeout(ctx, rabbitConfirmTimeout)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(pctx, r.topic, "", true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, ContentType: "application/xml", Body: body,
	})
	if err != nil {
		return false, err
	}
	acked, err := dc.WaitContext(pctx)
	if err != nil {
		return false, fmt.Errorf("no confirm within %s: %w", rabbitConfirmTimeout, err)
	}
	// The broker sends a message's return before its ack on the channel.
	select {
	case ret, open := <-returns:
		if open {
			return false, fmt.Errorf("returned: %d %s", ret.ReplyCode, ret.ReplyText)
		}
		return false, errors.New("the channel closed")
	default:
	}
	if !acked {
		return false, errors.New("nacked")
	}
	return true, nil
}

// drained: nothing ready in the source's queue and every confirmed message
// in the mailbox. It reads the mailbox, so it is asked last.
func (r *rabbitSide) drained(ctx context.Context, mdb *sql.DB, table string) bool {
	if ready, _, err := r.queued(ctx); err != nil || ready > 0 {
		return false
	}
	rows, err := readMailbox(ctx, mdb, table)
	if err != nil {
		return false
	}
	have := map[string]bool{}
	for _, m := range rows {
		if p, ok := parse(m.body); ok {
			have[p.identity] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.confirmed {
		if !have[id] {
			return false
		}
	}
	return true
}

// check: every message the broker confirmed is in the mailbox and reached a
// terminal state in the inbox, the first copy as the oracle says and every
// later copy SKIPPED as a duplicate; nothing in the source's dead-letter
// queue. The mailbox rows, the inbox and the oracle are the ones the main
// check used, so these messages are in its oracle and wire checks too.
func (r *rabbitSide) check(ctx context.Context, rows []mailboxRow, inbox map[int64]inboxRow, o *oracle, f *Figures, v *Violations) error {
	r.mu.Lock()
	f.RabbitSent, f.RabbitConfirmed, f.RabbitResent, f.RabbitLostAcks, f.RabbitPending = r.sent, len(r.confirmed), r.resent, r.lostAcks, r.pending
	confirmed := make(map[string]bool, len(r.confirmed))
	for id := range r.confirmed {
		confirmed[id] = true
	}
	r.mu.Unlock()
	copies := map[string]int{}
	for _, m := range rows {
		p, ok := parse(m.body)
		if !ok || !confirmed[p.identity] {
			continue
		}
		copies[p.identity]++
		f.RabbitRows++
		in, ok := inbox[m.id]
		switch {
		case !ok:
			continue // the main check reports it lost
		case copies[p.identity] > 1:
			f.RabbitDuplicates++
			if in.status != "SKIPPED" {
				v.Doubled = append(v.Doubled, fmt.Sprintf("RabbitMQ message %s: copy in mailbox row %d is %s, not SKIPPED", p.identity, m.id, in.status))
			}
		case in.status != o.accepted[m.id]:
			v.State = append(v.State, fmt.Sprintf("RabbitMQ message %s: mailbox row %d is %s, the oracle says %s", p.identity, m.id, in.status, o.accepted[m.id]))
		}
	}
	var missing []string
	for id := range confirmed {
		if copies[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	ready, dead, err := r.queued(ctx)
	if err != nil {
		return fmt.Errorf("RabbitMQ queues: %w", err)
	}
	if ready > 0 {
		v.Stuck = append(v.Stuck, fmt.Sprintf("%d messages still in the RabbitMQ source's queue", ready))
	}
	// A confirmed message not in the mailbox while as many wait in the queue
	// may be one of them: stuck, not lost. Beyond that count they are lost.
	for i, id := range missing {
		if i < ready {
			v.Stuck = append(v.Stuck, "RabbitMQ message "+id+" confirmed by the broker, not in the mailbox (the queue still holds messages)")
		} else {
			v.Lost = append(v.Lost, "RabbitMQ message "+id+" confirmed by the broker, not in the mailbox")
		}
	}
	if dead > 0 {
		v.DeadByFault = append(v.DeadByFault, fmt.Sprintf("%d messages in the RabbitMQ source's dead-letter queue", dead))
	}
	return nil
}

// rabbitFault injects one RabbitMQ fault of the plan.
func (c *campaign) rabbitFault(ctx context.Context, name string) {
	r := c.rabbit
	if r == nil {
		return
	}
	switch name {
	case "rabbit-outage":
		d := c.cfg.RabbitOutage
		r.proxy.Refuse(true)
		n := r.proxy.Cut()
		c.say("RabbitMQ outage of %s: %d connections cut, new ones refused", d, n)
		pause(ctx, d)
		r.proxy.Refuse(false)
		c.fig.RabbitOutages++
		c.fig.RabbitOutageLength = d
	case "rabbit-blackhole":
		d := c.cfg.RabbitBlackHole
		c.say("RabbitMQ black hole of %s", d)
		r.proxy.BlackHole(true)
		pause(ctx, d)
		r.proxy.BlackHole(false)
		c.fig.RabbitBlackHoles++
		c.fig.RabbitBlackHoleLength = d
	case "rabbit-restart":
		if r.node == nil {
			return
		}
		took, err := r.node.Restart(ctx)
		if err != nil {
			c.say("RabbitMQ restart: %v", err)
			return
		}
		c.fig.RabbitRestarts++
		c.fig.RabbitRestartTimes = append(c.fig.RabbitRestartTimes, took)
		c.say("restarted the private RabbitMQ node (killed -9; %s until it answered)", took.Round(100*time.Millisecond))
	}
}

// rabbitFigures is the RabbitMQ line of the figures.
func (f *Figures) rabbitFigures() string {
	if f.RabbitSent == 0 {
		return ""
	}
	return fmt.Sprintf("RabbitMQ: %d publishes, %d messages confirmed, %d sent again after no confirm and %d after a simulated lost one, %d never confirmed; %d mailbox rows of them (%d duplicates); outages %d of %s, black holes %d of %s, node restarts %d %v\n",
		f.RabbitSent, f.RabbitConfirmed, f.RabbitResent, f.RabbitLostAcks, f.RabbitPending, f.RabbitRows, f.RabbitDuplicates,
		f.RabbitOutages, f.RabbitOutageLength, f.RabbitBlackHoles, f.RabbitBlackHoleLength, f.RabbitRestarts, f.RabbitRestartTimes)
}

// openRabbit starts the private node when asked for, declares the source's
// topology and opens the proxy; stop undoes all of it.
func (c *campaign) openRabbit(ctx context.Context) (stop func(), err error) {
	serverURL := c.cfg.RabbitURL
	var node *PrivateRabbit
	if c.cfg.PrivateRabbit {
		dir, err := os.MkdirTemp("", "msgx-rel-rabbit-")
		if err != nil {
			return nil, err
		}
		if node, err = StartRabbit(ctx, dir); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		c.fig.RabbitStart = node.Start
		c.say("private RabbitMQ on %s (start: %s)", node.URL(), node.Start.Round(100*time.Millisecond))
		serverURL = node.URL()
	}
	r := newRabbit(serverURL)
	r.node = node
	if err := r.start(ctx); err != nil {
		r.close()
		if node != nil {
			node.Stop()
		}
		return nil, err
	}
	c.rabbit = r
	return func() {
		r.close()
		if node != nil {
			node.Stop()
		}
	}, nil
}

// checkRabbit runs the RabbitMQ checks over the history the main check read.
func (c *campaign) checkRabbit(ctx context.Context, pg *pgxpool.Pool, rows []mailboxRow, v *Violations) error {
	inbox, err := readInbox(ctx, pg)
	if err != nil {
		return err
	}
	return c.rabbit.check(ctx, rows, inbox, replay(rows), c.fig, v)
}
