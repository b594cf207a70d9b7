package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/mroce/mroce/netem"
)

// PlaneFailOptions are the planefail scenario's settings.
type PlaneFailOptions struct {
	Fabric    FabricOptions
	FlowBytes int           // from each host to the next, or to every other
	AllToAll  bool          // every host sends to every other, not only to the next
	FailAt    time.Duration // the plane fails then
	// RepairAt is when the plane is repaired, never when 0. It must not
	// fall before the measured window's end.
	RepairAt time.Duration
	Plane    int
	// Down lets the hosts see the port go down. Otherwise the plane is
	// blackholed and only the transport can tell.
	Down bool
}

// DefaultPlaneFail is the planefail scenario of docs/results.md. Eight
// hosts on 8 planes of 100 Gb/s each send 96 MiB to the next. Plane 0 is
// blackholed at 100 µs and repaired at 800 µs, after the window the
// target is measured over.
func DefaultPlaneFail() PlaneFailOptions {
	f := DefaultFabric(8)
	f.Hosts = 8
	return PlaneFailOptions{Fabric: f, FlowBytes: 96 << 20, FailAt: 100 * time.Microsecond, RepairAt: 800 * time.Microsecond}
}

// baseRTT is a fabric's round trip for a full data packet and its ACK
// through one switch with empty queues. It is the unit of the planefail
// window.
func baseRTT(f FabricOptions) time.Duration {
	return 4*f.Delay + 2*sizeFor(f.MTU).serialization(f.LinkRate)
}

// FailWindowFrom and FailWindowTo bound the window, in base RTTs after a
// plane fails, that the planefail target is measured over. It is the 100
// base RTTs from 10 after the failure, as docs/results.md sets it.
const (
	FailWindowFrom = 10
	FailWindowTo   = 110
)

// PlaneFailResult is what the planefail scenario measured. The periods'
// throughputs are delivered payload over all planes' capacity, from the
// flows' start. A period's throughput is NaN when no whole bucket of the
// run fell in it.
type PlaneFailResult struct {
	Options PlaneFailOptions
	Run     FlowsResult
	Flows   int // connections, one a flow
	BaseRTT time.Duration
	// WindowFrom and WindowTo bound the window the target is measured
	// over, from FailWindowFrom to FailWindowTo base RTTs after the
	// failure.
	WindowFrom, WindowTo time.Duration
	// Before runs from the start to the failure, Window over the window,
	// UntilRepair from the failure to the repair, AfterRepair from 10
	// base RTTs after the repair to 10 before the end. The last two are
	// measured only when the plane is repaired.
	Before, Window, UntilRepair, AfterRepair float64
	// Target is what Window is held to, 0.95 of the share of the planes
	// left.
	Target float64
	// Throughput is each Bucket's delivered payload rate over all planes'
	// capacity.
	Throughput []float64
	Bucket     time.Duration
}

// PlaneFail runs a permutation while one plane fails and comes back. It
// measures the throughput around the failure against what the remaining
// planes can carry.
func PlaneFail(o PlaneFailOptions) (PlaneFailResult, error) {
	f := o.Fabric
	rtt := baseRTT(f)
	windowFrom, windowTo := o.FailAt+FailWindowFrom*rtt, o.FailAt+FailWindowTo*rtt
	if err := o.checkRepair(windowFrom, windowTo); err != nil {
		return PlaneFailResult{}, err
	}
	f.Faults = append(f.Faults, o.faults()...)
	flows := Permutation(f.Hosts, 1, o.FlowBytes)
	if o.AllToAll {
		flows = AllToAll(f.Hosts, o.FlowBytes)
	}
	bucket := 5 * time.Microsecond
	r, err := RunFlows(f, flows, bucket)
	if err != nil {
		return PlaneFailResult{}, err
	}
	// The failure and the repair count from the flows' start, as RunFlows
	// samples.
	capacity := float64(f.Hosts) * r.HostCapacity
	mean := func(from, to time.Duration) float64 { return meanThroughput(r.Delivered, bucket, capacity, from, to) }
	left := float64(f.Planes-1) / float64(f.Planes)
	res := PlaneFailResult{Options: o, Run: r, Flows: len(flows), BaseRTT: rtt, WindowFrom: windowFrom, WindowTo: windowTo,
		Before: mean(0, o.FailAt), Window: mean(windowFrom, windowTo), Target: 0.95 * left, Bucket: bucket}
	if o.RepairAt > o.FailAt {
		res.UntilRepair, res.AfterRepair = mean(o.FailAt, o.RepairAt), mean(o.RepairAt+10*rtt, r.Makespan-10*rtt)
	}
	for _, b := range r.Delivered {
		res.Throughput = append(res.Throughput, b/bucket.Seconds()/capacity)
	}
	return res, nil
}

// checkRepair refuses a repair before the failure, or one inside the
// window the target is measured over, which would mix the failure with
// the recovery.
func (o PlaneFailOptions) checkRepair(windowFrom, windowTo time.Duration) error {
	if o.RepairAt > 0 && o.RepairAt <= o.FailAt {
		return fmt.Errorf("sim: a repair at %v is not after the failure at %v: repair later, or never (0)", o.RepairAt, o.FailAt)
	}
	if o.RepairAt > 0 && o.RepairAt < windowTo {
		return fmt.Errorf("sim: a repair at %v falls in the window the failure is measured over (%v to %v: the %d base RTTs from %d after it): repair later, or never",
			o.RepairAt, windowFrom, windowTo, FailWindowTo-FailWindowFrom, FailWindowFrom)
	}
	return nil
}

// faults are the plane's failure and, when it comes back, its repair.
func (o PlaneFailOptions) faults() []netem.Fault {
	kind := netem.PlaneBlackhole
	if o.Down {
		kind = netem.PlaneDown
	}
	fs := []netem.Fault{{At: o.FailAt, Kind: kind, Plane: o.Plane}}
	if o.RepairAt > o.FailAt {
		fs = append(fs, netem.Fault{At: o.RepairAt, Kind: netem.Repair, Plane: o.Plane})
	}
	return fs
}

// meanThroughput is the payload delivered in the whole buckets within
// [from, to), as a share of capacity. It is NaN when no whole bucket
// falls there.
func meanThroughput(delivered []float64, bucket time.Duration, capacity float64, from, to time.Duration) float64 {
	var sum float64
	n := 0
	for i, b := range delivered {
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
