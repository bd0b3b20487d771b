package reliability

import (
	"context"
	"fmt"
	"os"
	"time"
)

// skewOf is the clock skew of an instance slot: with --skew d, slot 0 runs
// d ahead of the host and slot 1 d behind, so two instances are 2d apart.
func (c *campaign) skewOf(slot int) time.Duration {
	if slot%2 == 1 {
		return -c.cfg.Skew
	}
	return c.cfg.Skew
}

// envFor is the environment of an instance of slot: the campaign's, plus
// its clock skew (a test setting msgx refuses in the production profile
// without the second variable).
func (c *campaign) envFor(slot int) []string {
	env := append([]string(nil), c.env...)
	if d := c.skewOf(slot); d != 0 {
		env = append(env, fmt.Sprintf("MSGX_CLOCK_SKEW=%+v", d), "MSGX_CLOCK_SKEW_IN_PRODUCTION=true")
	}
	return env
}

// privateDBs are the database servers of the campaign's own (--private-db).
type privateDBs struct {
	pg    *PrivatePostgres
	maria *PrivateMaria
}

// startPrivate starts a private PostgreSQL and a private MariaDB. Their
// directories are under the system's temporary directory, not the workdir:
// the PostgreSQL server runs as another user, which must reach its own.
func startPrivate(ctx context.Context, say func(string, ...any)) (_ *privateDBs, err error) {
	p := &privateDBs{}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	pgDir, err := os.MkdirTemp("", "msgx-rel-pg-")
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	if p.pg, err = StartPostgres(ctx, pgDir); err != nil {
		_ = os.RemoveAll(pgDir)
		return nil, err
	}
	say("private PostgreSQL on %s (initdb and start: %s)", p.pg.URL(), time.Since(begin).Round(100*time.Millisecond))
	mDir, err := os.MkdirTemp("", "msgx-rel-maria-")
	if err != nil {
		return nil, err
	}
	begin = time.Now()
	if p.maria, err = StartMaria(ctx, mDir); err != nil {
		_ = os.RemoveAll(mDir)
		return nil, err
	}
	say("private MariaDB on %s (install and start: %s)", p.maria.DSN(), time.Since(begin).Round(100*time.Millisecond))
	return p, nil
}

func (p *privateDBs) stop() {
	if p == nil {
		return
	}
	if p.pg != nil {
		p.pg.Stop()
	}
	if p.maria != nil {
		p.maria.Stop()
	}
}

// restart really restarts both servers, one after the other: PostgreSQL
// crashed (immediate stop) and started, MariaDB killed -9 and started.
func (c *campaign) restart(ctx context.Context) {
	if c.private == nil {
		return
	}
	begin := time.Now()
	if err := c.private.pg.Restart(ctx); err != nil {
		c.say("PostgreSQL restart: %v", err)
		return
	}
	pgDown := time.Since(begin)
	begin = time.Now()
	if err := c.private.maria.Restart(ctx); err != nil {
		c.say("MariaDB restart: %v", err)
		return
	}
	c.fig.Restarts++
	c.say("restarted PostgreSQL (%s until it answered) and MariaDB (%s)", pgDown.Round(100*time.Millisecond), time.Since(begin).Round(100*time.Millisecond))
}
