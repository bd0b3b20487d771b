package reliability

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/source/mailbox"
)

// Aimed kills: an instance restarted with one failpoint armed
// (MSGX_FAILPOINTS=POINT=N, N small and random) kills itself with SIGKILL
// inside the window the point names; the harness sees the exit by the
// signal and the line the point logs just before, and restarts it unarmed.

// AimedPoint are the figures of one failpoint.
type AimedPoint struct {
	Armed  int // aimed kills of the point
	Died   int // armed instances killed by SIGKILL right after the point's line
	Missed int // rounds where no armed instance reached it within aimedWait
	Other  int // exited otherwise: a violation
	// Forced: clean stops (SIGTERM) of the round that had not ended after
	// stopLimit and were finished with SIGKILL (the stream lease is given
	// back early in a stop, before the brokers are closed).
	Forced int
	MaxHit time.Duration // longest wait from the armed start to the death
}

// aimedWait bounds the wait for an armed point to be reached.
const aimedWait = 45 * time.Second

// stopLimit bounds a clean stop of the aimed kills.
const stopLimit = 10 * time.Second

// aimer holds what the aimed kills need besides the campaign.
type aimer struct {
	mb    *mailbox.Table
	g     *gen
	n     int          // aimed kills so far
	adfts atomic.Int64 // ADFTs inserted (new flights for the snapshot point)
}

// inboxPoint: reached only by the process leading the SIS stream.
func inboxPoint(p string) bool { return p != failpoint.OutboxAfterConfirm }

// aimedKill arms the next point and waits for an armed instance to die
// there. The inbox points are reached only by the process leading the SIS
// stream, and which one leads after a restart is a race on the lease: every
// instance is restarted with the point armed, the first to die there ends
// the round and the others are restarted unarmed. The relay's point is
// reached by every instance: one, at random, is armed.
func (c *campaign) aimedKill(ctx context.Context) {
	a := c.aim
	point := failpoint.Points[a.n%len(failpoint.Points)]
	a.n++
	nth := 1 + rand.IntN(3)
	if c.fig.Aimed == nil {
		c.fig.Aimed = map[string]*AimedPoint{}
	}
	fp := c.fig.Aimed[point]
	if fp == nil {
		fp = &AimedPoint{}
		c.fig.Aimed[point] = fp
	}
	slots := []int{rand.IntN(len(c.inst))}
	if inboxPoint(point) {
		slots = slots[:0]
		for i := range c.inst {
			slots = append(slots, i)
		}
	}
	// Stopped and started side by side: the instances are down together
	// for one stop and one start.
	var wg sync.WaitGroup
	for _, i := range slots {
		wg.Go(func() { c.stopSlot(i, fp) })
	}
	wg.Wait()
	spec := point + "=" + strconv.Itoa(nth)
	begin := time.Now()
	armed := map[int]*Instance{}
	var armedMu sync.Mutex
	for _, i := range slots {
		wg.Go(func() {
			env := append(c.instanceEnv(i), "MSGX_FAILPOINTS="+spec, "MSGX_FAILPOINTS_IN_PRODUCTION=true")
			in, err := Launch(ctx, "msgx-"+strconv.Itoa(i), c.bin, c.config, env, c.log, &c.logMu)
			if err != nil {
				c.say("aimed %s: start msgx-%d: %v", spec, i, err)
				return
			}
			c.mu.Lock()
			c.inst[i] = in
			c.mu.Unlock()
			armedMu.Lock()
			armed[i] = in
			armedMu.Unlock()
		})
	}
	wg.Wait()
	fp.Armed++
	c.say("aimed kill %d: %d instance(s) armed with %s", a.n, len(armed), spec)
	// The snapshot point needs snapshots: ADFTs of new flights, one every
	// quarter second until an armed instance dies.
	feed, stopFeed := context.WithCancel(ctx)
	if point == failpoint.SISMidSnapshot {
		go func() {
			for pause(feed, 250*time.Millisecond) {
				if _, err := a.mb.Insert(feed, a.g.adft(a.adfts.Add(1)), time.Now(), mailbox.Meta{}); err != nil && feed.Err() == nil {
					c.say("aimed: ADFT insert: %v", err)
				}
			}
		}()
	}
	var hitAfter time.Duration
	_ = waitFor(ctx, aimedWait, func() bool {
		hitAfter = time.Since(begin)
		for _, in := range armed {
			if !in.Alive() {
				return true
			}
		}
		return len(armed) == 0
	})
	stopFeed()
	died := false
	for _, i := range slices.Sorted(maps.Keys(armed)) {
		in := armed[i]
		switch {
		case in.Alive():
			c.stopSlot(i, fp) // not to stay armed
		case diedAt(in, point):
			died = true
			fp.Died++
			fp.MaxHit = max(fp.MaxHit, hitAfter)
			c.say("aimed %s: msgx-%d killed itself there after %s", spec, i, hitAfter.Round(10*time.Millisecond))
			c.kill(i) // already gone: clears the slot
		default:
			fp.Other++
			c.fig.Violations.Stuck = append(c.fig.Violations.Stuck, fmt.Sprintf("msgx-%d armed with %s exited otherwise: %v", i, spec, in.err))
			c.kill(i)
		}
	}
	if !died {
		fp.Missed++
		c.say("aimed %s: not reached within %s", spec, aimedWait)
	}
	c.restartMissing(ctx)
}

// stopSlot stops the slot's instance cleanly (SIGTERM), with SIGKILL after
// stopLimit, and clears the slot.
func (c *campaign) stopSlot(slot int, fp *AimedPoint) {
	c.mu.Lock()
	in := c.inst[slot]
	c.inst[slot] = nil
	c.mu.Unlock()
	if in == nil {
		return
	}
	begin := time.Now()
	if err := in.Stop(stopLimit); err != nil {
		if killedBy(in.err, syscall.SIGKILL) {
			c.mu.Lock()
			fp.Forced++
			c.mu.Unlock()
		}
		c.say("stop msgx-%d: %v (after %s)", slot, err, time.Since(begin).Round(100*time.Millisecond))
	}
}

// restartMissing starts every slot that has no instance.
func (c *campaign) restartMissing(ctx context.Context) {
	for i := range c.inst {
		if c.get(i) == nil {
			if err := c.start(ctx, i); err != nil {
				c.say("restart msgx-%d: %v", i, err)
			}
		}
	}
}

// diedAt: the process exited by SIGKILL and its last lines hold the
// point's line.
func diedAt(in *Instance, point string) bool {
	if !killedBy(in.err, syscall.SIGKILL) {
		return false
	}
	for _, l := range in.tail {
		if strings.Contains(l, `"msg":"`+failpoint.LogMessage+`"`) && strings.Contains(l, `"failpoint":"`+point+`"`) {
			return true
		}
	}
	return false
}

func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// adft adds two new flights (a snapshot of flights the DNLD did not
// announce; the oracle creates them as the DNLD's).
func (g *gen) adft(k int64) []byte {
	var b strings.Builder
	b.WriteString(meta(g.seq.Add(1), "SCHD", "ADFT"))
	b.WriteString("<SCHD><RECS>2</RECS>")
	for i := range int64(2) {
		fmt.Fprintf(&b, "<FLTR><FLID>%d</FLID><ALCD>MU</ALCD><FLNO>MU%d</FLNO><MVIN>A</MVIN><SODT>01DEC261400</SODT></FLTR>", 950000+2*k+i, 2000+2*k+i)
	}
	b.WriteString("</SCHD></MSG>")
	return []byte(b.String())
}

// leaseEnv sets the SIS stream's lease when d is not 0. Every aimed kill at
// an inbox point kills the leader, and the stream then waits for the lease
// to expire: the CI version shortens it so that its rounds do not wait 30 s
// each.
func leaseEnv(d time.Duration) []string {
	if d <= 0 {
		return nil
	}
	return []string{"MSGX_STREAMS_SIS_LEASE=" + d.String()}
}

// aimedString is the figures' line per point.
func (f *Figures) aimedString() string {
	if len(f.Aimed) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("aimed kills (armed / died there / not reached / exited otherwise / clean stops forced, longest wait):")
	for _, p := range failpoint.Points {
		if a := f.Aimed[p]; a != nil {
			fmt.Fprintf(&b, " %s %d/%d/%d/%d/%d %s;", p, a.Armed, a.Died, a.Missed, a.Other, a.Forced, a.MaxHit.Round(100*time.Millisecond))
		}
	}
	return strings.TrimSuffix(b.String(), ";") + "\n"
}
