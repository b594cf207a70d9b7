package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/netem"
)

// A run of flows goes over processes, a host each, when no flow waits for
// one that ends elsewhere than at its own source. Under loss it then gives
// the same result to the last counter and nanosecond on any number of
// cores. The runs are an all-to-all, a ring all-reduce whose steps wait
// for the data they receive, and two all-to-alls with sampled deliveries.
// In one a plane is blackholed and repaired. In the other a plane goes
// down, with the hosts told, and comes back.
func TestGroupedRunSameForAnyWorkers(t *testing.T) {
	o := DefaultFabric(4)
	o.Hosts, o.Loss = 8, 0.01
	a2a, ring := AllToAll(o.Hosts, 256<<10), RingAllReduce(o.Hosts, 2<<20, 2)
	elsewhere := []Flow{{Src: 0, Dst: 1, Bytes: 1}, {Src: 2, Dst: 3, Bytes: 1, After: []int{0}}}
	blackhole, down, soon := o, o, o
	soon.Faults = []netem.Fault{{At: o.Delay, Kind: netem.PlaneDown}}
	blackhole.Faults = []netem.Fault{{At: 20 * time.Microsecond, Kind: netem.PlaneBlackhole, Plane: 1}}
	if !grouped(o, a2a) || !grouped(o, ring) || grouped(o, elsewhere) || grouped(soon, a2a) || !grouped(blackhole, a2a) || grouped(blackhole, ring) {
		t.Fatal("which runs go over processes: an all-to-all and a ring all-reduce do, and an all-to-all with a fault; a flow waiting for another host's, a fault sooner than a packet on the wire, and faults with flows that wait for others do not")
	}
	blackhole.Faults = []netem.Fault{{At: 20 * time.Microsecond, Kind: netem.PlaneBlackhole, Plane: 1},
		{At: 150 * time.Microsecond, Kind: netem.Repair, Plane: 1}}
	down.Faults = []netem.Fault{{At: 20 * time.Microsecond, Kind: netem.PlaneDown, Plane: 2},
		{At: 150 * time.Microsecond, Kind: netem.Repair, Plane: 2}}
	for i, c := range []struct {
		o      FabricOptions
		flows  []Flow
		bucket time.Duration
	}{{o, a2a, 0}, {o, ring, 0}, {blackhole, AllToAll(o.Hosts, 1<<20), 5 * time.Microsecond}, {down, AllToAll(o.Hosts, 1<<20), 5 * time.Microsecond}} {
		var want string
		for _, workers := range []int{1, 2, 3} {
			o := c.o
			o.Workers = workers
			got := lossyRun(t, o, c.flows, c.bucket)
			if !strings.Contains(got, "OverProcesses:true") {
				t.Fatalf("case %d: on one clock, not over processes", i)
			}
			if want == "" {
				want = got
			} else if got != want {
				t.Fatalf("%d workers:\n%s\none worker:\n%s", workers, got, want)
			}
		}
	}
}

// A flow waiting for one that ends at its own source is posted when that
// one's data has all arrived, before its sender hears so. Every step of a
// ring all-reduce is posted after the step it waits for was, and before
// that one completed at its sender. This holds over processes and on one
// clock alike.
func TestAfterWaitsForArrival(t *testing.T) {
	o := DefaultFabric(4)
	o.Hosts = 4
	flows := RingAllReduce(o.Hosts, 1<<20, 2)
	for _, pfc := range []bool{false, true} { // PFC keeps the run on one clock
		o.PFC = pfc
		r, err := RunFlows(o, flows, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range flows {
			for _, d := range f.After {
				if r.Started[i] <= r.Started[d] || r.Started[i] >= r.Started[d]+r.FCT[d] {
					t.Fatalf("PFC %v: flow %d posted at %v; the flow it waits for posted at %v, completed at %v",
						pfc, i, r.Started[i], r.Started[d], r.Started[d]+r.FCT[d])
				}
			}
		}
	}
}

// A fault with flows that wait for others keeps a run on one clock. There
// a flow the fault fails releases those waiting for it wherever they are.
// A ring all-reduce through a plane blackholed for good ends with its
// flows failed, rather than waiting for ever.
func TestFaultWithWaitingFlowsEnds(t *testing.T) {
	o := DefaultFabric(1)
	o.Hosts = 3
	o.Faults = []netem.Fault{{At: 5 * time.Microsecond, Kind: netem.PlaneBlackhole, Plane: 0}}
	r, err := RunFlows(o, RingAllReduce(o.Hosts, 3<<20, 1), 0)
	if err != nil || r.Failed == 0 || r.OverProcesses {
		t.Fatalf("failed %d, over processes %v: %v", r.Failed, r.OverProcesses, err)
	}
}
