package main

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/report"
	"github.com/mroce/mroce/sim"
)

// simOutputFlags are every scenario's output settings.
func simOutputFlags(scenario string) []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print the tables as one JSON document"},
		&cli.BoolFlag{Name: "csv", Usage: "print the tables as CSV"},
		&cli.StringFlag{Name: "plot", Value: "sim-" + scenario + ".svg", Usage: "write the main figure to this .svg or .png file (\"\": none)"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of every random choice: the same seed gives the same results"},
	}
}

func simCommand() *cli.Command {
	dl, di := sim.DefaultLoss(), sim.DefaultIncastScenario()
	return &cli.Command{
		Name:  "sim",
		Usage: "run a scenario of the real engine over the emulator in virtual time: tables and a plot",
		Description: "sim runs the engine (the same code as on real sockets) over netem in virtual time,\n" +
			"deterministically for a seed, prints each scenario's table (text, --json or --csv) and\n" +
			"draws its main figure (--plot FILE.svg or .png). docs/results.md has every table and plot\n" +
			"with the command that made it.",
		Subcommands: []*cli.Command{
			{
				Name:  "loss",
				Usage: "goodput against random (or burst) loss: mroce beside the baseline on lossy and PFC fabrics",
				Flags: append([]cli.Flag{
					&cli.Float64SliceFlag{Name: "losses", Value: cli.NewFloat64Slice(dl.Losses...), Usage: "loss rates on every downlink, 0 to 0.5"},
					&cli.IntFlag{Name: "size-mib", Value: dl.Bytes >> 20, Usage: "MiB mroce moves (the baseline, on one plane, a quarter)"},
					&cli.IntFlag{Name: "planes", Value: dl.Planes, Usage: "planes, 1 to 8"},
					&cli.IntFlag{Name: "paths", Value: dl.Paths, Usage: "mroce's paths, 1 to 256"},
					&cli.Float64Flag{Name: "rate-gbps", Value: float64(dl.LinkRate) / 1e9, Usage: "every link's rate, Gb/s"},
					&cli.IntFlag{Name: "window", Value: dl.BaselineWindow, Usage: "the baseline's go-back-N window, packets"},
					&cli.BoolFlag{Name: "burst", Usage: "lose packets in bursts (Gilbert-Elliott) of the same mean rate"},
					&cli.Float64Flag{Name: "burst-len", Value: dl.BurstLen, Usage: "mean burst, packets"},
				}, simOutputFlags("loss")...),
				Action: func(c *cli.Context) error {
					o := sim.LossOptions{Losses: c.Float64Slice("losses"), Bytes: c.Int("size-mib") << 20, Planes: c.Int("planes"),
						Paths: c.Int("paths"), LinkRate: int64(c.Float64("rate-gbps") * 1e9), BaselineWindow: c.Int("window"),
						Burst: c.Bool("burst"), BurstLen: c.Float64("burst-len"), Seed: c.Uint64("seed")}
					switch {
					case len(o.Losses) == 0:
						return usagef(c, "sim loss: --losses: none")
					case o.Bytes < 1<<20 || o.Bytes > 4<<30:
						return usagef(c, "sim loss: --size-mib must be 1 to 4096")
					case o.Planes < 1 || o.Planes > 8 || o.Paths < 1 || o.Paths > 256:
						return usagef(c, "sim loss: --planes must be 1 to 8, --paths 1 to 256")
					case o.LinkRate < 1e9 || o.LinkRate > 1600e9:
						return usagef(c, "sim loss: --rate-gbps must be 1 to 1600")
					case o.BaselineWindow < 1 || o.BaselineWindow > 255 || o.BurstLen < 1:
						return usagef(c, "sim loss: --window must be 1 to 255, --burst-len at least 1")
					}
					for _, p := range o.Losses {
						if !(p >= 0 && p <= 0.5) {
							return usagef(c, "sim loss: --losses: %g is not 0 to 0.5", p)
						}
					}
					return runScenario(c, "loss", func() ([]*report.Table, *report.Plot, error) { return sim.Loss(o) })
				},
			},
			{
				Name:  "incast",
				Usage: "N:1 incast: convergence, fairness, queue, drops and completion, mroce beside the baseline",
				Flags: append([]cli.Flag{
					&cli.IntSliceFlag{Name: "senders", Value: cli.NewIntSlice(di.Senders...), Usage: "N, senders to one receiver, 1 to 64"},
					&cli.Float64SliceFlag{Name: "rates-gbps", Value: cli.NewFloat64Slice(100, 400), Usage: "link rates, Gb/s"},
					&cli.IntFlag{Name: "size-kib", Value: di.Bytes >> 10, Usage: "KiB each sender WRITEs"},
				}, simOutputFlags("incast")...),
				Action: func(c *cli.Context) error {
					o := sim.IncastOptions{Senders: c.IntSlice("senders"), Bytes: c.Int("size-kib") << 10, Seed: c.Uint64("seed")}
					for _, r := range c.Float64Slice("rates-gbps") {
						if r < 1 || r > 1600 {
							return usagef(c, "sim incast: --rates-gbps: %g is not 1 to 1600", r)
						}
						o.Rates = append(o.Rates, int64(r*1e9))
					}
					if len(o.Senders) == 0 || len(o.Rates) == 0 || o.Bytes < 64<<10 || o.Bytes > 1<<30 {
						return usagef(c, "sim incast: want --senders, --rates-gbps, and --size-kib of 64 to 1048576")
					}
					for _, n := range o.Senders {
						if n < 1 || n > 64 {
							return usagef(c, "sim incast: --senders: %d is not 1 to 64", n)
						}
					}
					return runScenario(c, "incast", func() ([]*report.Table, *report.Plot, error) { return sim.IncastScenario(o) })
				},
			},
		},
	}
}

// runScenario runs a scenario and prints its tables (text, JSON or CSV)
// and writes its plot.
func runScenario(c *cli.Context, name string, run func() ([]*report.Table, *report.Plot, error)) error {
	if c.Bool("json") && c.Bool("csv") {
		return usagef(c, "sim %s: --json or --csv, not both", name)
	}
	began := time.Now()
	tables, pl, err := run()
	if err != nil {
		return fmt.Errorf("sim %s: %w", name, err)
	}
	w := c.App.Writer
	switch {
	case c.Bool("json"):
		err = report.WriteJSON(w, name, tables)
	case c.Bool("csv"):
		for _, t := range tables {
			if err = t.CSV(w); err != nil {
				break
			}
		}
	default:
		err = printTables(w, tables)
		fmt.Fprintf(w, "(%v of wall time)\n", time.Since(began).Round(time.Millisecond))
	}
	if err != nil {
		return err
	}
	if path := c.String("plot"); path != "" && pl != nil {
		if err := pl.Save(path); err != nil {
			return fmt.Errorf("sim %s: %w", name, err)
		}
		if !c.Bool("json") && !c.Bool("csv") {
			fmt.Fprintf(w, "plot: %s\n", path)
		}
	}
	return nil
}

func printTables(w io.Writer, tables []*report.Table) error {
	for i, t := range tables {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := t.Text(w); err != nil {
			return err
		}
	}
	return nil
}
