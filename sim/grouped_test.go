package sim

import (
	"fmt"
	"testing"
)

// A run of flows that wait for none goes over processes, a host each, and
// gives the same result to the last counter and nanosecond on any number
// of cores, under loss; one whose flows wait for others runs on one clock.
func TestGroupedRunSameForAnyWorkers(t *testing.T) {
	o := DefaultFabric(4)
	o.Hosts, o.Loss = 8, 0.01
	flows := AllToAll(o.Hosts, 256<<10)
	if !o.grouped(flows, 0) || o.grouped(RingAllReduce(o.Hosts, 1<<20, 2), 0) || o.grouped(flows, 10) {
		t.Fatal("which runs go over processes: an all-to-all does, a ring all-reduce and a sampled run do not")
	}
	var want string
	for _, workers := range []int{1, 2, 3} {
		o.Workers = workers
		r, err := RunFlows(o, flows, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Retransmits == 0 || r.Failed != 0 {
			t.Fatalf("%d workers: %d resent, %d failed: the loss did not bite, or flows failed", workers, r.Retransmits, r.Failed)
		}
		r.WallTime, r.HeapBytes = 0, 0
		got := fmt.Sprintf("%+v", r)
		if want == "" {
			want = got
		} else if got != want {
			t.Fatalf("%d workers:\n%s\none worker:\n%s", workers, got, want)
		}
	}
}
