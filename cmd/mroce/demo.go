package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

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
			return runDemo(c.Context, c.App.Writer, o)
		},
	}
}

type demoOptions struct {
	sizeMiB, planes, paths, streams int
	loss, rateGbps                  float64
	delay, interval                 time.Duration
	seed                            uint64
	json                            bool
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

func runDemo(ctx context.Context, w io.Writer, o demoOptions) error {
	wallStart := time.Now()
	// Switch queues mark ECN above 200 KiB (DCTCP step marking), so the
	// senders' windows see congestion.
	link := netem.LinkConfig{Rate: int64(o.rateGbps * 1e9), Delay: o.delay,
		Queue: netem.QueueConfig{Limit: 4 << 20, ECNThreshold: 200 << 10}}
	fc := netem.Config{Seed: o.seed, Hosts: 2, Planes: o.planes, Uplink: link, Downlink: link}
	if o.loss > 0 {
		fc.Downlink.Impair.Loss = &netem.RandomLoss{P: o.loss}
	}
	// The receiver shares 98% of its planes' payload rate (its rate hints).
	inbound := 0.98 * float64(o.planes) * o.rateGbps * 1e9 / 8 * 4096 / (4160 + 66)
	net, err := software.NewSimNetwork(fc, engine.Config{Paths: o.paths, Streams: o.streams, DSNWindow: 4096,
		InboundCapacity: inbound, LineRate: o.rateGbps * 1e9 / 8}, o.seed)
	if err != nil {
		return err
	}
	var lostData uint64
	net.Fabric.AddTap(func(e *netem.TapEvent) {
		if e.Verdict == netem.Dropped && len(e.Datagram.Data) > 1 && proto.Type(e.Datagram.Data[1]).IsData() {
			lostData++
		}
	})

	sender, receiver := net.Device(0), net.Device(1)
	spd, _ := sender.AllocPD()
	rpd, _ := receiver.AllocPD()
	scq, rcq := sender.CreateCQ(o.streams+8), receiver.CreateCQ(8)
	if _, err := rpd.Listen(rcq, rcq, endpoint.QPOptions{}); err != nil {
		return err
	}
	qp, err := spd.Connect(ctx, net.Remote(1), scq, scq, endpoint.QPOptions{})
	if err != nil {
		return err
	}

	size := o.sizeMiB << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{byte(o.seed), byte(o.seed >> 8)}).Read(data)
	src, err := spd.RegisterMR(data, endpoint.LocalWrite)
	if err != nil {
		return err
	}
	dst, err := rpd.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite)
	if err != nil {
		return err
	}

	text := w
	if o.json {
		text = io.Discard
	}
	fmt.Fprintf(text, "mroce demo: WRITE %d MiB from host 0 to host 1 over %d paths on %d planes (%g Gb/s each), %g%% random loss on every downlink, %d streams, seed %d\n\n",
		o.sizeMiB, o.paths, o.planes, o.rateGbps, 100*o.loss, o.streams, o.seed)
	start := net.Sim.Now()
	// Interval reports in virtual time: the bytes the paths carried (the
	// fabric's goodput is the same but for headers and resends).
	rep := &transferReport{Role: "sender", Mode: "mroce", Paths: o.paths, Name: "demo", Size: int64(size), out: text, text: true, micro: true, Intervals: []interval{}}
	rep.started = time.Unix(0, 0)
	var lastSent uint64
	tick := func() {
		tel := qp.Telemetry()
		var sentBytes uint64
		for _, t := range tel {
			sentBytes += t.BytesSent
		}
		rep.mu.Lock()
		rep.bytes += int64(sentBytes - lastSent)
		rep.mu.Unlock()
		lastSent = sentBytes
		rep.tickAt(tel, net.Sim.Now().Sub(start).Seconds())
	}
	chunk := size / o.streams
	for s := 0; s < o.streams; s++ {
		off := s * chunk
		n := chunk
		if s == o.streams-1 {
			n = size - off
		}
		if err := qp.PostWrite(uint64(s), uint16(s), src.SGE(uint64(off), uint32(n)), dst.RKey(), uint64(off)); err != nil {
			return err
		}
	}
	wcs := make([]endpoint.Completion, o.streams)
	next := start.Add(o.interval)
	for done := 0; done < o.streams; {
		if o.interval > 0 {
			if err := net.Backend(0).Progress(ctx, func() bool { return scq.Len() > 0 || net.Sim.Now() >= next }); err != nil {
				return err
			}
			if net.Sim.Now() >= next {
				tick()
				next = next.Add(o.interval)
			}
			if scq.Len() == 0 {
				continue
			}
		}
		k, err := scq.Wait(ctx, wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:k] {
			if wc.Status != endpoint.StatusOK {
				return fmt.Errorf("WRITE %d failed: %v: %v", wc.ID, wc.Status, wc.Err)
			}
		}
		done += k
	}
	elapsed := net.Sim.Now().Sub(start)
	if o.interval > 0 {
		tick()
	}
	sum, got := sha256.Sum256(data), sha256.Sum256(dst.Bytes())
	if sum != got {
		return fmt.Errorf("the data received differs from the data sent")
	}
	tel := qp.Telemetry()
	if o.json {
		retx, ce, _ := totals(tel)
		doc := map[string]any{
			"config": map[string]any{"size": size, "paths": o.paths, "planes": o.planes, "rate_gbps": o.rateGbps, "loss": o.loss,
				"streams": o.streams, "seed": o.seed, "delay_ns": o.delay.Nanoseconds()},
			"intervals": rep.Intervals,
			"end": map[string]any{"bytes": size, "virtual_seconds": elapsed.Seconds(), "gbps": float64(size) * 8 / elapsed.Seconds() / 1e9,
				"sha256": fmt.Sprintf("%x", got), "verified": true, "retransmits": retx, "ce_marks": ce, "lost_in_fabric": lostData},
			"paths_detail": pathRows(tel),
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	var retx, sent, bytes uint64
	for _, t := range tel {
		retx += t.Retransmits
		sent += t.PacketsSent
		bytes += t.BytesSent
	}
	goodput := float64(size) * 8 / elapsed.Seconds() / 1e9
	capacity := o.rateGbps * float64(o.planes)
	fmt.Fprintf(w, "\n  completed in %v of virtual time: %.1f Gb/s of goodput, %.1f%% of the %g Gb/s the planes carry\n",
		elapsed.Round(time.Microsecond), goodput, 100*goodput/capacity, capacity)
	fmt.Fprintf(w, "  data verified: SHA-256 %x\n", got[:8])
	ratio := "n/a"
	if lostData > 0 {
		ratio = fmt.Sprintf("%.3f", float64(retx)/float64(lostData))
	}
	fmt.Fprintf(w, "  %d data packets sent, %d lost in the fabric, %d retransmitted: %s retransmissions per loss\n",
		sent, lostData, retx, ratio)

	fmt.Fprintf(w, "\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tplane\tsrc port\tstate\tsRTT\tmin RTT\tpackets\tshare\tretx\tlost\tECN\ttimeouts\t")
	for _, t := range tel {
		share := 0.0
		if bytes > 0 {
			share = 100 * float64(t.BytesSent) / float64(bytes)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%v\t%v\t%v\t%d\t%.1f%%\t%d\t%d\t%.1f%%\t%d\t\n", t.Path, t.Plane, t.SrcPort, t.State,
			t.RTT.SRTT.Round(10*time.Nanosecond), t.RTT.Min.Round(10*time.Nanosecond), t.PacketsSent, share,
			t.Retransmits, t.Lost, 100*t.ECNFraction(), t.Timeouts)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n  (%v of wall time to simulate)\n", time.Since(wallStart).Round(time.Millisecond))
	return nil
}
