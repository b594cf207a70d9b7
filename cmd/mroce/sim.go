package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/internal/hugepage"
	"github.com/mroce/mroce/report"
	"github.com/mroce/mroce/sim"
)

// simOutputFlags are every scenario's output settings.
func simOutputFlags(scenario string) []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print the tables as one JSON document"},
		&cli.BoolFlag{Name: "csv", Usage: "print the tables as CSV"},
		&cli.StringFlag{Name: "plot", Usage: "write the main figure to this .svg or .png file, such as sim-" + scenario + ".svg (default: none)"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of every random choice: the same seed gives the same results"},
		&cli.IntFlag{Name: "seeds", Value: 1, Usage: fmt.Sprintf("run with this many seeds, from --seed up, and show each figure's min-max (median) over them where they differ, the plot --seed's (1 to %d; sim flows: a row and a line a seed, from the file's seed unless --seed is given)", maxSeeds)},
		&cli.BoolFlag{Name: "real-payloads", Usage: "copy and checksum every payload byte as on a real wire (slower; the results are the same: by default payloads are placeholders of their length)"},
		&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the run to this file (go tool pprof reads it)"},
		&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile of what the last run of flows holds live at its end to this file (go tool pprof reads it; the scenarios with a speed table)"},
		&cli.StringFlag{Name: "trace", Usage: "write the engines' decisions in the scenario's first run (the first seed's, the first row's mroce run) to this file, a JSON line each, for mroce trace: every connection's every packet, so keep the run small; a traced run goes on one clock, never over processes, and a fabric scenario's first table row may differ from an untraced run's in its last digits"},
		&cli.BoolFlag{Name: "huge-pages", Value: true, Usage: "ask the kernel for huge pages for the simulation's memory (Linux, unless its transparent huge pages are off): faster with thousands of connections; the results are the same"},
	}
}

// hugeHeap is the heap --huge-pages readies. It is more than the largest
// scenario holds at its defaults, 86 MiB live for 4,032 connections and up
// to twice that before a collection. Only what is used becomes resident.
const hugeHeap = 512 << 20

// maxSizeMiB is the largest --size-mib. It is 4 GiB, or on a 32-bit
// machine the most MiB whose bytes an int holds.
const maxSizeMiB = min(4096, math.MaxInt>>20)

// sizeMiBOK reports whether --size-mib is 1 to maxSizeMiB. It checks before
// the value is turned into bytes, which would overflow an int on a 32-bit
// machine.
func sizeMiBOK(c *cli.Context) bool {
	mib := c.Int("size-mib")
	return mib >= 1 && mib <= maxSizeMiB
}

// startJitterFlag spreads the flows' starts by the seed (sim.MaxStartJitter
// bounds it; startJitterInto reads it).
var startJitterFlag = &cli.DurationFlag{Name: "start-jitter", Usage: fmt.Sprintf("delay each flow's start by a time drawn from the seed, uniform in [0, this) (0 to %v; sim flows: the file's unless given)", sim.MaxStartJitter)}

// startJitterInto sets *d from --start-jitter when it is given.
func startJitterInto(c *cli.Context, d *time.Duration) error {
	if !c.IsSet("start-jitter") {
		return nil
	}
	if *d = c.Duration("start-jitter"); *d < 0 || *d > sim.MaxStartJitter {
		return usagef(c, "sim %s: --start-jitter must be 0 to %v", c.Command.Name, sim.MaxStartJitter)
	}
	return nil
}

// jobsFlag is the setting of the scenarios of several runs.
// resendFlag chooses engine.Config.Resend.
// firstWindowFlag is the connections' first window, for the scenarios on
// a fabric and for sim flows, where it overrides the file's.
var firstWindowFlag = &cli.StringFlag{Name: "first-window", Value: engine.FirstWindowBDP.String(), Usage: "the connections' first window (engine.Config.FirstWindow): bdp, one bandwidth-delay product of the host's NIC shared among the connections it opened, or fixed, 16 packets"}

// firstWindowInto reads --first-window into w, where it was set.
func firstWindowInto(c *cli.Context, w *engine.FirstWindowPolicy) error {
	if !c.IsSet("first-window") {
		return nil
	}
	p, err := engine.ParseFirstWindowPolicy(c.String("first-window"))
	if err != nil {
		return usagef(c, "sim %s: --first-window must be bdp or fixed", c.Command.Name)
	}
	*w = p
	return nil
}

var resendFlag = &cli.StringFlag{Name: "resend", Value: engine.ResendOtherPath.String(), Usage: "where a lost packet is resent: other (the path with the shortest RTT on another plane, when one has room) or same (the path that lost it, when it has room)"}

// resendInto reads --resend.
func resendInto(c *cli.Context, r *engine.ResendPolicy) error {
	p, err := engine.ParseResendPolicy(c.String("resend"))
	if err != nil {
		return usagef(c, "sim %s: --resend %q: want other or same", c.Command.Name, c.String("resend"))
	}
	*r = p
	return nil
}

var jobsFlag = &cli.IntFlag{Name: "jobs", Value: 1, Usage: "runs of the scenario at once, each on its own core (0: one per core); the results are the same for any, the speed tables' wall times are not each run's own, and their heap is left out"}

// simJobs reads --jobs into jobs as the scenarios take it, where a value
// below 0 asks for one run per core.
func simJobs(c *cli.Context, jobs *int) error {
	switch n := c.Int("jobs"); {
	case n < 0:
		return usagef(c, "sim %s: --jobs must not be negative", c.Command.Name)
	case n != 1 && c.String("memprofile") != "":
		return usagef(c, "sim %s: --memprofile wants --jobs 1 (the heap of one run)", c.Command.Name)
	case n == 0:
		*jobs = -1
	default:
		*jobs = n
	}
	return nil
}

// simCommand defines mroce sim with a subcommand for each scenario. It is
// over 80 lines because it is one cli.Command literal declaring flags.
func simCommand() *cli.Command {
	dl, di, dp, df := sim.DefaultLoss(), sim.DefaultIncastScenario(), sim.DefaultPlanes(), sim.DefaultPlaneFail()
	dc, dm := sim.DefaultCollective(), sim.DefaultPermutationScenario()
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
					&cli.IntFlag{Name: "size-mib", Value: dl.Bytes >> 20, Usage: "MiB mroce moves (the baseline, on one plane, its share: this over --planes)"},
					&cli.IntFlag{Name: "planes", Value: dl.Planes, Usage: "planes, 1 to 8"},
					&cli.IntFlag{Name: "paths", Value: dl.Paths, Usage: "mroce's paths, 1 to 256"},
					&cli.Float64Flag{Name: "rate-gbps", Value: float64(dl.LinkRate) / 1e9, Usage: "every link's rate, Gb/s"},
					&cli.IntFlag{Name: "window", Value: dl.BaselineWindow, Usage: "the baseline's go-back-N window, packets"},
					&cli.DurationFlag{Name: "ack-timeout", Value: dl.BaselineAckTimeout, Usage: "the baseline's local ACK timeout, fixed (RoCEv2: 4.096µs x 2^n); 0: an adaptive timeout from the RTT, doubled per timeout"},
					&cli.BoolFlag{Name: "burst", Usage: "lose packets in bursts (Gilbert-Elliott) of the same mean rate"},
					&cli.Float64Flag{Name: "burst-len", Value: dl.BurstLen, Usage: "mean burst, packets"},
					&cli.DurationFlag{Name: "burst-time", Usage: "with --burst: bursts that last this long on average (100ns to 1s), whether packets come or not (in place of --burst-len packets)"},
					&cli.BoolFlag{Name: "every-link", Usage: "the loss on the uplinks too, so that every packet crosses two lossy links"},
					resendFlag,
					jobsFlag,
				}, append(simLinkFlags(dl.Links), simOutputFlags("loss")...)...),
				Action: func(c *cli.Context) error {
					o := sim.LossOptions{Losses: c.Float64Slice("losses"), Bytes: c.Int("size-mib") << 20, Planes: c.Int("planes"),
						Paths: c.Int("paths"), LinkRate: int64(c.Float64("rate-gbps") * 1e9), BaselineWindow: c.Int("window"),
						BaselineAckTimeout: c.Duration("ack-timeout"),
						Burst:              c.Bool("burst"), BurstLen: c.Float64("burst-len"), BurstTime: c.Duration("burst-time"), Seed: c.Uint64("seed"),
						EveryLink:    c.Bool("every-link"),
						RealPayloads: c.Bool("real-payloads")}
					if err := linkFlagsInto(c, &o.Links); err != nil {
						return err
					}
					if err := resendInto(c, &o.Resend); err != nil {
						return err
					}
					if err := simJobs(c, &o.Jobs); err != nil {
						return err
					}
					switch {
					case len(o.Losses) == 0:
						return usagef(c, "sim loss: --losses: none")
					case !sizeMiBOK(c):
						return usagef(c, "sim loss: --size-mib must be 1 to %d", maxSizeMiB)
					case o.Planes < 1 || o.Planes > 8 || o.Paths < 1 || o.Paths > 256:
						return usagef(c, "sim loss: --planes must be 1 to 8, --paths 1 to 256")
					case o.LinkRate < 1e9 || o.LinkRate > 1600e9:
						return usagef(c, "sim loss: --rate-gbps must be 1 to 1600")
					case o.BurstTime != 0 && (o.BurstTime < 100*time.Nanosecond || o.BurstTime > time.Second || !o.Burst || c.IsSet("burst-len")):
						return usagef(c, "sim loss: --burst-time must be 100ns to 1s, and comes with --burst and without --burst-len")
					case o.BaselineWindow < 1 || o.BaselineWindow > 255 || o.BurstLen < 1:
						return usagef(c, "sim loss: --window must be 1 to 255, --burst-len at least 1")
					case o.BaselineAckTimeout != 0 && (o.BaselineAckTimeout < time.Microsecond || o.BaselineAckTimeout > time.Second):
						return usagef(c, "sim loss: --ack-timeout must be 0 (adaptive) or 1µs to 1s")
					}
					for _, p := range o.Losses {
						if !(p >= 0 && p <= 0.5) {
							return usagef(c, "sim loss: --losses: %g is not 0 to 0.5", p)
						}
					}
					return runScenario(c, "loss", func(seed uint64, tr engine.Tracer) (sim.LossResult, error) {
						o.Seed, o.Tracer = seed, tr
						return sim.Loss(o)
					}, report.LossTables, report.LossPlot)
				},
			},
			{
				Name:  "incast",
				Usage: "N:1 incast: convergence, fairness, queue, drops and completion, mroce beside the baseline",
				Flags: append([]cli.Flag{
					&cli.IntSliceFlag{Name: "senders", Value: cli.NewIntSlice(di.Senders...), Usage: "N, senders to one receiver, 1 to 64"},
					&cli.Float64SliceFlag{Name: "rates-gbps", Value: cli.NewFloat64Slice(100, 400), Usage: "link rates, Gb/s"},
					&cli.IntFlag{Name: "size-kib", Value: di.Bytes >> 10, Usage: "KiB each sender WRITEs"},
					startJitterFlag,
					jobsFlag,
				}, append(simLinkFlags(di.Links), simOutputFlags("incast")...)...),
				Action: func(c *cli.Context) error {
					o := sim.IncastOptions{Senders: c.IntSlice("senders"), Bytes: c.Int("size-kib") << 10, Seed: c.Uint64("seed"),
						RealPayloads: c.Bool("real-payloads")}
					if err := linkFlagsInto(c, &o.Links); err != nil {
						return err
					}
					if err := startJitterInto(c, &o.StartJitter); err != nil {
						return err
					}
					if err := simJobs(c, &o.Jobs); err != nil {
						return err
					}
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
					return runScenario(c, "incast", func(seed uint64, tr engine.Tracer) (sim.IncastScenarioResult, error) {
						o.Seed, o.Tracer = seed, tr
						return sim.IncastScenario(o)
					},
						report.IncastTables, report.IncastPlot)
				},
			},
			{
				Name:  "planes",
				Usage: "all-to-all throughput with 1, 2, 4, 8 planes (NIC ports per host), thousands of connections",
				Flags: append(simFabricFlags(dp.Fabric, true), append([]cli.Flag{
					&cli.IntSliceFlag{Name: "planes", Value: cli.NewIntSlice(dp.Planes...), Usage: "plane counts, each 1 to 8"},
					&cli.IntFlag{Name: "size-kib", Value: dp.FlowBytes >> 10, Usage: "KiB from every host to every other (all to all: hosts x (hosts - 1) connections)"},
					jobsFlag,
				}, simOutputFlags("planes")...)...),
				Action: func(c *cli.Context) error {
					o := dp
					o.Planes, o.FlowBytes = c.IntSlice("planes"), c.Int("size-kib")<<10
					if len(o.Planes) > 0 {
						o.Fabric.Planes = slices.Max(o.Planes) // what --plane-rate-gbps and its siblings may name
					}
					if err := fabricFlagsInto(c, &o.Fabric); err != nil {
						return err
					}
					if err := simJobs(c, &o.Jobs); err != nil {
						return err
					}
					for _, p := range o.Planes {
						if p < 1 || p > 8 {
							return usagef(c, "sim planes: --planes: %d is not 1 to 8", p)
						}
					}
					if len(o.Planes) == 0 || o.FlowBytes < 4<<10 || o.FlowBytes > 1<<30 {
						return usagef(c, "sim planes: want --planes, and --size-kib of 4 to 1048576")
					}
					return runScenario(c, "planes", func(seed uint64, tr engine.Tracer) (sim.PlanesResult, error) {
						o.Fabric.Seed, o.Fabric.Tracer = seed, tr
						return sim.Planes(o)
					}, report.PlanesTables, report.PlanesPlot)
				},
			},
			{
				Name:  "planefail",
				Usage: "one plane fails mid-run (blackhole, or down as the hosts see it), then recovers: throughput over time",
				Flags: append(simFabricFlags(df.Fabric, true), append([]cli.Flag{
					&cli.IntFlag{Name: "planes", Value: df.Fabric.Planes, Usage: "planes, 2 to 8"},
					&cli.IntFlag{Name: "size-mib", Value: df.FlowBytes >> 20, Usage: "MiB each host sends to the next (or to each other host, with --all-to-all)"},
					&cli.BoolFlag{Name: "all-to-all", Usage: "every host sends to every other (hosts x (hosts - 1) connections: 4,032 with --hosts 64), not to the next"},
					&cli.IntFlag{Name: "plane", Usage: "the plane that fails"},
					&cli.DurationFlag{Name: "fail-at", Value: df.FailAt, Usage: "when it fails, from the flows' start"},
					&cli.DurationFlag{Name: "repair-at", Value: df.RepairAt, Usage: "when it is repaired (0: never)"},
					&cli.BoolFlag{Name: "down", Usage: "the hosts see the plane go down (a link-down event); else it is a blackhole"},
				}, simOutputFlags("planefail")...)...),
				Action: func(c *cli.Context) error {
					o := df
					o.FlowBytes, o.Plane, o.FailAt, o.RepairAt, o.Down = c.Int("size-mib")<<20, c.Int("plane"), c.Duration("fail-at"), c.Duration("repair-at"), c.Bool("down")
					o.AllToAll = c.Bool("all-to-all")
					o.Fabric.Planes = c.Int("planes")
					if err := fabricFlagsInto(c, &o.Fabric); err != nil {
						return err
					}
					switch {
					case o.Fabric.Planes < 2 || o.Fabric.Planes > 8 || o.Plane < 0 || o.Plane >= o.Fabric.Planes:
						return usagef(c, "sim planefail: --planes must be 2 to 8 and --plane one of them")
					case !sizeMiBOK(c) || o.FailAt < 0 || o.RepairAt < 0:
						return usagef(c, "sim planefail: --size-mib must be 1 to %d, the times not negative", maxSizeMiB)
					}
					return runScenario(c, "planefail", func(seed uint64, tr engine.Tracer) (sim.PlaneFailResult, error) {
						o.Fabric.Seed, o.Fabric.Tracer = seed, tr
						return sim.PlaneFail(o)
					},
						report.PlaneFailTables, report.PlaneFailPlot)
				},
			},
			{
				Name:      "flows",
				Usage:     "run the fabric and flows a traffic file describes (see docs/results.md for its lines)",
				ArgsUsage: "FILE",
				Flags: append([]cli.Flag{
					startJitterFlag,
					&cli.IntFlag{Name: "paths", Usage: "paths per connection, 1 to 256 (default: the file's)"},
					&cli.StringFlag{Name: "first-window", Usage: "the connections' first window (engine.Config.FirstWindow): bdp, one bandwidth-delay product of the host's NIC shared among the connections it opened, or fixed, 16 packets (default: the file's)"},
					boundsFlag,
					jobsFlag,
				}, simOutputFlags("flows")...),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usagef(c, "sim flows: want one traffic FILE")
					}
					seeds := c.Int("seeds")
					if seeds < 1 || seeds > maxSeeds {
						return usagef(c, "sim flows: --seeds must be 1 to %d", maxSeeds)
					}
					f, err := os.Open(c.Args().First())
					if err != nil {
						return usagef(c, "sim flows: %v", err)
					}
					defer f.Close()
					t, err := sim.ParseTraffic(f)
					if err != nil {
						return usagef(c, "sim flows: %s: %v", c.Args().First(), err)
					}
					if c.IsSet("seed") {
						t.Fabric.Seed = c.Uint64("seed")
					}
					if c.IsSet("paths") {
						if t.Fabric.Paths = c.Int("paths"); t.Fabric.Paths < 1 || t.Fabric.Paths > 256 {
							return usagef(c, "sim flows: --paths must be 1 to 256")
						}
					}
					if err := startJitterInto(c, &t.Fabric.StartJitter); err != nil {
						return err
					}
					if err := firstWindowInto(c, &t.Fabric.FirstWindow); err != nil {
						return err
					}
					t.Fabric.RealPayloads = c.Bool("real-payloads")
					t.Fabric.Bounds = c.Bool("bounds")
					var jobs int
					if err := simJobs(c, &jobs); err != nil {
						return err
					}
					// The seeds start from the file's, so the flows run them
					// themselves, each run's figures in a row of their own.
					if seeds > 1 {
						return runScenarioSeeds(c, "flows", 1, func(_ uint64, tr engine.Tracer) (sim.FlowsSeedsResult, error) {
							t.Fabric.Tracer = tr
							return sim.FlowsSeeds(t, seeds, jobs)
						},
							report.FlowsSeedsTables, report.FlowsSeedsPlot)
					}
					return runScenarioSeeds(c, "flows", 1, func(_ uint64, tr engine.Tracer) (sim.FlowsScenarioResult, error) {
						t.Fabric.Tracer = tr
						return sim.FlowsScenario(t)
					},
						report.FlowsTables, report.FlowsPlot)
				},
			},
			collectiveCommand("allreduce", "ring all-reduce of WRITEs: algorithm and bus bandwidth, FCTs, mroce beside the baseline", dc),
			collectiveCommand("alltoall", "all-to-all of WRITEs: algorithm and bus bandwidth, FCTs, mroce beside the baseline", dc),
			{
				Name:  "permutation",
				Usage: "every host sends to one other across a leaf-spine: throughput and FCT spread, mroce beside the baseline",
				Flags: append(simFabricFlags(dm.Fabric, false), append([]cli.Flag{
					&cli.IntSliceFlag{Name: "paths", Value: cli.NewIntSlice(dm.Paths...), Usage: "paths per connection: mroce runs once with each"},
					&cli.IntFlag{Name: "planes", Value: dm.Fabric.Planes, Usage: "planes, 1 to 8"},
					&cli.IntFlag{Name: "size-mib", Value: dm.FlowBytes >> 20, Usage: "MiB each host sends"},
					&cli.IntFlag{Name: "shift", Value: dm.Shift, Usage: "host h sends to h + shift"},
					&cli.BoolFlag{Name: "no-baseline", Usage: "run mroce only"},
					boundsFlag,
					jobsFlag,
				}, simOutputFlags("permutation")...)...),
				Action: func(c *cli.Context) error {
					o := dm
					o.Fabric.Planes, o.FlowBytes, o.Shift, o.Baseline = c.Int("planes"), c.Int("size-mib")<<20, c.Int("shift"), !c.Bool("no-baseline")
					o.Paths = c.IntSlice("paths")
					o.Fabric.Bounds = c.Bool("bounds")
					if err := fabricFlagsInto(c, &o.Fabric); err != nil {
						return err
					}
					if err := simJobs(c, &o.Jobs); err != nil {
						return err
					}
					for _, p := range o.Paths {
						if p < 1 || p > 256 {
							return usagef(c, "sim permutation: --paths: %d is not 1 to 256", p)
						}
					}
					if o.Fabric.Planes < 1 || o.Fabric.Planes > 8 || !sizeMiBOK(c) || o.Shift%o.Fabric.Hosts == 0 {
						return usagef(c, "sim permutation: --planes must be 1 to 8, --size-mib 1 to %d, --shift not a multiple of --hosts", maxSizeMiB)
					}
					return runScenario(c, "permutation", func(seed uint64, tr engine.Tracer) (sim.PermutationResult, error) {
						o.Fabric.Seed, o.Fabric.Tracer = seed, tr
						return sim.PermutationScenario(o)
					},
						report.PermutationTables, report.PermutationPlot)
				},
			},
		},
	}
}

// boundsFlag asks for what the routes the paths hashed to allow
// (sim.RouteBounds).
var boundsFlag = &cli.BoolFlag{Name: "bounds", Usage: "also print what the routes the paths hashed to allow: the share of its line every flow could have at once, and each flow's share where links are shared fairly path by path"}

// simFabricFlags are the fabric settings of the many-host scenarios, with
// the defaults of d.
func simFabricFlags(d sim.FabricOptions, paths bool) []cli.Flag {
	flags := []cli.Flag{
		&cli.IntFlag{Name: "hosts", Value: d.Hosts, Usage: "hosts, 2 to 256"},
		&cli.Float64Flag{Name: "rate-gbps", Value: float64(d.LinkRate) / 1e9, Usage: "every link's rate, Gb/s"},
		&cli.IntFlag{Name: "hosts-per-leaf", Value: d.HostsPerLeaf, Usage: "hosts per leaf: a leaf-spine per plane (0: one switch per plane)"},
		&cli.IntFlag{Name: "spines", Value: max(d.Spines, 4), Usage: "spines per plane, with --hosts-per-leaf"},
		&cli.StringSliceFlag{Name: "plane-rate-gbps", Usage: "P=R: plane P's links run at R Gb/s (repeat for more planes)"},
		&cli.StringSliceFlag{Name: "plane-delay", Usage: "P=D: plane P's links have a delay of D, above 0 (repeat for more planes)"},
		&cli.StringSliceFlag{Name: "plane-buffer-kib", Usage: "P=B: plane P's switch queues hold B KiB (repeat for more planes)"},
		startJitterFlag,
		resendFlag,
		firstWindowFlag,
		&cli.IntFlag{Name: "fat-tree-k", Value: d.FatTreeK, Usage: "a three-tier fat tree of k-port switches per plane, k even, at most k^3/4 hosts (0: none; instead of --hosts-per-leaf)"},
		&cli.IntFlag{Name: "workers", Usage: "cores one run takes when it can go over processes, a host each (flows that wait for none or for data arriving at their own host, one switch per plane, no PFC; 0: one per core, or 1 with --jobs other than 1); the results are the same for any"},
	}
	if paths {
		flags = append(flags, &cli.IntFlag{Name: "paths", Value: d.Paths, Usage: "paths per connection"})
	}
	return append(flags, simLinkFlags(d.Links)...)
}

// simLinkFlags are the links and queues every scenario takes, with the
// defaults of d.
func simLinkFlags(d sim.Links) []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "mtu", Value: d.MTU, Usage: fmt.Sprintf("the largest payload of a data packet, bytes (RoCE's path MTU; %d to %d): a WRITE's packet is 64 bytes more, its frame 66 more than that", sim.MinMTU, sim.MaxMTU)},
		&cli.DurationFlag{Name: "delay", Value: d.Delay, Usage: fmt.Sprintf("every link's propagation delay (0 to %v)", sim.MaxDelay)},
		&cli.IntFlag{Name: "ecn-kib", Value: d.ECNThreshold >> 10, Usage: "every switch queue's DCTCP marking threshold, KiB (0: no marking)"},
		&cli.IntFlag{Name: "ecn-max-kib", Value: d.ECNMax >> 10, Usage: "mark on dequeue, linearly from none at --ecn-kib to every packet at this many KiB (0: DCTCP's step at --ecn-kib)"},
		&cli.IntFlag{Name: "buffer-kib", Value: d.Buffer >> 10, Usage: "every queue's buffer, KiB (at least one full packet)"},
		&cli.IntFlag{Name: "shared-buffer-kib", Value: d.SharedBuffer >> 10, Usage: "each switch's packet memory, KiB, shared by its queues under a dynamic threshold (0: none; each queue still holds at most --buffer-kib)"},
		&cli.Float64Flag{Name: "shared-buffer-alpha", Value: d.SharedBufferAlpha(), Usage: "with --shared-buffer-kib: a queue takes a packet while it holds less than alpha times the switch's free memory (above 0, at most 1024)"},
	}
}

// linkFlagsInto reads the link flags.
func linkFlagsInto(c *cli.Context, l *sim.Links) error {
	name := c.Command.Name
	ecn, buffer := c.Int("ecn-kib"), c.Int("buffer-kib")
	if ecn < 0 || ecn > 1<<20 || buffer < 1 || buffer > 1<<20 {
		return usagef(c, "sim %s: --ecn-kib must be 0 to 1048576, --buffer-kib 1 to 1048576", name)
	}
	l.MTU, l.Delay, l.ECNThreshold, l.Buffer = c.Int("mtu"), c.Duration("delay"), ecn<<10, buffer<<10
	if top := c.Int("ecn-max-kib"); top != 0 {
		if top < 0 || top > 1<<20 {
			return usagef(c, "sim %s: --ecn-max-kib must be 0 to 1048576", name)
		}
		l.ECNMax = top << 10
	}
	shared, alpha := c.Int("shared-buffer-kib"), c.Float64("shared-buffer-alpha")
	if shared < 0 || shared > 1<<20 || !(alpha > 0 && alpha <= 1024) {
		return usagef(c, "sim %s: --shared-buffer-kib must be 0 to 1048576, --shared-buffer-alpha above 0 and at most 1024", name)
	}
	switch {
	case shared > 0:
		l.SharedBuffer, l.SharedAlpha = shared<<10, alpha
	case c.IsSet("shared-buffer-alpha"):
		return usagef(c, "sim %s: --shared-buffer-alpha comes with --shared-buffer-kib", name)
	}
	if l.MTU == 0 {
		return usagef(c, "sim %s: --mtu must be %d to %d", name, sim.MinMTU, sim.MaxMTU)
	}
	if err := l.Validate(); err != nil {
		return usagef(c, "sim %s: %v", name, err)
	}
	return nil
}

// collectiveCommand is sim allreduce or sim alltoall.
func collectiveCommand(name, usage string, d sim.CollectiveOptions) *cli.Command {
	var sizes []int64
	for _, s := range d.Sizes {
		sizes = append(sizes, int64(s>>20))
	}
	return &cli.Command{
		Name:  name,
		Usage: usage,
		Flags: append(simFabricFlags(d.Fabric, true), append([]cli.Flag{
			&cli.IntFlag{Name: "planes", Value: d.Fabric.Planes, Usage: "planes, 1 to 8"},
			&cli.Int64SliceFlag{Name: "sizes-mib", Value: cli.NewInt64Slice(sizes...), Usage: "buffer sizes per host, MiB, 1 to 1024"},
			&cli.Float64SliceFlag{Name: "losses", Value: cli.NewFloat64Slice(d.Losses...), Usage: "random loss rates on every downlink, 0 to 0.5"},
			&cli.BoolFlag{Name: "no-baseline", Usage: "run mroce only"},
			&cli.IntFlag{Name: "slices", Value: d.Slices, Usage: "all-reduce: pieces each step's chunk goes in, pipelined (1 to 64)"},
			jobsFlag,
		}, simOutputFlags(name)...)...),
		Action: func(c *cli.Context) error {
			o := d
			o.Fabric.Planes, o.Losses, o.Baseline, o.Sizes = c.Int("planes"), c.Float64Slice("losses"), !c.Bool("no-baseline"), nil
			if o.Slices = c.Int("slices"); o.Slices < 1 || o.Slices > 64 {
				return usagef(c, "sim %s: --slices must be 1 to 64", name)
			}
			if err := fabricFlagsInto(c, &o.Fabric); err != nil {
				return err
			}
			if err := simJobs(c, &o.Jobs); err != nil {
				return err
			}
			for _, m := range c.Int64Slice("sizes-mib") {
				if m < 1 || m > 1024 {
					return usagef(c, "sim %s: --sizes-mib: %d is not 1 to 1024", name, m)
				}
				o.Sizes = append(o.Sizes, int(m)<<20)
			}
			for _, p := range o.Losses {
				if !(p >= 0 && p <= 0.5) {
					return usagef(c, "sim %s: --losses: %g is not 0 to 0.5", name, p)
				}
			}
			if o.Fabric.Planes < 1 || o.Fabric.Planes > 8 || len(o.Sizes) == 0 || len(o.Losses) == 0 {
				return usagef(c, "sim %s: --planes must be 1 to 8; --sizes-mib and --losses not empty", name)
			}
			return runScenario(c, name, func(seed uint64, tr engine.Tracer) (sim.CollectiveResult, error) {
				o.Fabric.Seed, o.Fabric.Tracer = seed, tr
				return sim.Collective(name, o)
			},
				report.CollectiveTables, report.CollectivePlot)
		},
	}
}

// fabricFlagsInto reads the fabric flags planes and planefail share.
func fabricFlagsInto(c *cli.Context, f *sim.FabricOptions) error {
	f.Hosts, f.LinkRate = c.Int("hosts"), int64(c.Float64("rate-gbps")*1e9)
	for _, fl := range c.Command.Flags {
		if _, one := fl.(*cli.IntFlag); one && fl.Names()[0] == "paths" { // permutation's is a list
			f.Paths = c.Int("paths")
		}
	}
	f.HostsPerLeaf, f.Seed, f.RealPayloads, f.Workers = c.Int("hosts-per-leaf"), c.Uint64("seed"), c.Bool("real-payloads"), c.Int("workers")
	f.FatTreeK = c.Int("fat-tree-k")
	if err := startJitterInto(c, &f.StartJitter); err != nil {
		return err
	}
	if err := resendInto(c, &f.Resend); err != nil {
		return err
	}
	if err := firstWindowInto(c, &f.FirstWindow); err != nil {
		return err
	}
	for _, spec := range [...]struct{ flag, key string }{{"plane-rate-gbps", "rate-gbps"}, {"plane-delay", "delay"}, {"plane-buffer-kib", "buffer-kib"}} {
		for _, v := range c.StringSlice(spec.flag) {
			p, val, ok := strings.Cut(v, "=")
			if !ok {
				return usagef(c, "sim %s: --%s %q: want P=VALUE", c.Command.Name, spec.flag, v)
			}
			if err := f.ParsePlane(p, spec.key, val); err != nil {
				return usagef(c, "sim %s: --%s: %v", c.Command.Name, spec.flag, err)
			}
		}
	}
	if f.FatTreeK > 0 && !c.IsSet("hosts-per-leaf") {
		f.HostsPerLeaf = 0 // a scenario's default leaf-spine gives way to the tree asked for
	}
	if err := linkFlagsInto(c, &f.Links); err != nil {
		return err
	}
	if !c.IsSet("workers") && c.IsSet("jobs") && c.Int("jobs") != 1 {
		f.Workers = 1 // the cores go to the runs of --jobs side by side
	}
	if f.HostsPerLeaf > 0 {
		f.Spines = c.Int("spines")
	}
	switch {
	case f.Hosts < 2 || f.Hosts > 256:
		return usagef(c, "sim %s: --hosts must be 2 to 256", c.Command.Name)
	case f.Paths < 1 || f.Paths > 256:
		return usagef(c, "sim %s: --paths must be 1 to 256", c.Command.Name)
	case f.LinkRate < 1e9 || f.LinkRate > 1600e9:
		return usagef(c, "sim %s: --rate-gbps must be 1 to 1600", c.Command.Name)
	case f.Workers < 0:
		return usagef(c, "sim %s: --workers must not be negative", c.Command.Name)
	case f.HostsPerLeaf < 0 || f.HostsPerLeaf > 0 && (f.Spines < 1 || f.Spines > 64):
		return usagef(c, "sim %s: --hosts-per-leaf must not be negative, --spines 1 to 64", c.Command.Name)
	case f.CheckPlanes() != nil:
		return usagef(c, "sim %s: --plane-rate-gbps, --plane-delay or --plane-buffer-kib: %v", c.Command.Name, f.CheckPlanes())
	case f.FatTreeK != 0 && (f.FatTreeK < 2 || f.FatTreeK > 64 || f.FatTreeK%2 != 0 || f.HostsPerLeaf != 0 || f.Hosts > f.FatTreeK*f.FatTreeK*f.FatTreeK/4):
		return usagef(c, "sim %s: --fat-tree-k must be even, 2 to 64, hold --hosts (k^3/4), and go without --hosts-per-leaf", c.Command.Name)
	}
	return nil
}

// runScenario runs a scenario, prints the tables its result makes as text,
// JSON or CSV, and writes its plot.
func runScenario[R any](c *cli.Context, name string, run func(seed uint64, tracer engine.Tracer) (R, error), tables func(R) []*report.Table, plot func(R) *report.Plot) error {
	return runScenarioSeeds(c, name, c.Int("seeds"), run, tables, plot)
}

// runScenarioSeeds is runScenario with seeds runs, from --seed up. With
// more than one, every figure of the tables becomes its spread over the
// seeds (report.OverSeeds), and the plot is the first seed's. The first
// seed's run gets --trace's tracer, nil without it, and the others nil.
func runScenarioSeeds[R any](c *cli.Context, name string, seeds int, run func(seed uint64, tracer engine.Tracer) (R, error), tables func(R) []*report.Table, plot func(R) *report.Plot) (err error) {
	if c.Bool("json") && c.Bool("csv") {
		return usagef(c, "sim %s: --json or --csv, not both", name)
	}
	if seeds < 1 || seeds > maxSeeds {
		return usagef(c, "sim %s: --seeds must be 1 to %d", name, maxSeeds)
	}
	if path := c.String("plot"); path != "" {
		if err := report.CheckPlotPath(path); err != nil {
			return usagef(c, "sim %s: --plot: %v", name, err) // before a run that may take minutes
		}
	}
	stopProfile, err := startCPUProfile(c.String("cpuprofile"))
	if err != nil {
		return fmt.Errorf("sim %s: %w", name, err)
	}
	defer stopProfile()
	if c.Bool("huge-pages") {
		_, _ = hugepage.Reserve(hugeHeap) // where it cannot, the run is only slower
	}
	trace, err := openTrace(c)
	if err != nil {
		return err
	}
	defer func() { err = trace.close(err) }()
	sim.HeapProfile = c.String("memprofile")
	defer func() { sim.HeapProfile = "" }()
	began := time.Now()
	first := c.Uint64("seed")
	var res R
	var ts []*report.Table
	var runs [][]*report.Table
	var used []uint64
	for i := range seeds {
		tracer := trace.tracer()
		if i > 0 {
			tracer = nil
		}
		r, err := run(first+uint64(i), tracer)
		if err != nil {
			return fmt.Errorf("sim %s: seed %d: %w", name, first+uint64(i), err)
		}
		if i == 0 {
			res = r
		}
		runs, used = append(runs, tables(r)), append(used, first+uint64(i))
	}
	if ts = runs[0]; seeds > 1 {
		if ts, err = report.OverSeeds(runs, used); err != nil {
			return fmt.Errorf("sim %s: %w", name, err)
		}
	}
	w := c.App.Writer
	switch {
	case c.Bool("json"):
		err = report.WriteJSON(w, name, ts)
	case c.Bool("csv"):
		for _, t := range ts {
			if err = t.CSV(w); err != nil {
				break
			}
		}
	default:
		err = printTables(w, ts)
		fmt.Fprintf(w, "(%v of wall time)\n", time.Since(began).Round(time.Millisecond))
	}
	if err != nil {
		return err
	}
	if path := c.String("plot"); path != "" {
		if err := plot(res).Save(path); err != nil {
			return fmt.Errorf("sim %s: %w", name, err)
		}
		if !c.Bool("json") && !c.Bool("csv") {
			fmt.Fprintf(w, "plot: %s\n", path)
		}
	}
	return nil
}

// maxSeeds bounds --seeds.
const maxSeeds = 100

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
