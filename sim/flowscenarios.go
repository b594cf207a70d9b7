package sim

import (
	"fmt"
	"slices"
	"time"
)

// The scenarios of many flows over a fabric are the collectives, the
// permutation and a traffic file's flows. The functions below make the
// flows they run.

// RingAllReduce is a ring all-reduce of bytes on every host. It takes
// 2 (hosts - 1) steps, in each of which every host WRITEs a chunk of
// bytes / hosts to the next host on the ring. As in NCCL, each chunk goes
// in slices. A slice of a step leaves as soon as the same slice of the
// step before has arrived, so that the steps overlap.
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

// AllToAll is every host WRITEing bytes to every other, all at once. Host
// h sends to h+1, h+2 and so on, as a pairwise all-to-all goes, so every
// receiver is some host's first. In host order every host's first window
// would go to host 0.
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
// hosts. Each sends to one and receives from one.
func Permutation(hosts, shift, bytes int) []Flow {
	var flows []Flow
	for h := 0; h < hosts; h++ {
		flows = append(flows, Flow{Src: h, Dst: (h + shift) % hosts, Bytes: bytes})
	}
	return flows
}

// CollectiveOptions are the allreduce and alltoall scenarios' settings.
type CollectiveOptions struct {
	Fabric FabricOptions
	Sizes  []int // bytes per host, reduced or sent to all
	Losses []float64
	// Baseline runs the baseline too, with one path and so one plane per
	// connection.
	Baseline bool
	// Slices is how many pieces each all-reduce step's chunk goes in, the
	// pipelining of NCCL's slices.
	Slices int
	Jobs   int // runs at once
}

// DefaultCollective is the collectives' scenario of docs/results.md, 16
// hosts on 4 planes of 100 Gb/s. The all-reduce's chunks go in 8 slices.
// At 64 MiB on 16 hosts a slice is 512 KiB, the step NCCL moves with its
// default buffer of 4 MiB in 8 steps.
func DefaultCollective() CollectiveOptions {
	f := DefaultFabric(4)
	f.Hosts = 16
	return CollectiveOptions{Fabric: f, Sizes: []int{1 << 20, 64 << 20}, Losses: []float64{0, 0.001, 0.01}, Baseline: true, Slices: 8}
}

// CollectiveResult is what the allreduce or alltoall scenario measured, a
// row per size, loss rate and mode, in that order.
type CollectiveResult struct {
	Name    string // "allreduce" or "alltoall"
	Options CollectiveOptions
	// BusFactor is bus bandwidth over algorithm bandwidth, as NCCL
	// defines them. It is 2 (hosts - 1) / hosts for an all-reduce and
	// (hosts - 1) / hosts for an all-to-all.
	BusFactor float64
	Rows      []CollectiveRow
	// HeapShared is set when runs went side by side. A run's HeapBytes is
	// then not its own.
	HeapShared bool
}

// CollectiveRow is one run of a collective.
type CollectiveRow struct {
	Bytes    int // per host
	Loss     float64
	Baseline bool
	Run      FlowsResult
	// AlgBW is Bytes over the makespan and BusBW is it times BusFactor,
	// both in bytes/s. BusShare is BusBW over one host's payload rate over
	// all its planes.
	AlgBW, BusBW, BusShare float64
	FCTP50, FCTP99         time.Duration
}

// Collective runs the all-reduce (ring) or the all-to-all of every size at
// every loss rate, for mroce and the baseline. It measures the algorithm
// and bus bandwidth as NCCL defines them, and the flows' completion times.
func Collective(name string, o CollectiveOptions) (CollectiveResult, error) {
	h := o.Fabric.Hosts
	factor := 2 * float64(h-1) / float64(h) // busbw / algbw for an all-reduce
	if name == "alltoall" {
		factor = float64(h-1) / float64(h)
	}
	modes := []bool{false}
	if o.Baseline {
		modes = append(modes, true)
	}
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
		if i > 0 {
			f.Tracer = nil // the first run's alone
		}
		r, err := RunFlows(f, flowsOf(rn.size), 0)
		if err != nil {
			err = fmt.Errorf("%s of %d bytes at %g: %w", name, rn.size, rn.loss, err)
		}
		return r, err
	})
	if err != nil {
		return CollectiveResult{}, err
	}
	res := CollectiveResult{Name: name, Options: o, BusFactor: factor, HeapShared: heapShared(o.Jobs)}
	for i, r := range results {
		alg := float64(runs[i].size) / r.Makespan.Seconds()
		bus := alg * factor
		res.Rows = append(res.Rows, CollectiveRow{Bytes: runs[i].size, Loss: runs[i].loss, Baseline: runs[i].baseline, Run: r,
			AlgBW: alg, BusBW: bus, BusShare: bus / r.HostCapacity,
			FCTP50: Percentile(r.FCT, 0.5), FCTP99: Percentile(r.FCT, 0.99)})
	}
	return res, nil
}

// PermutationOptions are the permutation scenario's settings.
type PermutationOptions struct {
	Fabric    FabricOptions
	FlowBytes int
	Shift     int   // host h sends to h + Shift
	Paths     []int // mroce runs once with each count of paths per connection
	Baseline  bool
	Jobs      int // runs at once
}

// DefaultPermutationScenario is the permutation scenario of
// docs/results.md. It has 64 hosts on 4 planes of 100 Gb/s, each plane a
// leaf-spine of 8 hosts per leaf and 8 spines with no oversubscription.
// Each host sends 16 MiB to the host half the fabric away, so every flow
// crosses the spines.
func DefaultPermutationScenario() PermutationOptions {
	f := DefaultFabric(4)
	f.HostsPerLeaf, f.Spines = 8, 8
	return PermutationOptions{Fabric: f, FlowBytes: 16 << 20, Shift: 32, Paths: []int{8, 32, 64}, Baseline: true}
}

// PermutationResult is what the permutation scenario measured, a row per
// count of paths and then the baseline's.
type PermutationResult struct {
	Options PermutationOptions
	Rows    []PermutationRow
}

// PermutationRow is one run of the permutation.
type PermutationRow struct {
	Baseline bool
	Paths    int // per connection, 1 for the baseline
	Run      FlowsResult
	// Goodput is the aggregate in bytes/s. OfCapacity is it over every
	// host's payload rate over all its planes.
	Goodput, OfCapacity float64
	FCTP50, FCTP99      time.Duration
	// Spread is the slowest flow's completion time over the fastest's.
	Spread    float64
	SortedFCT []time.Duration
}

// PermutationScenario runs a permutation, mroce with each count of paths
// beside the baseline. In a leaf-spine, ECMP hashing decides how evenly
// the paths share the spines. The more paths a connection sprays over,
// the more evenly the load spreads, which one path cannot do.
func PermutationScenario(o PermutationOptions) (PermutationResult, error) {
	flows := Permutation(o.Fabric.Hosts, o.Shift, o.FlowBytes)
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
		if i > 0 {
			f.Tracer = nil // the first run's alone
		}
		return RunFlows(f, flows, 0)
	})
	if err != nil {
		return PermutationResult{}, err
	}
	res := PermutationResult{Options: o}
	for i, r := range results {
		g := r.Goodput(flows)
		sorted := slices.Clone(r.FCT)
		slices.Sort(sorted)
		res.Rows = append(res.Rows, PermutationRow{Baseline: runs[i].baseline, Paths: runs[i].paths, Run: r,
			Goodput: g, OfCapacity: g / (float64(o.Fabric.Hosts) * r.HostCapacity),
			FCTP50: Percentile(r.FCT, 0.5), FCTP99: Percentile(r.FCT, 0.99),
			Spread: float64(sorted[len(sorted)-1]) / float64(max(1, sorted[0])), SortedFCT: sorted})
	}
	return res, nil
}

// FlowsScenarioResult is what a traffic file's run measured.
type FlowsScenarioResult struct {
	Traffic Traffic
	Run     FlowsResult
	Bytes   int     // all flows'
	Goodput float64 // aggregate bytes/s over the makespan
	// FCTP50, FCTP99 and FCTMax are percentiles of the flows' completion
	// times, each from the flow's posting; SortedFCT is them all, sorted.
	FCTP50, FCTP99, FCTMax time.Duration
	SortedFCT              []time.Duration
}

// FlowsScenario runs a traffic file's flows and measures every flow's
// completion time.
func FlowsScenario(t Traffic) (FlowsScenarioResult, error) {
	r, err := RunFlows(t.Fabric, t.Flows, 0)
	if err != nil {
		return FlowsScenarioResult{}, err
	}
	res := FlowsScenarioResult{Traffic: t, Run: r, Goodput: r.Goodput(t.Flows),
		FCTP50: Percentile(r.FCT, 0.5), FCTP99: Percentile(r.FCT, 0.99), FCTMax: Percentile(r.FCT, 1)}
	for _, fl := range t.Flows {
		res.Bytes += fl.Bytes
	}
	res.SortedFCT = slices.Clone(r.FCT)
	slices.Sort(res.SortedFCT)
	return res, nil
}

// FlowsSeedsResult is a traffic file's flows run once with each of several
// seeds.
type FlowsSeedsResult struct {
	Seeds []uint64
	Runs  []FlowsScenarioResult
}

// FlowsSeeds runs a traffic file's flows with seeds, from its own seed up,
// jobs at once as runEach takes them. A seed draws the ECMP hash keys, the
// links' random streams and, with StartJitter, the flows' starts. With
// more than one job a run that could go over processes takes one core,
// unless the file's Workers says otherwise: the cores go to the runs.
func FlowsSeeds(t Traffic, seeds, jobs int) (FlowsSeedsResult, error) {
	first := t.Fabric.Seed
	if (jobs < 0 || jobs > 1) && t.Fabric.Workers == 0 { // -1: one a core
		t.Fabric.Workers = 1
	}
	runs, err := runEach(jobs, seeds, func(i int) (FlowsScenarioResult, error) {
		t := t
		t.Fabric.Seed = first + uint64(i)
		if i > 0 {
			t.Fabric.Tracer = nil // the first run's alone
		}
		r, err := FlowsScenario(t)
		if err != nil {
			return r, fmt.Errorf("seed %d: %w", t.Fabric.Seed, err)
		}
		return r, nil
	})
	if err != nil {
		return FlowsSeedsResult{}, err
	}
	res := FlowsSeedsResult{Runs: runs}
	for i := range seeds {
		res.Seeds = append(res.Seeds, first+uint64(i))
	}
	return res, nil
}
