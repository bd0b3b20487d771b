package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgx/msgx/internal/failpoint"
	"github.com/msgx/msgx/source/mailbox"
)

// Aimed kills: an instance restarted with one failpoint armed
// (MSGX_FAILPOINTS=POINT=N, N small and random) kills itself with SIGKILL
// inside the window the point names; the harness sees the exit by the
// signal and the line the point logs just before, and restarts it unarmed.

// AimedPoint are the figures of one failpoint.
type AimedPoint struct {
	Armed  int           // instances started with the point armed
	Died   int           // of them, killed by SIGKILL right after the point's line
	Missed int           // the point was not reached within aimedWait (restarted unarmed)
	Other  int           // exited otherwise: a violation
	MaxHit time.Duration // longest wait from the armed start to the death
}

// aimedWait bounds the wait for an armed point to be reached.
const aimedWait = 45 * time.Second

// aimer holds what the aimed kills need besides the campaign.
type aimer struct {
	pg    *pgxpool.Pool
	mb    *mailbox.Table
	g     *gen
	n     int          // aimed kills so far
	adfts atomic.Int64 // ADFTs inserted (new flights for the snapshot point)
}

// inboxPoint: reached only by the process leading the SIS stream.
func inboxPoint(p string) bool { return p != failpoint.OutboxAfterConfirm }

// aimedKill arms the next point in an instance and waits for it to die
// there.
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
	slot := rand.IntN(len(c.inst))
	others := []int{}
	if inboxPoint(point) {
		// The armed instance must lead the stream: every instance stops
		// (cleanly: the lease is released), the armed one starts alone and
		// takes the lease, then the others start.
		for i := range c.inst {
			if i != slot {
				others = append(others, i)
			}
		}
		for _, i := range others {
			c.stopSlot(i)
		}
	}
	c.stopSlot(slot)
	spec := point + "=" + strconv.Itoa(nth)
	env := append(c.instanceEnv(slot), "MSGX_FAILPOINTS="+spec, "MSGX_FAILPOINTS_IN_PRODUCTION=true")
	begin := time.Now()
	in, err := Launch(ctx, "msgx-"+strconv.Itoa(slot), c.bin, c.config, env, c.log, &c.logMu)
	if err != nil {
		c.say("aimed %s: start: %v", spec, err)
		c.restartMissing(ctx)
		return
	}
	c.mu.Lock()
	c.inst[slot] = in
	c.mu.Unlock()
	fp.Armed++
	c.say("aimed kill %d: msgx-%d armed with %s", a.n, slot, spec)
	if len(others) > 0 {
		if err := waitFor(ctx, aimedWait, func() bool { return !in.Alive() || a.leads(ctx, in) }); err != nil {
			c.say("aimed %s: msgx-%d did not take the stream lease: %v", spec, slot, err)
		}
		for _, i := range others {
			if err := c.start(ctx, i); err != nil {
				c.say("aimed %s: start msgx-%d: %v", spec, i, err)
			}
		}
	}
	// The snapshot point needs snapshots: ADFTs of new flights, one every
	// quarter second until the instance dies.
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
	t := time.NewTimer(aimedWait)
	select {
	case <-in.exited:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	stopFeed()
	switch {
	case in.Alive():
		fp.Missed++
		c.say("aimed %s: not reached within %s; msgx-%d restarted unarmed", spec, aimedWait, slot)
		c.stopSlot(slot)
	case diedAt(in, point):
		fp.Died++
		fp.MaxHit = max(fp.MaxHit, time.Since(begin))
		c.say("aimed %s: msgx-%d killed itself there after %s", spec, slot, time.Since(begin).Round(10*time.Millisecond))
		c.kill(slot) // already gone: clears the slot
	default:
		fp.Other++
		c.fig.Violations.Stuck = append(c.fig.Violations.Stuck, fmt.Sprintf("msgx-%d armed with %s exited otherwise: %v", slot, spec, in.err))
		c.kill(slot)
	}
	c.restartMissing(ctx)
}

// stopSlot stops the slot's instance cleanly (SIGTERM) and clears the slot.
func (c *campaign) stopSlot(slot int) {
	c.mu.Lock()
	in := c.inst[slot]
	c.inst[slot] = nil
	c.mu.Unlock()
	if in != nil {
		if err := in.Stop(30 * time.Second); err != nil && !killedBy(in.err, syscall.SIGTERM) {
			c.say("stop msgx-%d: %v", slot, err)
		}
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

// leads reports whether in holds the SIS stream's lease (its owner name is
// host-pid-random).
func (a *aimer) leads(ctx context.Context, in *Instance) bool {
	var owner string
	if a.pg.QueryRow(ctx, "SELECT owner FROM msgx_lease WHERE name = 'inbox:sis' AND expires_at > now()").Scan(&owner) != nil {
		return false
	}
	parts := strings.Split(owner, "-")
	return len(parts) >= 3 && parts[len(parts)-2] == strconv.Itoa(in.cmd.Process.Pid)
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

// aimedString is the figures' line per point.
func (f *Figures) aimedString() string {
	if len(f.Aimed) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("aimed kills (armed / died there / not reached / exited otherwise, longest wait):")
	for _, p := range failpoint.Points {
		if a := f.Aimed[p]; a != nil {
			fmt.Fprintf(&b, " %s %d/%d/%d/%d %s;", p, a.Armed, a.Died, a.Missed, a.Other, a.MaxHit.Round(100*time.Millisecond))
		}
	}
	return strings.TrimSuffix(b.String(), ";") + "\n"
}
