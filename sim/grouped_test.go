package sim

import "testing"

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
		got := lossyRun(t, o, flows, 0)
		if want == "" {
			want = got
		} else if got != want {
			t.Fatalf("%d workers:\n%s\none worker:\n%s", workers, got, want)
		}
	}
}
