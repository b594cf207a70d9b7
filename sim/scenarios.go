package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/report"
)

// The scenarios of mroce sim: each runs the real engine over netem in
// virtual time, deterministically for its seed, and returns its tables and
// the plot of its main figure.

// LossOptions are the loss scenario's settings.
type LossOptions struct {
	Losses        []float64 // random loss rates on every downlink
	Bytes         int
	Planes, Paths int
	LinkRate      int64
	Links
	BaselineWindow int
	// BaselineAckTimeout is the baseline's local ACK timeout, fixed (0: the
	// adaptive retransmission timeout, doubled per timeout in a row).
	BaselineAckTimeout time.Duration
	Burst              bool          // loss in bursts of the same mean
	BurstLen           float64       // mean burst, packets (Gilbert-Elliott)
	BurstTime          time.Duration // or, when set, mean burst in time (netem.TimedBursts)
	Seed               uint64
	RealPayloads       bool // as TransferConfig's
	Jobs               int  // runs at once (runEach)
}

// DefaultLoss is the loss scenario of docs/results.md. The baseline is
// tuned as a RoCEv2 deployment would be for this fabric: a window of 24
// packets, the smallest that fills its plane (0.975 of it without loss;
// the go-back-N model takes every loss to cost a whole window, which a
// larger window than the pipe does not), and the shortest local ACK
// timeout RoCEv2 offers that does not fire early here, 4.096 µs x 2^2.
func DefaultLoss() LossOptions {
	return LossOptions{Losses: []float64{0, 0.001, 0.01, 0.02, 0.05, 0.1}, Bytes: 64 << 20, Planes: 4, Paths: 8,
		LinkRate: 100e9, Links: DefaultLinks(), BaselineWindow: 24, BaselineAckTimeout: BaselineAckTimeout, BurstLen: 4, Seed: 1}
}

// GoBackNModel is the first-order go-back-N model of goodput under random
// loss p with a window of w packets, relative to no loss: 1/(1 + p w),
// every loss costing a window.
func GoBackNModel(p float64, w int) float64 { return 1 / (1 + p*float64(w)) }

// GoBackNEfficiency is go-back-N's efficiency when every transmission,
// resends included, is lost with probability p: (1 - p)/(1 - p + p w).
// Below a few percent it is GoBackNModel; at 10% and w = 24, 7% lower.
func GoBackNEfficiency(p float64, w int) float64 {
	return (1 - p) / (1 - p + p*float64(w))
}

// BaselineAckTimeout is the baseline's fixed local ACK timeout in the loss
// scenarios: RoCEv2's 4.096 µs x 2^2, about 3.5 base RTTs of these fabrics.
const BaselineAckTimeout = 16384 * time.Nanosecond

// Loss measures goodput against random loss: mroce over its planes, the
// baseline (one path, go-back-N) on the lossy fabric and on the PFC one,
// each as a ratio to its own goodput without loss, and the go-back-N model
// 1/(1 + pW) beside the baseline.
func Loss(o LossOptions) ([]*report.Table, *report.Plot, error) {
	kind := "random"
	if o.Burst {
		kind = fmt.Sprintf("burst (mean %g packets)", o.BurstLen)
		if o.BurstTime > 0 {
			kind = fmt.Sprintf("burst (mean %v, timed)", o.BurstTime)
		}
	}
	timeout := o.BaselineAckTimeout.String()
	if o.BaselineAckTimeout == 0 {
		timeout = "adaptive"
	}
	t := &report.Table{
		Title: fmt.Sprintf("Goodput under %s loss on every downlink: %d MiB, mroce over %d paths on %d planes of %g Gb/s; baseline on one plane, window %d, ACK timeout %s",
			kind, o.Bytes>>20, o.Paths, o.Planes, float64(o.LinkRate)/1e9, o.BaselineWindow, timeout),
		Columns: []string{"loss", "mroce Gb/s", "mroce/0%", "target", "lost", "resent", "baseline lossy Gb/s", "baseline/0%", "model 1/(1+pW)", "go-back-N (1-p)/(1-p+pW)", "baseline PFC Gb/s", "PFC/0%"},
	}
	t.Notes = append(t.Notes, o.Links.notes()...)
	pl := &report.Plot{Title: "Goodput under loss, as a share of each one's loss-free goodput", XLabel: "loss rate (%)", YLabel: "of loss-free goodput", YMin: 0, YMax: 1.05, LegendBottomLeft: true}
	series := []report.Series{{Name: "mroce"}, {Name: "baseline, lossy fabric"}, {Name: "baseline, PFC fabric"}, {Name: "go-back-N model 1/(1+pW)"}, {Name: "limit 1 - p"}}
	// Three runs a loss rate: mroce, the baseline lossy, the baseline on PFC.
	var runs []TransferConfig
	for _, p := range o.Losses {
		base := TransferConfig{Bytes: o.Bytes, Planes: o.Planes, Paths: o.Paths, LinkRate: o.LinkRate, Links: o.Links,
			Loss: p, Seed: o.Seed, Burst: o.Burst, BurstLen: o.BurstLen, BurstTime: o.BurstTime, RealPayloads: o.RealPayloads}
		bl := base
		bl.Bytes = max(o.Bytes/o.Planes, 1<<20) // one plane: its share of the bytes in the same time
		bl.Baseline, bl.BaselineWindow, bl.BaselineAckTimeout = true, o.BaselineWindow, o.BaselineAckTimeout
		bp := bl
		bp.PFC = true
		runs = append(runs, base, bl, bp)
	}
	results, err := runEach(o.Jobs, len(runs), func(i int) (TransferResult, error) {
		r, err := Transfer(runs[i])
		if err != nil {
			err = fmt.Errorf("%s at %g: %w", [3]string{"mroce", "baseline", "baseline on PFC"}[i%3], runs[i].Loss, err)
		}
		return r, err
	})
	if err != nil {
		return nil, nil, err
	}
	var m0, b0, p0 float64
	for k, p := range o.Losses {
		m, b, bp := results[3*k], results[3*k+1], results[3*k+2]
		if k == 0 {
			m0, b0, p0 = m.Goodput, b.Goodput, bp.Goodput
		}
		model := GoBackNModel(p, o.BaselineWindow)
		t.Add(p, m.Goodput*8/1e9, m.Goodput/m0, 0.98*(1-p), m.Lost, m.Retransmits, b.Goodput*8/1e9, b.Goodput/b0, model,
			GoBackNEfficiency(p, o.BaselineWindow), bp.Goodput*8/1e9, bp.Goodput/p0)
		for i, y := range []float64{m.Goodput / m0, b.Goodput / b0, bp.Goodput / p0, model, 1 - p} {
			series[i].X = append(series[i].X, 100*p)
			series[i].Y = append(series[i].Y, y)
		}
	}
	if o.Losses[0] != 0 {
		t.Notes = append(t.Notes, "Ratios are to the first loss rate's goodput, which is not 0.")
	}
	t.Notes = append(t.Notes, "The target for mroce is 0.98 x (1 - p) of its loss-free goodput; the baseline is held to the model 1/(1+pW) within 10% up to 5% loss, and to go-back-N's (1-p)/(1-p+pW) within 10% at every loss.")
	pl.Series = series
	return []*report.Table{t}, pl, nil
}

// IncastOptions are the incast scenario's settings.
type IncastOptions struct {
	Senders []int
	Rates   []int64
	Bytes   int
	Links
	Seed         uint64
	RealPayloads bool // as IncastConfig's
	Jobs         int  // runs at once (runEach)
}

// DefaultIncastScenario is the incast scenario of docs/results.md.
func DefaultIncastScenario() IncastOptions {
	return IncastOptions{Senders: []int{8, 64}, Rates: []int64{100e9, 400e9}, Bytes: 2 << 20, Links: DefaultLinks(), Seed: 1}
}

// IncastScenario runs N:1 incasts side by side: mroce, mroce without the
// receiver's hints, the baseline on the PFC fabric and on the lossy one.
// The plot follows the first mroce run at the largest N: the slowest,
// mean and fastest sender's delivered rate over fair share, window by
// window.
func IncastScenario(o IncastOptions) ([]*report.Table, *report.Plot, error) {
	t := &report.Table{
		Title:   fmt.Sprintf("N:1 incast, %d MiB from each sender, %s packets, DCTCP marking at %d KiB", o.Bytes>>20, sizeFor(o.MTU), o.ECNThreshold>>10),
		Columns: []string{"N", "Gb/s", "variant", "converged (base RTTs)", "Jain after 10 RTTs", "peak queue KiB", "drops", "after 1st RTT", "resent", "slowest FCT/ideal"},
		Notes: []string{"Converged: from the first data packet until every sender's delivered rate stays within 10% of its fair share (targets: 2 base RTTs at N = 8, 4 at N = 64).",
			"Resent: data packets sent again, all senders together; beyond the drops, they were only late."},
	}
	t.Notes = append(t.Notes, o.Links.notes()...)
	nMax := 0
	for _, n := range o.Senders {
		nMax = max(nMax, n)
	}
	pl := &report.Plot{Title: fmt.Sprintf("Incast %d:1 at %g Gb/s (mroce): delivered rate over fair share", nMax, float64(o.Rates[0])/1e9),
		XLabel: "base RTTs from the first data packet (window start)", YLabel: "rate / fair share"}
	series := []report.Series{{Name: "slowest sender"}, {Name: "mean"}, {Name: "fastest sender"}}
	queue := report.Series{Name: "receiver's downlink queue"}
	variants := []IncastConfig{{}, {NoRateHints: true}, {Baseline: true, PFC: true}, {Baseline: true}}
	var runs []IncastConfig
	for _, n := range o.Senders {
		for ri, rate := range o.Rates {
			for vi, v := range variants {
				cfg := DefaultIncast(n, rate)
				cfg.Bytes, cfg.Seed, cfg.RealPayloads = o.Bytes, o.Seed, o.RealPayloads
				cfg.Links = o.Links
				cfg.NoRateHints, cfg.Baseline, cfg.PFC = v.NoRateHints, v.Baseline, v.PFC
				if n == nMax && ri == 0 && vi == 0 { // the plot's run: only it writes the series
					cfg.Trace = func(start float64, rates []float64, fair float64, bytes int) {
						queue.X, queue.Y = append(queue.X, start), append(queue.Y, float64(bytes)/1024)
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
				runs = append(runs, cfg)
			}
		}
	}
	results, err := runEach(o.Jobs, len(runs), func(i int) (IncastResult, error) {
		cfg := runs[i]
		r, err := Incast(cfg)
		if err != nil {
			err = fmt.Errorf("incast %d at %g Gb/s, %s: %w", cfg.Senders, float64(cfg.LinkRate)/1e9, cfg.Mode(), err)
		}
		return r, err
	})
	if err != nil {
		return nil, nil, err
	}
	for i, r := range results {
		cfg := runs[i]
		t.Add(cfg.Senders, float64(cfg.LinkRate)/1e9, cfg.Mode(), r.Convergence, r.Jain, r.PeakQueue>>10, r.Drops, r.DropsAfterFirstRTT, r.Retransmits, r.FCTRatio)
	}
	pl.Series = series
	pl.Below = &report.Plot{XLabel: pl.XLabel, YLabel: "deepest queue in the window (KiB)", Series: []report.Series{queue}}
	return []*report.Table{t}, pl, nil
}

// AllToAll is every host WRITEing bytes to every other, all at once, each
// host's flows in pairwise order (to h+1, h+2, ...): every receiver is
// some host's first, as a pairwise all-to-all goes. In host order, every
// host's first window went to host 0 (the first 25 us of a 48-host
// all-to-all delivered 0.2 of capacity; in pairwise order, 0.95).
func AllToAll(hosts, bytes int) []Flow {
	var flows []Flow
	for a := 0; a < hosts; a++ {
		for i := 1; i < hosts; i++ {
			flows = append(flows, Flow{Src: a, Dst: (a + i) % hosts, Bytes: bytes})
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
	Jobs      int           // runs at once (runEach)
}

// DefaultPlanes is the planes scenario of docs/results.md: 64 hosts, all
// to all (4,032 connections), 1 MiB each, 1 to 8 planes of 100 Gb/s. A
// flow's first and last round trips cost the same on any number of
// planes; at 256 KiB they were a tenth of an 8-plane run (0.876 of
// capacity against 0.925 on 4 planes), and the ratio measured them, not
// the planes.
func DefaultPlanes() PlanesOptions {
	return PlanesOptions{Planes: []int{1, 2, 4, 8}, Fabric: DefaultFabric(1), FlowBytes: 1 << 20}
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
	t.Notes = append(t.Notes, o.Fabric.Links.notes()...)
	speed := &report.Table{Title: "Simulator speed (wall time on this machine: it varies from run to run)",
		Columns: []string{"planes", "data packets", "wall s", "data packets/s", "heap MiB", "events / data packet", "datagrams / data packet"}}
	pl := &report.Plot{Title: "All-to-all throughput against planes", XLabel: "planes (NIC ports per host)", YLabel: "aggregate goodput (Tb/s)"}
	got, ideal := report.Series{Name: "mroce"}, report.Series{Name: "linear from one plane"}
	byPlanes := map[int]float64{}
	results, err := runEach(o.Jobs, len(o.Planes), func(i int) (FlowsResult, error) {
		f := o.Fabric
		f.Planes = o.Planes[i]
		r, err := RunFlows(f, flows, 0)
		if err != nil {
			err = fmt.Errorf("%d planes: %w", o.Planes[i], err)
		}
		return r, err
	})
	if err != nil {
		return nil, nil, err
	}
	for i, r := range results {
		p := o.Planes[i]
		f := o.Fabric
		f.Planes = p
		g := r.Goodput(flows)
		byPlanes[p] = g
		var vsHalf any
		if h, ok := byPlanes[p/2]; ok && p%2 == 0 {
			vsHalf = g / h
		}
		t.Add(p, r.Connections, g*8/1e9, g/(float64(f.Hosts)*r.HostCapacity), vsHalf,
			float64(Percentile(r.FCT, 0.5).Microseconds()), float64(Percentile(r.FCT, 0.99).Microseconds()), r.Failed)
		speed.Add(p, r.Packets, r.WallTime.Seconds(), r.PacketRate(), heapMiB(r, o.Jobs),
			float64(r.Events)/float64(r.Packets), float64(r.Datagrams)/float64(r.Packets))
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
	FlowBytes int           // from each host to the next (a permutation), or to every other
	AllToAll  bool          // every host sends to every other: hosts x (hosts - 1) connections
	FailAt    time.Duration // the plane fails then
	RepairAt  time.Duration // and is repaired then (0: never); not before the measured window's end
	Plane     int
	Down      bool // the hosts see the port go down (else a blackhole: only the transport can tell)
}

// DefaultPlaneFail is the planefail scenario of docs/results.md: 8 hosts on
// 8 planes of 100 Gb/s, each sending 96 MiB to the next; plane 0 is
// blackholed at 100 µs and repaired at 800 µs, after the window the
// target is measured over (the 100 base RTTs from 10 after the failure).
func DefaultPlaneFail() PlaneFailOptions {
	f := DefaultFabric(8)
	f.Hosts = 8
	return PlaneFailOptions{Fabric: f, FlowBytes: 96 << 20, FailAt: 100 * time.Microsecond, RepairAt: 800 * time.Microsecond}
}

// baseRTT is a fabric's round trip for a full data packet and its ACK
// through one switch, queues empty: the unit of the planefail window.
func baseRTT(f FabricOptions) time.Duration {
	return 4*f.Delay + 2*sizeFor(f.MTU).serialization(f.LinkRate)
}

// The target of a plane failure is measured over the 100 base RTTs from 10
// after it (docs/results.md).
const (
	failWindowFrom = 10
	failWindowTo   = 110
)

// PlaneFail runs a permutation while one plane fails and comes back, and
// reports the throughput around the failure, against what the remaining
// planes can carry.
func PlaneFail(o PlaneFailOptions) ([]*report.Table, *report.Plot, error) {
	kind := netem.PlaneBlackhole
	if o.Down {
		kind = netem.PlaneDown
	}
	f := o.Fabric
	rtt := baseRTT(f)
	windowFrom, windowTo := o.FailAt+failWindowFrom*rtt, o.FailAt+failWindowTo*rtt
	if o.RepairAt > 0 && o.RepairAt <= o.FailAt {
		return nil, nil, fmt.Errorf("sim: a repair at %v is not after the failure at %v: repair later, or never (0)", o.RepairAt, o.FailAt)
	}
	if o.RepairAt > 0 && o.RepairAt < windowTo {
		return nil, nil, fmt.Errorf("sim: a repair at %v falls in the window the failure is measured over (%v to %v: the %d base RTTs from %d after it): repair later, or never",
			o.RepairAt, windowFrom, windowTo, failWindowTo-failWindowFrom, failWindowFrom)
	}
	f.Faults = append(f.Faults, netem.Fault{At: o.FailAt, Kind: kind, Plane: o.Plane})
	if o.RepairAt > o.FailAt {
		f.Faults = append(f.Faults, netem.Fault{At: o.RepairAt, Kind: netem.Repair, Plane: o.Plane})
	}
	flows, to := Permutation(f.Hosts, 1, o.FlowBytes), "to the next"
	if o.AllToAll {
		flows, to = AllToAll(f.Hosts, o.FlowBytes), "to every other"
	}
	bucket := 5 * time.Microsecond
	r, err := RunFlows(f, flows, bucket)
	if err != nil {
		return nil, nil, err
	}
	capacity := float64(f.Hosts) * r.HostCapacity // all planes
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
	name := "blackholed"
	if o.Down {
		name = "down (the hosts see it)"
	}
	t := &report.Table{
		Title: fmt.Sprintf("Plane %d of %d %s at %v, repaired at %v: %d hosts, each WRITEing %d MiB %s (%d connections), %d paths per connection",
			o.Plane, f.Planes, name, o.FailAt, o.RepairAt, f.Hosts, o.FlowBytes>>20, to, len(flows), f.Paths),
		Columns: []string{"period", "throughput / all planes' capacity", "target"},
		Notes: []string{fmt.Sprintf("Base RTT %v. Target after the failure: 0.95 x %d/%d = %.3f, averaged over the %d base RTTs starting %d after it (%v to %v). Connections lost: %d of %d.",
			rtt, f.Planes-1, f.Planes, 0.95*left, failWindowTo-failWindowFrom, failWindowFrom, windowFrom, windowTo, r.Failed, r.Connections)},
	}
	t.Notes = append(t.Notes, f.Links.notes()...)
	if r.Makespan < windowTo {
		t.Notes = append(t.Notes, fmt.Sprintf("The flows ended at %v, before the window did: its figure covers only what was sent in it.", r.Makespan))
	}
	t.Add("before the failure (from the start: the first round trips included)", mean(0, failAt), nil)
	t.Add(fmt.Sprintf("%d-%d base RTTs after", failWindowFrom, failWindowTo), mean(windowFrom, windowTo), 0.95*left)
	if o.RepairAt > o.FailAt {
		t.Add("failed, until the repair", mean(failAt, repairAt), nil)
		t.Add("after the repair (+10 base RTTs)", mean(repairAt+10*rtt, r.Makespan-10*rtt), nil)
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

// RingAllReduce is a ring all-reduce of bytes on every host: 2 (hosts - 1)
// steps, in each of which every host WRITEs a chunk of bytes / hosts to the
// next host on the ring. As NCCL does, each chunk goes in slices, and a
// slice of a step leaves as soon as the same slice of the step before has
// arrived, so that the steps overlap.
func RingAllReduce(hosts, bytes, slices int) []Flow {
	slices = max(1, slices)
	slice := max(1, bytes/hosts/slices)
	steps := 2 * (hosts - 1)
	flows := make([]Flow, 0, steps*hosts*slices)
	index := func(k, h, j int) int { return (k*hosts+h)*slices + j }
	for k := 0; k < steps; k++ {
		for h := 0; h < hosts; h++ {
			for j := 0; j < slices; j++ {
				f := Flow{Src: h, Dst: (h + 1) % hosts, Bytes: slice}
				if k > 0 {
					prev := (h + hosts - 1) % hosts // what h received in the step before
					f.After = []int{index(k-1, prev, j)}
				}
				flows = append(flows, f)
			}
		}
	}
	return flows
}

// CollectiveOptions are the allreduce and alltoall scenarios' settings.
type CollectiveOptions struct {
	Fabric FabricOptions
	Sizes  []int // bytes per host (the buffer being reduced, or sent to all)
	Losses []float64
	// Baseline runs the baseline too (one path per connection: one plane).
	Baseline bool
	// Slices is how many pieces each all-reduce step's chunk goes in
	// (pipelined, as NCCL's slices).
	Slices int
	Jobs   int // runs at once (runEach)
}

// DefaultCollective is the collectives' scenario of docs/results.md: 16
// hosts on 4 planes of 100 Gb/s. The all-reduce's chunks go in 8 slices:
// at 64 MiB on 16 hosts, 512 KiB each, the step NCCL moves with its
// default buffer (4 MiB in 8 steps).
func DefaultCollective() CollectiveOptions {
	f := DefaultFabric(4)
	f.Hosts = 16
	return CollectiveOptions{Fabric: f, Sizes: []int{1 << 20, 64 << 20}, Losses: []float64{0, 0.001, 0.01}, Baseline: true, Slices: 8}
}

// Collective runs the all-reduce (ring) or the all-to-all of every size at
// every loss rate, for mroce and the baseline, and reports the algorithm
// and bus bandwidth (NCCL's definitions) and the flows' completion times.
func Collective(name string, o CollectiveOptions) ([]*report.Table, *report.Plot, error) {
	h := o.Fabric.Hosts
	factor := 2 * float64(h-1) / float64(h) // busbw / algbw for an all-reduce
	what := "ring all-reduce"
	if name == "alltoall" {
		factor, what = float64(h-1)/float64(h), "all-to-all"
	}
	t := &report.Table{
		Title: fmt.Sprintf("%s on %d hosts, %d planes of %g Gb/s each, %d paths per connection (the baseline: one path)",
			what, h, o.Fabric.Planes, float64(o.Fabric.LinkRate)/1e9, o.Fabric.Paths),
		Columns: []string{"size MiB", "loss", "mode", "time µs", "algbw Gb/s", "busbw Gb/s", "busbw / host capacity", "FCT p50 µs", "FCT p99 µs", "lost conns"},
		Notes:   []string{"algbw = size / time; busbw = algbw x " + fmt.Sprintf("%.3f", factor) + " (NCCL's bus bandwidth); host capacity: one host's payload rate over all its planes. Target: busbw >= 0.9 of it at >= 64 MiB."},
	}
	t.Notes = append(t.Notes, o.Fabric.Links.notes()...)
	pl := &report.Plot{Title: what + ": bus bandwidth against size", XLabel: "size (MiB, log2)", YLabel: "busbw / host capacity", YMin: 0, YMax: 1.05}
	series := map[string]*report.Series{}
	var order []string
	modes := []bool{false}
	if o.Baseline {
		modes = append(modes, true)
	}
	speed := &report.Table{Title: "Simulator speed (wall time on this machine, set-up included: it varies from run to run)",
		Columns: []string{"size MiB", "loss", "mode", "data packets", "wall s", "data packets/s", "heap MiB"}}
	type run struct {
		size     int
		loss     float64
		baseline bool
	}
	var runs []run
	for _, size := range o.Sizes {
		for _, p := range o.Losses {
			for _, baseline := range modes {
				runs = append(runs, run{size, p, baseline})
			}
		}
	}
	flowsOf := func(size int) []Flow {
		if name == "alltoall" {
			return AllToAll(h, max(1, size/h))
		}
		return RingAllReduce(h, size, o.Slices)
	}
	results, err := runEach(o.Jobs, len(runs), func(i int) (FlowsResult, error) {
		rn := runs[i]
		f := o.Fabric
		f.Loss, f.Baseline = rn.loss, rn.baseline
		r, err := RunFlows(f, flowsOf(rn.size), 0)
		if err != nil {
			err = fmt.Errorf("%s of %d bytes at %g: %w", name, rn.size, rn.loss, err)
		}
		return r, err
	})
	if err != nil {
		return nil, nil, err
	}
	for i, r := range results {
		size, p, baseline := runs[i].size, runs[i].loss, runs[i].baseline
		mode := "mroce"
		if baseline {
			mode = "baseline"
		}
		speed.Add(float64(size)/(1<<20), p, mode, r.Packets, r.WallTime.Seconds(), r.PacketRate(), heapMiB(r, o.Jobs))
		alg := float64(size) / r.Makespan.Seconds()
		bus := alg * factor
		t.Add(float64(size)/(1<<20), p, mode, float64(r.Makespan.Microseconds()), alg*8/1e9, bus*8/1e9, bus/r.HostCapacity,
			float64(Percentile(r.FCT, 0.5).Microseconds()), float64(Percentile(r.FCT, 0.99).Microseconds()), r.Failed)
		key := fmt.Sprintf("%s, %g%% loss", mode, 100*p)
		s := series[key]
		if s == nil {
			s = &report.Series{Name: key}
			series[key] = s
			order = append(order, key)
		}
		s.X, s.Y = append(s.X, math.Log2(float64(size)/(1<<20))), append(s.Y, bus/r.HostCapacity)
	}
	for _, k := range order {
		pl.Series = append(pl.Series, *series[k])
	}
	return []*report.Table{t, speed}, pl, nil
}

// PermutationOptions are the permutation scenario's settings.
type PermutationOptions struct {
	Fabric    FabricOptions
	FlowBytes int
	Shift     int   // host h sends to h + Shift
	Paths     []int // mroce runs once with each count of paths per connection
	Baseline  bool
	Jobs      int // runs at once (runEach)
}

// DefaultPermutationScenario: 64 hosts, 8 per leaf, 8 spines per plane (no
// oversubscription), 4
// planes of 100 Gb/s; each host sends 16 MiB to the host half the fabric
// away (every flow crosses the spines).
func DefaultPermutationScenario() PermutationOptions {
	f := DefaultFabric(4)
	f.HostsPerLeaf, f.Spines = 8, 8
	return PermutationOptions{Fabric: f, FlowBytes: 16 << 20, Shift: 32, Paths: []int{8, 32, 64}, Baseline: true}
}

// PermutationScenario runs a permutation, mroce with each count of paths
// beside the baseline: with a leaf-spine, ECMP hashing decides how evenly
// the paths share the spines; the more paths a connection sprays over,
// the more evenly the load spreads, and one path cannot.
func PermutationScenario(o PermutationOptions) ([]*report.Table, *report.Plot, error) {
	flows := Permutation(o.Fabric.Hosts, o.Shift, o.FlowBytes)
	topo := "one switch per plane"
	if o.Fabric.HostsPerLeaf > 0 {
		topo = fmt.Sprintf("a leaf-spine per plane, %d hosts per leaf, %d spines", o.Fabric.HostsPerLeaf, o.Fabric.Spines)
	}
	t := &report.Table{
		Title: fmt.Sprintf("Permutation: %d hosts, each sending %d MiB to host + %d, %d planes of %g Gb/s, %s",
			o.Fabric.Hosts, o.FlowBytes>>20, o.Shift, o.Fabric.Planes, float64(o.Fabric.LinkRate)/1e9, topo),
		Columns: []string{"mode", "paths", "aggregate Gb/s", "of capacity", "FCT p50 µs", "FCT p99 µs", "slowest / fastest"},
		Notes:   []string{"Capacity: every host's payload rate over all its planes (the baseline uses one plane: at most 1/planes of it)."},
	}
	t.Notes = append(t.Notes, o.Fabric.Links.notes()...)
	pl := &report.Plot{Title: "Permutation: completion times, sorted", XLabel: "flows (sorted)", YLabel: "FCT (µs)"}
	type run struct {
		baseline bool
		paths    int
	}
	var runs []run
	for _, p := range o.Paths {
		runs = append(runs, run{paths: p})
	}
	if o.Baseline {
		runs = append(runs, run{baseline: true, paths: 1})
	}
	results, err := runEach(o.Jobs, len(runs), func(i int) (FlowsResult, error) {
		f := o.Fabric
		f.Baseline, f.Paths = runs[i].baseline, runs[i].paths
		return RunFlows(f, flows, 0)
	})
	if err != nil {
		return nil, nil, err
	}
	for i, r := range results {
		rn := runs[i]
		baseline := rn.baseline
		f := o.Fabric
		f.Baseline, f.Paths = baseline, rn.paths
		mode, paths := "mroce", f.Paths
		if baseline {
			mode, paths = "baseline", 1
		}
		g := r.Goodput(flows)
		sorted := slices.Clone(r.FCT)
		slices.Sort(sorted)
		t.Add(mode, paths, g*8/1e9, g/(float64(f.Hosts)*r.HostCapacity), float64(Percentile(r.FCT, 0.5).Microseconds()),
			float64(Percentile(r.FCT, 0.99).Microseconds()), float64(sorted[len(sorted)-1])/float64(max(1, sorted[0])))
		s := report.Series{Name: fmt.Sprintf("%s, %d paths", mode, paths)}
		for i, d := range sorted {
			s.X, s.Y = append(s.X, float64(i)), append(s.Y, float64(d.Microseconds()))
		}
		pl.Series = append(pl.Series, s)
	}
	return []*report.Table{t}, pl, nil
}

// FlowsScenario runs a traffic file's flows and reports them: a summary,
// and every flow's completion time.
func FlowsScenario(t Traffic) ([]*report.Table, *report.Plot, error) {
	r, err := RunFlows(t.Fabric, t.Flows, 0)
	if err != nil {
		return nil, nil, err
	}
	f := t.Fabric
	mode := fmt.Sprintf("mroce, %d paths per connection", f.Paths)
	if f.Baseline {
		mode = "baseline (one path per connection)"
	}
	sum := &report.Table{
		Title: fmt.Sprintf("%d flows on %d hosts, %d planes of %g Gb/s, %s", len(t.Flows), f.Hosts, f.Planes, float64(f.LinkRate)/1e9, mode),
		Columns: []string{"flows", "connections", "bytes", "makespan µs", "aggregate Gb/s", "FCT p50 µs", "FCT p99 µs", "FCT max µs", "lost",
			"data packets", "resent", "tail probes", "timeouts"},
		Notes: f.Links.notes(),
	}
	var bytes int
	for _, fl := range t.Flows {
		bytes += fl.Bytes
	}
	sum.Add(len(t.Flows), r.Connections, bytes, float64(r.Makespan.Microseconds()), r.Goodput(t.Flows)*8/1e9,
		float64(Percentile(r.FCT, 0.5).Microseconds()), float64(Percentile(r.FCT, 0.99).Microseconds()),
		float64(Percentile(r.FCT, 1).Microseconds()), r.Failed, r.Packets, r.Retransmits, r.TailProbes, r.Timeouts)
	each := &report.Table{Title: "Every flow (FCT from when it was posted)", Columns: []string{"flow", "src", "dst", "bytes", "start µs", "FCT µs"}}
	for i, fl := range t.Flows {
		each.Add(i, fl.Src, fl.Dst, fl.Bytes, float64(fl.Start.Microseconds()), float64(r.FCT[i].Nanoseconds())/1e3)
	}
	pl := &report.Plot{Title: "Completion times, sorted", XLabel: "flows (sorted)", YLabel: "FCT (µs)"}
	sorted := slices.Clone(r.FCT)
	slices.Sort(sorted)
	s := report.Series{Name: mode}
	for i, d := range sorted {
		s.X, s.Y = append(s.X, float64(i)), append(s.Y, float64(d.Nanoseconds())/1e3)
	}
	pl.Series = []report.Series{s}
	return []*report.Table{sum, each}, pl, nil
}
