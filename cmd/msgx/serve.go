package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/failpoint"
)

func newServeCmd() *cobra.Command {
	var path string
	var check, connect bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the service: mailbox pollers, HTTP ingress, inbox streams, pipelines, relays and the admin listener",
		Long: `Run the msgx service from one configuration file (--config, or MSGX_CONFIG).
Without a file it runs the embedded default: a SQLite file and the in-process
broker. Every key can be overridden by an environment variable: MSGX_ and the
key path in upper case with underscores (store.dsn: MSGX_STORE_DSN).
SIGINT or SIGTERM stops intake, lets the work in flight finish or gives it
back unsettled, and exits 0. See docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if connect && !check {
				return errors.New("--connect goes with --check")
			}
			if path == "" {
				path = os.Getenv("MSGX_CONFIG")
			}
			cfg, err := config.Load(path, os.Environ(), adapters())
			if err != nil {
				return err
			}
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "configuration valid (profile %s); effective values (secrets redacted; %s and a key's path in upper case overrides it):\n  %s\n",
					cfg.Profile, config.EnvPrefix, strings.Join(config.Values(cfg), "\n  "))
				if cfg.Outbox.Mode == "wal" {
					if err := checkWAL(cmd.Context(), cmd.OutOrStdout(), cfg); err != nil {
						return err
					}
				}
				if connect {
					return checkConnect(cmd.Context(), cmd.OutOrStdout(), cfg)
				}
				return nil
			}
			clk, skew, err := clockFromEnv(os.Getenv, cfg.Profile)
			if err != nil {
				return err
			}
			fp, err := failpointsFromEnv(os.Getenv, cfg.Profile)
			if err != nil {
				return err
			}
			a, err := app.New(cmd.Context(), cfg, newRegistry(), app.WithClock(clk), app.WithFailpoints(fp), app.WithBuildInfo(build()))
			if err != nil {
				return err
			}
			if fp != nil {
				a.Logger().Warn("TEST SETTING: failpoints armed: this process kills itself with SIGKILL when one is reached; never run it so in service",
					"variable", EnvFailpoints, "failpoints", fp.String())
			}
			if skew != 0 {
				a.Logger().Warn("TEST SETTING: this process's clock is shifted from the host's; never run it so in service",
					"variable", EnvClockSkew, "skew", skew.String(), "host_now", time.Now().UTC(), "msgx_now", clk.Now().UTC())
			}
			return a.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "configuration file (default: MSGX_CONFIG, else the embedded default)")
	cmd.Flags().BoolVar(&connect, "connect", false, "with --check: also connect to the store, every MySQL mailbox and every broker the configuration uses (nothing is written), and fail if one cannot be reached")
	cmd.Flags().BoolVar(&check, "check", false, "validate the configuration, print every key with its effective value (secrets redacted) and exit")
	return cmd
}

// The clock skew is a test setting: the reliability campaign runs instances
// whose clocks are off by tens of seconds (Go programs read the time through
// the vDSO, so faketime and the like do not shift them). It is read once here
// and handed down as the service's clock; no package reads it by itself.
const (
	// EnvClockSkew shifts the service's clock: a signed duration ("+40s", "-1m").
	EnvClockSkew = "MSGX_CLOCK_SKEW"
	// EnvClockSkewInProduction must be true for the skew to be accepted in
	// the production profile.
	EnvClockSkewInProduction = "MSGX_CLOCK_SKEW_IN_PRODUCTION"
	maxClockSkew             = 24 * time.Hour
)

// clockFromEnv returns the service's clock: the wall clock, or the wall
// clock shifted by MSGX_CLOCK_SKEW. In the production profile a skew is
// refused unless MSGX_CLOCK_SKEW_IN_PRODUCTION is true too, so that a
// variable left behind cannot shift a production service's clock unnoticed.
func clockFromEnv(getenv func(string) string, profile string) (clock.Clock, time.Duration, error) {
	raw := strings.TrimSpace(getenv(EnvClockSkew))
	if raw == "" {
		return clock.Real{}, 0, nil
	}
	skew, err := time.ParseDuration(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %q is not a duration such as +40s or -1m: %w", EnvClockSkew, raw, err)
	}
	if skew.Abs() > maxClockSkew {
		return nil, 0, fmt.Errorf("%s: %s is beyond the limit of ±%s", EnvClockSkew, skew, maxClockSkew)
	}
	if profile == config.Production {
		ok, _ := strconv.ParseBool(getenv(EnvClockSkewInProduction))
		if !ok {
			return nil, 0, fmt.Errorf("%s is a test setting: refused in the production profile unless %s=true", EnvClockSkew, EnvClockSkewInProduction)
		}
	}
	if skew == 0 {
		return clock.Real{}, 0, nil
	}
	return clock.Offset{Base: clock.Real{}, D: skew}, skew, nil
}

// Failpoints are a test setting too: the reliability campaign arms one to
// crash an instance inside a window that matters (package failpoint).
// Read once here and handed down like the clock.
const (
	// EnvFailpoints arms failpoints: "POINT=N,..." (at the Nth time POINT is
	// reached the process kills itself with SIGKILL).
	EnvFailpoints = "MSGX_FAILPOINTS"
	// EnvFailpointsInProduction must be true for failpoints to be accepted
	// in the production profile.
	EnvFailpointsInProduction = "MSGX_FAILPOINTS_IN_PRODUCTION"
)

// failpointsFromEnv parses MSGX_FAILPOINTS; nil when it is unset. In the
// production profile failpoints are refused unless
// MSGX_FAILPOINTS_IN_PRODUCTION is true too, the rule of the clock skew.
func failpointsFromEnv(getenv func(string) string, profile string) (*failpoint.Set, error) {
	raw := strings.TrimSpace(getenv(EnvFailpoints))
	if raw == "" {
		return nil, nil
	}
	fp, err := failpoint.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvFailpoints, err)
	}
	if profile == config.Production {
		ok, _ := strconv.ParseBool(getenv(EnvFailpointsInProduction))
		if !ok {
			return nil, fmt.Errorf("%s is a test setting: refused in the production profile unless %s=true", EnvFailpoints, EnvFailpointsInProduction)
		}
	}
	return fp, nil
}
