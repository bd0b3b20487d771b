package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/compare"
	"github.com/msgx/msgx/store"
)

// The exit codes of msgx compare.
const (
	compareEqual     = 0
	compareDifferent = 1
	compareFailed    = 2
)

// newCompareCmd is `msgx compare` with its subcommand `msgx compare
// flights`. exit ends the process with the comparison's code (os.Exit; a
// test passes its own).
func newCompareCmd(exit func(code int)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Compare msgx's state with the incumbent system's before cutover",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newCompareFlightsCmd(exit))
	return cmd
}

// compareFlags are the flags of msgx compare flights.
type compareFlags struct {
	mapping, incumbent, table, csv, dsn, from, to, timezone string
	json                                                    bool
}

func newCompareFlightsCmd(exit func(code int)) *cobra.Command {
	var f compareFlags
	cmd := &cobra.Command{
		Use:   "flights",
		Short: "Compare the incumbent's flight table (a MySQL/PostgreSQL table or a CSV export) with msgx's flight state, field by field; exit 0 equal, 1 different, 2 error",
		Long: `Compare the incumbent's flight table with msgx's flight state (the flight
tables of the store): flights are matched by FLID and operation day, and
every difference is reported field by field and collection item by item,
then the flights only one side has and a summary. The mapping file names
the incumbent's columns (docs/sis.md, "Before cutover: comparing with the
incumbent"). Both sides are only read.

Exit status: 0 the two sides are equal, 1 they differ, 2 the comparison
could not be made (an error is printed).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := runCompareFlights(cmd.Context(), f, args, cmd.OutOrStdout())
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "msgx compare flights:", err)
				code = compareFailed
			}
			if code != compareEqual {
				exit(code)
			}
			return nil
		},
	}
	// A mistaken flag is an error of the comparison too: exit 2.
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		fmt.Fprintln(c.ErrOrStderr(), "msgx compare flights:", err)
		exit(compareFailed)
		return err
	})
	fl := cmd.Flags()
	fl.StringVar(&f.mapping, "mapping", "", "the mapping file (YAML): the incumbent's columns → SIS names, normalisation (required)")
	fl.StringVar(&f.incumbent, "incumbent", "", "the incumbent's database: postgres://… or a go-sql-driver/mysql DSN (user:pass@tcp(host:3306)/db)")
	fl.StringVar(&f.table, "table", "", "the incumbent's flight table or view (with --incumbent; schema.table allowed)")
	fl.StringVar(&f.csv, "csv", "", "the incumbent's flights as a CSV export with a header row (instead of --incumbent)")
	fl.StringVar(&f.dsn, "dsn", defaultDSN, "msgx's store: postgres://… or sqlite:PATH")
	fl.StringVar(&f.from, "from", "", "first operation day compared (yyyy-mm-dd)")
	fl.StringVar(&f.to, "to", "", "last operation day compared (yyyy-mm-dd)")
	fl.StringVar(&f.timezone, "timezone", "Asia/Shanghai", "the airport's time zone: an incumbent timestamptz column is read in it")
	fl.BoolVar(&f.json, "json", false, "print the report as JSON")
	return cmd
}

// runCompareFlights makes the comparison and writes the report; it returns
// the exit code, or an error when the comparison could not be made.
func runCompareFlights(ctx context.Context, f compareFlags, args []string, out io.Writer) (int, error) {
	if len(args) > 0 {
		return 0, fmt.Errorf("unexpected argument %q", args[0])
	}
	if f.mapping == "" {
		return 0, errors.New("--mapping is required")
	}
	if (f.csv == "") == (f.incumbent == "") {
		return 0, errors.New("give the incumbent as --incumbent DSN --table NAME, or as --csv FILE")
	}
	if f.incumbent != "" && f.table == "" {
		return 0, errors.New("--incumbent needs --table")
	}
	for _, d := range []string{f.from, f.to} {
		if _, err := time.Parse(time.DateOnly, d); d != "" && err != nil {
			return 0, fmt.Errorf("operation day %q: want yyyy-mm-dd", d)
		}
	}
	loc, err := time.LoadLocation(f.timezone)
	if err != nil {
		return 0, fmt.Errorf("--timezone: %w", err)
	}
	mf, err := os.Open(f.mapping)
	if err != nil {
		return 0, err
	}
	m, err := compare.ParseMapping(mf)
	_ = mf.Close()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", f.mapping, err)
	}

	var incumbent []compare.Flight
	if f.csv != "" {
		cf, err := os.Open(f.csv)
		if err != nil {
			return 0, err
		}
		incumbent, err = compare.ReadCSV(cf, m)
		_ = cf.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f.csv, err)
		}
	} else if incumbent, err = compare.ReadTable(ctx, f.incumbent, f.table, m, loc); err != nil {
		return 0, err
	}

	db, err := store.Open(ctx, f.dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	// A store without msgx's tables (a mistyped path makes an empty SQLite
	// file) is an error, not a state with no flights.
	if vs, err := db.Versions(ctx); err != nil {
		return 0, fmt.Errorf("the store (--dsn): %w", err)
	} else if vs[sis.Schema().Name] == 0 {
		return 0, errors.New("the store (--dsn) holds no SIS flight tables (msgx migrate applies them)")
	}
	msgx, err := compare.ReadMsgx(ctx, db, f.from, f.to)
	if err != nil {
		return 0, err
	}

	rep, err := compare.Compare(m, incumbent, msgx, compare.Options{From: f.from, To: f.to})
	if err != nil {
		return 0, err
	}
	if f.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return 0, err
	}
	if rep.Equal() {
		return compareEqual, nil
	}
	return compareDifferent, nil
}
