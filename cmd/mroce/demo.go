package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/app/demo"
	"github.com/mroce/mroce/app/xferstats"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/proto"
)

// demoCommand defines mroce demo.
func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "move data between two hosts through the built-in emulator, in virtual time",
		Description: "demo runs a receiver and a sender in one process on an emulated fabric (netem)\n" +
			"in virtual time: no root, no network. The sender WRITEs a buffer over many paths\n" +
			"sprayed across the planes while the fabric drops packets at random on every\n" +
			"downlink (data and acks alike). It prints the goodput, what was lost and resent,\n" +
			"and what each path carried, and checks the data with SHA-256.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "size-mib", Value: 64, Usage: "MiB to transfer"},
			&cli.Float64Flag{Name: "loss", Value: 0.01, Usage: "random loss on every downlink, 0 to 0.5"},
			&cli.IntFlag{Name: "planes", Value: 4, Usage: "planes (NIC ports per host), 1 to 8"},
			&cli.IntFlag{Name: "paths", Value: 8, Usage: "paths of the connection, 1 to 256"},
			&cli.IntFlag{Name: "streams", Value: 4, Usage: "streams the data is split over"},
			&cli.Float64Flag{Name: "rate-gbps", Value: 100, Usage: "link rate of every plane, Gb/s"},
			&cli.DurationFlag{Name: "delay", Value: 2 * time.Microsecond, Usage: "propagation delay of every link"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of every random choice (the run repeats exactly)"},
			&cli.DurationFlag{Name: "interval", Value: 250 * time.Microsecond, Usage: "virtual time between interval reports (0: none)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON document instead of text"},
			traceFlag,
		},
		Action: func(c *cli.Context) error {
			o := demoOptions{
				sizeMiB: c.Int("size-mib"), loss: c.Float64("loss"), planes: c.Int("planes"),
				paths: c.Int("paths"), streams: c.Int("streams"), rateGbps: c.Float64("rate-gbps"),
				delay: c.Duration("delay"), seed: c.Uint64("seed"), interval: c.Duration("interval"), json: c.Bool("json"),
			}
			if err := o.check(); err != nil {
				return &usageError{msg: "demo: " + err.Error(), command: "demo"}
			}
			return withTrace(c, func(tr engine.Tracer) error {
				o.tracer = tr
				return runDemo(c.Context, c.App.Writer, o)
			})
		},
	}
}

type demoOptions struct {
	sizeMiB, planes, paths, streams int
	loss, rateGbps                  float64
	delay, interval                 time.Duration
	seed                            uint64
	json                            bool
	tracer                          engine.Tracer
}

func (o demoOptions) check() error {
	switch {
	case o.sizeMiB < 1 || o.sizeMiB > 4096:
		return fmt.Errorf("--size-mib %d: want 1 .. 4096", o.sizeMiB)
	case !(o.loss >= 0 && o.loss <= 0.5):
		return fmt.Errorf("--loss %v: want 0 .. 0.5", o.loss)
	case o.planes < 1 || o.planes > 8:
		return fmt.Errorf("--planes %d: want 1 .. 8", o.planes)
	case o.paths < 1 || o.paths > proto.MaxPaths:
		return fmt.Errorf("--paths %d: want 1 .. %d", o.paths, proto.MaxPaths)
	case o.streams < 1 || o.streams > 64:
		return fmt.Errorf("--streams %d: want 1 .. 64", o.streams)
	case !(o.rateGbps > 0 && o.rateGbps <= 1600):
		return fmt.Errorf("--rate-gbps %v: want (0, 1600]", o.rateGbps)
	case o.delay < 0:
		return fmt.Errorf("--delay %v: want >= 0", o.delay)
	case o.interval < 0:
		return fmt.Errorf("--interval %v: want >= 0", o.interval)
	}
	return nil
}

// runDemo runs the demo and prints it as it goes, or as one JSON document
// at the end.
func runDemo(ctx context.Context, w io.Writer, o demoOptions) error {
	wallStart := time.Now()
	text := w
	if o.json {
		text = io.Discard
	}
	fmt.Fprintf(text, "mroce demo: WRITE %d MiB from host 0 to host 1 over %d paths on %d planes (%g Gb/s each), %g%% random loss on every downlink, %d streams, seed %d\n\n",
		o.sizeMiB, o.paths, o.planes, o.rateGbps, 100*o.loss, o.streams, o.seed)
	res, err := demo.Run(ctx, demo.Options{SizeMiB: o.sizeMiB, Planes: o.planes, Paths: o.paths, Streams: o.streams,
		Loss: o.loss, RateGbps: o.rateGbps, Delay: o.delay, Interval: o.interval, Seed: o.seed, Tracer: o.tracer},
		func(iv xferstats.Interval) { printInterval(text, iv, true, true) })
	if err != nil {
		return err
	}
	if o.json {
		return printDemoJSON(w, o, res)
	}
	printDemoText(w, o, res)
	fmt.Fprintf(w, "\n  (%v of wall time to simulate)\n", time.Since(wallStart).Round(time.Millisecond))
	return nil
}

// printDemoJSON prints the demo's configuration, intervals, end and paths
// as one document.
func printDemoJSON(w io.Writer, o demoOptions, res demo.Result) error {
	retx, ce, _ := xferstats.Totals(res.Telemetry)
	doc := map[string]any{
		"config": map[string]any{"size": res.Size, "paths": o.paths, "planes": o.planes, "rate_gbps": o.rateGbps, "loss": o.loss,
			"streams": o.streams, "seed": o.seed, "delay_ns": o.delay.Nanoseconds()},
		"intervals": res.Intervals,
		"end": map[string]any{"bytes": res.Size, "virtual_seconds": res.Elapsed.Seconds(), "gbps": float64(res.Size) * 8 / res.Elapsed.Seconds() / 1e9,
			"sha256": fmt.Sprintf("%x", res.SHA256), "verified": true, "retransmits": retx, "ce_marks": ce, "lost_in_fabric": res.LostData},
		"paths_detail": xferstats.PathRows(res.Telemetry),
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// printDemoText prints the goodput, the losses and their repair, and a
// row per path.
func printDemoText(w io.Writer, o demoOptions, res demo.Result) {
	var retx, sent, bytes uint64
	for _, t := range res.Telemetry {
		retx += t.Retransmits
		sent += t.PacketsSent
		bytes += t.BytesSent
	}
	goodput := float64(res.Size) * 8 / res.Elapsed.Seconds() / 1e9
	capacity := o.rateGbps * float64(o.planes)
	fmt.Fprintf(w, "\n  completed in %v of virtual time: %.1f Gb/s of goodput, %.1f%% of the %g Gb/s the planes carry\n",
		res.Elapsed.Round(time.Microsecond), goodput, 100*goodput/capacity, capacity)
	fmt.Fprintf(w, "  data verified: SHA-256 %x\n", res.SHA256[:8])
	ratio := "n/a"
	if res.LostData > 0 {
		ratio = fmt.Sprintf("%.3f", float64(retx)/float64(res.LostData))
	}
	fmt.Fprintf(w, "  %d data packets sent, %d lost in the fabric, %d retransmitted: %s retransmissions per loss\n",
		sent, res.LostData, retx, ratio)
	fmt.Fprintf(w, "\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tplane\tsrc port\tstate\tsRTT\tmin RTT\tpackets\tshare\tretx\tlost\tECN\ttimeouts\t")
	for _, t := range res.Telemetry {
		share := 0.0
		if bytes > 0 {
			share = 100 * float64(t.BytesSent) / float64(bytes)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%v\t%v\t%v\t%d\t%.1f%%\t%d\t%d\t%.1f%%\t%d\t\n", t.Path, t.Plane, t.SrcPort, t.State,
			t.RTT.SRTT.Round(10*time.Nanosecond), t.RTT.Min.Round(10*time.Nanosecond), t.PacketsSent, share,
			t.Retransmits, t.Lost, 100*t.ECNFraction(), t.Timeouts)
	}
	tw.Flush()
}
