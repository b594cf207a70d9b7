package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/report"
)

// The scenarios of mroce sim: each runs the real engine over netem in
// virtual time, deterministically for its seed, and returns its tables and
// the plot of its main figure.

// LossOptions are the loss scenario's settings.
type LossOptions struct {
	Losses         []float64 // random loss rates on every downlink
	Bytes          int
	Planes, Paths  int
	LinkRate       int64
	BaselineWindow int
	Burst          bool    // loss in bursts (Gilbert-Elliott) of the same mean
	BurstLen       float64 // mean burst, packets
	Seed           uint64
}

// DefaultLoss is the loss scenario of docs/results.md.
func DefaultLoss() LossOptions {
	return LossOptions{Losses: []float64{0, 0.001, 0.01, 0.02, 0.05, 0.1}, Bytes: 64 << 20, Planes: 4, Paths: 8,
		LinkRate: 100e9, BaselineWindow: 32, BurstLen: 4, Seed: 1}
}

// Loss measures goodput against random loss: mroce over its planes, the
// baseline (one path, go-back-N) on the lossy fabric and on the PFC one,
// each as a ratio to its own goodput without loss, and the go-back-N model
// 1/(1 + pW) beside the baseline.
func Loss(o LossOptions) ([]*report.Table, *report.Plot, error) {
	kind := "random"
	if o.Burst {
		kind = fmt.Sprintf("burst (mean %g packets)", o.BurstLen)
	}
	t := &report.Table{
		Title: fmt.Sprintf("Goodput under %s loss on every downlink: %d MiB, mroce over %d paths on %d planes of %g Gb/s; baseline on one plane, window %d",
			kind, o.Bytes>>20, o.Paths, o.Planes, float64(o.LinkRate)/1e9, o.BaselineWindow),
		Columns: []string{"loss", "mroce Gb/s", "mroce/0%", "target", "lost", "resent", "baseline lossy Gb/s", "baseline/0%", "model 1/(1+pW)", "baseline PFC Gb/s", "PFC/0%"},
	}
	pl := &report.Plot{Title: "Goodput under loss, as a share of each one's loss-free goodput", XLabel: "loss rate (%)", YLabel: "of loss-free goodput", YMin: 0, YMax: 1.05, LegendBottomLeft: true}
	series := []report.Series{{Name: "mroce"}, {Name: "baseline, lossy fabric"}, {Name: "baseline, PFC fabric"}, {Name: "go-back-N model 1/(1+pW)"}, {Name: "limit 1 - p"}}
	var m0, b0, p0 float64
	for _, p := range o.Losses {
		base := TransferConfig{Bytes: o.Bytes, Planes: o.Planes, Paths: o.Paths, LinkRate: o.LinkRate, Delay: time.Microsecond,
			Loss: p, ECNThreshold: 200 << 10, Buffer: 16 << 20, Seed: o.Seed, Burst: o.Burst, BurstLen: o.BurstLen}
		m, err := Transfer(base)
		if err != nil {
			return nil, nil, fmt.Errorf("mroce at %g: %w", p, err)
		}
		bl := base
		bl.Bytes = max(o.Bytes/4, 1<<20) // one plane: a quarter of the bytes in the same time
		bl.Baseline, bl.BaselineWindow = true, o.BaselineWindow
		b, err := Transfer(bl)
		if err != nil {
			return nil, nil, fmt.Errorf("baseline at %g: %w", p, err)
		}
		bl.PFC = true
		bp, err := Transfer(bl)
		if err != nil {
			return nil, nil, fmt.Errorf("baseline on PFC at %g: %w", p, err)
		}
		if p == o.Losses[0] {
			m0, b0, p0 = m.Goodput, b.Goodput, bp.Goodput
		}
		model := 1 / (1 + p*float64(o.BaselineWindow))
		t.Add(p, m.Goodput*8/1e9, m.Goodput/m0, 0.98*(1-p), m.Lost, m.Retransmits, b.Goodput*8/1e9, b.Goodput/b0, model,
			bp.Goodput*8/1e9, bp.Goodput/p0)
		for i, y := range []float64{m.Goodput / m0, b.Goodput / b0, bp.Goodput / p0, model, 1 - p} {
			series[i].X = append(series[i].X, 100*p)
			series[i].Y = append(series[i].Y, y)
		}
	}
	if o.Losses[0] != 0 {
		t.Notes = append(t.Notes, "Ratios are to the first loss rate's goodput, which is not 0.")
	}
	t.Notes = append(t.Notes, "The target for mroce is 0.98 x (1 - p) of its loss-free goodput; the baseline is held to its model within 10%.")
	pl.Series = series
	return []*report.Table{t}, pl, nil
}

// IncastOptions are the incast scenario's settings.
type IncastOptions struct {
	Senders []int
	Rates   []int64
	Bytes   int
	Seed    uint64
}

// DefaultIncastScenario is the incast scenario of docs/results.md.
func DefaultIncastScenario() IncastOptions {
	return IncastOptions{Senders: []int{8, 64}, Rates: []int64{100e9, 400e9}, Bytes: 2 << 20, Seed: 1}
}

// IncastScenario runs N:1 incasts side by side: mroce, mroce without the
// receiver's hints, the baseline on the PFC fabric and on the lossy one.
// The plot follows the first mroce run at the largest N: the slowest,
// mean and fastest sender's delivered rate over fair share, window by
// window.
func IncastScenario(o IncastOptions) ([]*report.Table, *report.Plot, error) {
	t := &report.Table{
		Title:   fmt.Sprintf("N:1 incast, %d MiB from each sender, 4 KiB packets, DCTCP marking at 200 KiB", o.Bytes>>20),
		Columns: []string{"N", "Gb/s", "variant", "converged (base RTTs)", "Jain after 10 RTTs", "peak queue KiB", "drops", "after 1st RTT", "slowest FCT/ideal"},
		Notes:   []string{"Converged: from the first data packet until every sender's delivered rate stays within 10% of its fair share (targets: 2 base RTTs at N = 8, 4 at N = 64)."},
	}
	nMax := 0
	for _, n := range o.Senders {
		nMax = max(nMax, n)
	}
	pl := &report.Plot{Title: fmt.Sprintf("Incast %d:1 at %g Gb/s (mroce): delivered rate over fair share", nMax, float64(o.Rates[0])/1e9),
		XLabel: "base RTTs from the first data packet (window start)", YLabel: "rate / fair share"}
	series := []report.Series{{Name: "slowest sender"}, {Name: "mean"}, {Name: "fastest sender"}}
	variants := []IncastConfig{{}, {NoRateHints: true}, {Baseline: true, PFC: true}, {Baseline: true}}
	for _, n := range o.Senders {
		for ri, rate := range o.Rates {
			for vi, v := range variants {
				cfg := DefaultIncast(n, rate)
				cfg.Bytes, cfg.Seed = o.Bytes, o.Seed
				cfg.NoRateHints, cfg.Baseline, cfg.PFC = v.NoRateHints, v.Baseline, v.PFC
				if n == nMax && ri == 0 && vi == 0 {
					cfg.Trace = func(start float64, rates []float64, fair float64) {
						lo, hi, sum := math.Inf(1), 0.0, 0.0
						for _, r := range rates {
							lo, hi, sum = math.Min(lo, r), math.Max(hi, r), sum+r
						}
						for i, y := range []float64{lo / fair, sum / float64(len(rates)) / fair, hi / fair} {
							series[i].X = append(series[i].X, start)
							series[i].Y = append(series[i].Y, y)
						}
					}
				}
				r, err := Incast(cfg)
				if err != nil {
					return nil, nil, fmt.Errorf("incast %d at %g Gb/s, %s: %w", n, float64(rate)/1e9, cfg.Mode(), err)
				}
				t.Add(n, float64(rate)/1e9, cfg.Mode(), r.Convergence, r.Jain, r.PeakQueue>>10, r.Drops, r.DropsAfterFirstRTT, r.FCTRatio)
			}
		}
	}
	pl.Series = series
	return []*report.Table{t}, pl, nil
}

// AllToAll is every host WRITEing bytes to every other, all at once.
func AllToAll(hosts, bytes int) []Flow {
	var flows []Flow
	for a := 0; a < hosts; a++ {
		for b := 0; b < hosts; b++ {
			if a != b {
				flows = append(flows, Flow{Src: a, Dst: b, Bytes: bytes})
			}
		}
	}
	return flows
}

// Permutation is every host h WRITEing bytes to host (h + shift) mod
// hosts: each sends to one and receives from one.
func Permutation(hosts, shift, bytes int) []Flow {
	var flows []Flow
	for h := 0; h < hosts; h++ {
		flows = append(flows, Flow{Src: h, Dst: (h + shift) % hosts, Bytes: bytes})
	}
	return flows
}

// PlanesOptions are the planes scenario's settings.
type PlanesOptions struct {
	Planes    []int
	Fabric    FabricOptions // its Planes is set for each run
	FlowBytes int           // every host to every other
}

// DefaultPlanes is the planes scenario of docs/results.md: 64 hosts, all
// to all (4,032 connections), 256 KiB each, 1 to 8 planes of 100 Gb/s.
func DefaultPlanes() PlanesOptions {
	return PlanesOptions{Planes: []int{1, 2, 4, 8}, Fabric: DefaultFabric(1), FlowBytes: 256 << 10}
}

// Planes measures how the aggregate throughput of an all-to-all scales
// with the planes (NIC ports) every host has.
func Planes(o PlanesOptions) ([]*report.Table, *report.Plot, error) {
	flows := AllToAll(o.Fabric.Hosts, o.FlowBytes)
	t := &report.Table{
		Title: fmt.Sprintf("All-to-all over 1 to %d planes: %d hosts, %d KiB from every host to every other, %d paths per connection, planes of %g Gb/s",
			o.Planes[len(o.Planes)-1], o.Fabric.Hosts, o.FlowBytes>>10, o.Fabric.Paths, float64(o.Fabric.LinkRate)/1e9),
		Columns: []string{"planes", "connections", "aggregate Gb/s", "of capacity", "vs half the planes", "FCT p50 µs", "FCT p99 µs", "connections lost"},
		Notes:   []string{"Capacity: every host's payload rate over all its planes. The target for 8 planes over 4 is 2.0 +- 3%."},
	}
	speed := &report.Table{Title: "Simulator speed (wall time on this machine: it varies from run to run)",
		Columns: []string{"planes", "data packets", "wall s", "data packets/s", "heap MiB"}}
	pl := &report.Plot{Title: "All-to-all throughput against planes", XLabel: "planes (NIC ports per host)", YLabel: "aggregate goodput (Tb/s)"}
	got, ideal := report.Series{Name: "mroce"}, report.Series{Name: "linear from one plane"}
	byPlanes := map[int]float64{}
	for _, p := range o.Planes {
		f := o.Fabric
		f.Planes = p
		r, err := RunFlows(f, flows, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("%d planes: %w", p, err)
		}
		g := r.Goodput(flows)
		byPlanes[p] = g
		var vsHalf any
		if h, ok := byPlanes[p/2]; ok && p%2 == 0 {
			vsHalf = g / h
		}
		t.Add(p, r.Connections, g*8/1e9, g/(float64(f.Hosts)*r.HostCapacity), vsHalf,
			float64(Percentile(r.FCT, 0.5).Microseconds()), float64(Percentile(r.FCT, 0.99).Microseconds()), r.Failed)
		speed.Add(p, r.Packets, r.WallTime.Seconds(), r.PacketRate(), float64(r.HeapBytes)/(1<<20))
		got.X, got.Y = append(got.X, float64(p)), append(got.Y, g*8/1e12)
	}
	if len(got.Y) > 0 {
		for _, x := range got.X {
			ideal.X, ideal.Y = append(ideal.X, x), append(ideal.Y, got.Y[0]*x/got.X[0])
		}
	}
	pl.Series = []report.Series{got, ideal}
	return []*report.Table{t, speed}, pl, nil
}

// PlaneFailOptions are the planefail scenario's settings.
type PlaneFailOptions struct {
	Fabric    FabricOptions
	FlowBytes int           // each host to the next (a permutation)
	FailAt    time.Duration // the plane fails then
	RepairAt  time.Duration // and is repaired then (0: never)
	Plane     int
	Down      bool // the hosts see the port go down (else a blackhole: only the transport can tell)
}

// DefaultPlaneFail is the planefail scenario of docs/results.md: 8 hosts on
// 8 planes of 100 Gb/s, each sending 96 MiB to the next; plane 0 is
// blackholed at 100 µs and repaired at 400 µs.
func DefaultPlaneFail() PlaneFailOptions {
	f := DefaultFabric(8)
	f.Hosts = 8
	return PlaneFailOptions{Fabric: f, FlowBytes: 96 << 20, FailAt: 100 * time.Microsecond, RepairAt: 400 * time.Microsecond}
}

// PlaneFail runs a permutation while one plane fails and comes back, and
// reports the throughput around the failure, against what the remaining
// planes can carry.
func PlaneFail(o PlaneFailOptions) ([]*report.Table, *report.Plot, error) {
	kind := netem.PlaneBlackhole
	if o.Down {
		kind = netem.PlaneDown
	}
	f := o.Fabric
	f.Faults = append(f.Faults, netem.Fault{At: o.FailAt, Kind: kind, Plane: o.Plane})
	if o.RepairAt > o.FailAt {
		f.Faults = append(f.Faults, netem.Fault{At: o.RepairAt, Kind: netem.Repair, Plane: o.Plane})
	}
	flows := Permutation(f.Hosts, 1, o.FlowBytes)
	bucket := 5 * time.Microsecond
	r, err := RunFlows(f, flows, bucket)
	if err != nil {
		return nil, nil, err
	}
	capacity := float64(f.Hosts) * r.HostCapacity // all planes
	baseRTT := 4*f.Delay + 2*time.Duration(float64(wireBytes*8)/float64(f.LinkRate)*1e9)
	mean := func(from, to time.Duration) float64 {
		var sum float64
		n := 0
		for i, b := range r.Delivered {
			at := time.Duration(i) * bucket
			if at >= from && at+bucket <= to {
				sum += b
				n++
			}
		}
		if n == 0 {
			return math.NaN()
		}
		return sum / (float64(n) * bucket.Seconds()) / capacity
	}
	failAt, repairAt := o.FailAt, o.RepairAt // from the flows' start, as RunFlows samples
	left := float64(f.Planes-1) / float64(f.Planes)
	after := mean(failAt+10*baseRTT, failAt+110*baseRTT)
	name := "blackholed"
	if o.Down {
		name = "down (the hosts see it)"
	}
	t := &report.Table{
		Title: fmt.Sprintf("Plane %d of %d %s at %v, repaired at %v: %d hosts, each WRITEing %d MiB to the next, %d paths per connection",
			o.Plane, f.Planes, name, o.FailAt, o.RepairAt, f.Hosts, o.FlowBytes>>20, f.Paths),
		Columns: []string{"period", "throughput / all planes' capacity", "target"},
		Notes: []string{fmt.Sprintf("Base RTT %v. Target after the failure: 0.95 x %d/%d = %.3f, averaged over the 100 base RTTs starting 10 after it. Connections lost: %d of %d.",
			baseRTT, f.Planes-1, f.Planes, 0.95*left, r.Failed, r.Connections)},
	}
	t.Add("before the failure (from the start: the first round trips included)", mean(0, failAt), nil)
	t.Add("10-110 base RTTs after", after, 0.95*left)
	if o.RepairAt > o.FailAt {
		t.Add("failed, until the repair", mean(failAt, repairAt), nil)
		t.Add("after the repair (+10 base RTTs)", mean(repairAt+10*baseRTT, r.Makespan-10*baseRTT), nil)
	}
	pl := &report.Plot{Title: fmt.Sprintf("Plane %d of %d %s, then repaired", o.Plane, f.Planes, name),
		XLabel: "µs from the flows' start", YLabel: "delivered / all planes' capacity", YMin: 0, YMax: 1.1}
	s := report.Series{Name: "mroce"}
	for i, b := range r.Delivered {
		s.X = append(s.X, float64(time.Duration(i)*bucket)/float64(time.Microsecond))
		s.Y = append(s.Y, b/bucket.Seconds()/capacity)
	}
	lim := report.Series{Name: fmt.Sprintf("%d/%d", f.Planes-1, f.Planes)}
	if len(s.X) > 0 {
		lim.X, lim.Y = []float64{s.X[0], s.X[len(s.X)-1]}, []float64{left, left}
	}
	pl.Series = []report.Series{s, lim}
	return []*report.Table{t}, pl, nil
}
