package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/mroce/mroce/netem"
)

// The scenarios of mroce sim: each runs the real engine over netem in
// virtual time, deterministically for its seed, and returns what it
// measured as a typed result. Package report turns a result into tables
// and a plot; the scenarios draw nothing.

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

// LossResult is what the loss scenario measured: a row per loss rate.
type LossResult struct {
	Options LossOptions
	Rows    []LossRow
}

// LossRow is one loss rate's three runs. Each ratio is a run's goodput over
// the same run's at the first loss rate, which is 0 in docs/results.md.
type LossRow struct {
	Loss float64 // random loss rate on every downlink
	// Mroce runs over all planes; Baseline on one plane of the lossy
	// fabric, BaselinePFC on one plane of the PFC fabric.
	Mroce, Baseline, BaselinePFC TransferResult
	// MroceRatio, BaselineRatio and PFCRatio are the goodput ratios.
	MroceRatio, BaselineRatio, PFCRatio float64
	// Target is what MroceRatio is held to: 0.98 (1 - Loss).
	Target float64
	// Model is GoBackNModel and GoBackN is GoBackNEfficiency, both at Loss
	// with the baseline's window.
	Model, GoBackN float64
}

// Loss measures goodput against random loss: mroce over its planes, the
// baseline (one path, go-back-N) on the lossy fabric and on the PFC one,
// each as a ratio to its own goodput without loss, and the go-back-N model
// 1/(1 + pW) beside the baseline.
func Loss(o LossOptions) (LossResult, error) {
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
		return LossResult{}, err
	}
	res := LossResult{Options: o}
	var m0, b0, p0 float64
	for k, p := range o.Losses {
		m, b, bp := results[3*k], results[3*k+1], results[3*k+2]
		if k == 0 {
			m0, b0, p0 = m.Goodput, b.Goodput, bp.Goodput
		}
		res.Rows = append(res.Rows, LossRow{Loss: p, Mroce: m, Baseline: b, BaselinePFC: bp,
			MroceRatio: m.Goodput / m0, BaselineRatio: b.Goodput / b0, PFCRatio: bp.Goodput / p0,
			Target: 0.98 * (1 - p), Model: GoBackNModel(p, o.BaselineWindow), GoBackN: GoBackNEfficiency(p, o.BaselineWindow)})
	}
	return res, nil
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

// IncastScenarioResult is what the incast scenario measured.
type IncastScenarioResult struct {
	Options IncastOptions
	// Runs go N by N, then rate by rate, then variant by variant: mroce,
	// mroce without the receiver's hints, the baseline on the PFC fabric
	// and on the lossy one.
	Runs []IncastResult
	// Trace follows the first mroce run at the largest N, a window each.
	Trace []IncastWindow
}

// IncastWindow is one rate window of an incast's trace.
type IncastWindow struct {
	Start float64 // base RTTs from the first data packet to the window's start
	// Slowest, Mean and Fastest are the senders' delivered rates over
	// their fair share.
	Slowest, Mean, Fastest float64
	QueueKiB               float64 // deepest receiver's downlink queue in the window
}

// incastVariants are the incast scenario's variants of each N and rate,
// in the order of its runs.
var incastVariants = []IncastConfig{{}, {NoRateHints: true}, {Baseline: true, PFC: true}, {Baseline: true}}

// IncastScenario runs N:1 incasts side by side: mroce, mroce without the
// receiver's hints, the baseline on the PFC fabric and on the lossy one.
// The trace follows the first mroce run at the largest N: the slowest,
// mean and fastest sender's delivered rate over fair share, window by
// window.
func IncastScenario(o IncastOptions) (IncastScenarioResult, error) {
	res := IncastScenarioResult{Options: o}
	nMax := 0
	for _, n := range o.Senders {
		nMax = max(nMax, n)
	}
	var runs []IncastConfig
	for _, n := range o.Senders {
		for ri, rate := range o.Rates {
			for vi, v := range incastVariants {
				cfg := DefaultIncast(n, rate)
				cfg.Bytes, cfg.Seed, cfg.RealPayloads = o.Bytes, o.Seed, o.RealPayloads
				cfg.Links = o.Links
				cfg.NoRateHints, cfg.Baseline, cfg.PFC = v.NoRateHints, v.Baseline, v.PFC
				if n == nMax && ri == 0 && vi == 0 { // the traced run: only it writes the trace
					cfg.Trace = func(start float64, rates []float64, fair float64, bytes int) {
						lo, hi, sum := math.Inf(1), 0.0, 0.0
						for _, r := range rates {
							lo, hi, sum = math.Min(lo, r), math.Max(hi, r), sum+r
						}
						res.Trace = append(res.Trace, IncastWindow{Start: start, Slowest: lo / fair,
							Mean: sum / float64(len(rates)) / fair, Fastest: hi / fair, QueueKiB: float64(bytes) / 1024})
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
		return IncastScenarioResult{}, err
	}
	for i := range results {
		results[i].Config.Trace = nil // the run is over: nothing calls it
	}
	res.Runs = results
	return res, nil
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

// PlanesResult is what the planes scenario measured: a row per count of
// planes.
type PlanesResult struct {
	Options PlanesOptions
	Rows    []PlanesRow
	// HeapShared is set when runs went side by side (Options.Jobs): a
	// run's HeapBytes is then not its own.
	HeapShared bool
}

// PlanesRow is the all-to-all on one count of planes.
type PlanesRow struct {
	Planes int
	Run    FlowsResult
	// Goodput is the aggregate, bytes/s; OfCapacity is it over every
	// host's payload rate over all its planes.
	Goodput, OfCapacity float64
	// VsHalf is Goodput over that of the run on half the planes, 0 when
	// there was none.
	VsHalf         float64
	FCTP50, FCTP99 time.Duration
}

// Planes measures how the aggregate throughput of an all-to-all scales
// with the planes (NIC ports) every host has.
func Planes(o PlanesOptions) (PlanesResult, error) {
	flows := AllToAll(o.Fabric.Hosts, o.FlowBytes)
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
		return PlanesResult{}, err
	}
	res := PlanesResult{Options: o, HeapShared: heapShared(o.Jobs)}
	byPlanes := map[int]float64{}
	for i, r := range results {
		p := o.Planes[i]
		g := r.Goodput(flows)
		byPlanes[p] = g
		row := PlanesRow{Planes: p, Run: r, Goodput: g, OfCapacity: g / (float64(o.Fabric.Hosts) * r.HostCapacity),
			FCTP50: Percentile(r.FCT, 0.5), FCTP99: Percentile(r.FCT, 0.99)}
		if h, ok := byPlanes[p/2]; ok && p%2 == 0 {
			row.VsHalf = g / h
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
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

// FailWindowFrom and FailWindowTo bound the window, in base RTTs after a
// plane fails, that the planefail target is measured over: the 100 base
// RTTs from 10 after it (docs/results.md).
const (
	FailWindowFrom = 10
	FailWindowTo   = 110
)

// PlaneFailResult is what the planefail scenario measured. The periods'
// throughputs are delivered payload over all planes' capacity, from the
// flows' start; NaN when no whole bucket of the run fell in the period.
type PlaneFailResult struct {
	Options PlaneFailOptions
	Run     FlowsResult
	Flows   int // connections, one a flow
	BaseRTT time.Duration
	// WindowFrom and WindowTo bound the window the target is measured
	// over: the 100 base RTTs from 10 after the failure.
	WindowFrom, WindowTo time.Duration
	// Before runs from the start to the failure, Window over the window,
	// UntilRepair from the failure to the repair, AfterRepair from 10
	// base RTTs after the repair to 10 before the end. The last two are
	// measured only when the plane is repaired.
	Before, Window, UntilRepair, AfterRepair float64
	// Target is what Window is held to: 0.95 of the planes left over all.
	Target float64
	// Throughput is each Bucket's delivered payload rate over all planes'
	// capacity.
	Throughput []float64
	Bucket     time.Duration
}

// PlaneFail runs a permutation while one plane fails and comes back, and
// measures the throughput around the failure, against what the remaining
// planes can carry.
func PlaneFail(o PlaneFailOptions) (PlaneFailResult, error) {
	kind := netem.PlaneBlackhole
	if o.Down {
		kind = netem.PlaneDown
	}
	f := o.Fabric
	rtt := baseRTT(f)
	windowFrom, windowTo := o.FailAt+FailWindowFrom*rtt, o.FailAt+FailWindowTo*rtt
	if o.RepairAt > 0 && o.RepairAt <= o.FailAt {
		return PlaneFailResult{}, fmt.Errorf("sim: a repair at %v is not after the failure at %v: repair later, or never (0)", o.RepairAt, o.FailAt)
	}
	if o.RepairAt > 0 && o.RepairAt < windowTo {
		return PlaneFailResult{}, fmt.Errorf("sim: a repair at %v falls in the window the failure is measured over (%v to %v: the %d base RTTs from %d after it): repair later, or never",
			o.RepairAt, windowFrom, windowTo, FailWindowTo-FailWindowFrom, FailWindowFrom)
	}
	f.Faults = append(f.Faults, netem.Fault{At: o.FailAt, Kind: kind, Plane: o.Plane})
	if o.RepairAt > o.FailAt {
		f.Faults = append(f.Faults, netem.Fault{At: o.RepairAt, Kind: netem.Repair, Plane: o.Plane})
	}
	flows := Permutation(f.Hosts, 1, o.FlowBytes)
	if o.AllToAll {
		flows = AllToAll(f.Hosts, o.FlowBytes)
	}
	bucket := 5 * time.Microsecond
	r, err := RunFlows(f, flows, bucket)
	if err != nil {
		return PlaneFailResult{}, err
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
	res := PlaneFailResult{Options: o, Run: r, Flows: len(flows), BaseRTT: rtt, WindowFrom: windowFrom, WindowTo: windowTo,
		Before: mean(0, failAt), Window: mean(windowFrom, windowTo), Target: 0.95 * left, Bucket: bucket}
	if o.RepairAt > o.FailAt {
		res.UntilRepair, res.AfterRepair = mean(failAt, repairAt), mean(repairAt+10*rtt, r.Makespan-10*rtt)
	}
	for _, b := range r.Delivered {
		res.Throughput = append(res.Throughput, b/bucket.Seconds()/capacity)
	}
	return res, nil
}
