package sim

import "testing"

// A run of flows goes over processes, a host each, when no flow waits for
// one that ends elsewhere than at its own source, and gives the same
// result to the last counter and nanosecond on any number of cores, under
// loss: an all-to-all, and a ring all-reduce whose steps wait for the data
// they receive.
func TestGroupedRunSameForAnyWorkers(t *testing.T) {
	o := DefaultFabric(4)
	o.Hosts, o.Loss = 8, 0.01
	a2a, ring := AllToAll(o.Hosts, 256<<10), RingAllReduce(o.Hosts, 2<<20, 2)
	elsewhere := []Flow{{Src: 0, Dst: 1, Bytes: 1}, {Src: 2, Dst: 3, Bytes: 1, After: []int{0}}}
	if !o.grouped(a2a, 0) || !o.grouped(ring, 0) || o.grouped(elsewhere, 0) || o.grouped(a2a, 10) {
		t.Fatal("which runs go over processes: an all-to-all and a ring all-reduce do; a flow waiting for another host's, and a sampled run, do not")
	}
	for _, flows := range [][]Flow{a2a, ring} {
		var want string
		for _, workers := range []int{1, 2, 3} {
			o.Workers = workers
			got := lossyRun(t, o, flows, 0)
			if want == "" {
				want = got
			} else if got != want {
				t.Fatalf("%d workers:\n%s\none worker:\n%s", workers, got, want)
			}
		}
	}
}

// A flow waiting for one that ends at its own source is posted when that
// one's data has all arrived, before its sender hears so: every step of a
// ring all-reduce is posted after the step it waits for was, and before
// that one completed at its sender. Over processes and on one clock alike.
func TestAfterWaitsForArrival(t *testing.T) {
	o := DefaultFabric(4)
	o.Hosts = 4
	flows := RingAllReduce(o.Hosts, 1<<20, 2)
	for _, pfc := range []bool{false, true} { // PFC: on one clock
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
