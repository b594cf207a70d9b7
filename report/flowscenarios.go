package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/sim"
)

// The tables and plots of the scenarios of many flows over a fabric are
// those of the collectives, the permutation and a traffic file's flows.

// collectiveWhat names a collective for its title.
func collectiveWhat(name string) string {
	if name == "alltoall" {
		return "all-to-all"
	}
	return "ring all-reduce"
}

// runMode names a run's transport in the tables of many flows.
func runMode(baseline bool) string {
	if baseline {
		return "baseline"
	}
	return "mroce"
}

// CollectiveTables is the allreduce or alltoall scenario's tables. They
// give the bandwidths and completion times of every run, and the
// simulator's speed.
func CollectiveTables(r sim.CollectiveResult) []*Table {
	o := r.Options
	t := &Table{
		Title: fmt.Sprintf("%s on %d hosts, %d planes of %g Gb/s each, %d paths per connection (the baseline: one path)",
			collectiveWhat(r.Name), o.Fabric.Hosts, o.Fabric.Planes, float64(o.Fabric.LinkRate)/1e9, o.Fabric.Paths),
		Columns: []string{"size MiB", "loss", "mode", "time µs", "algbw Gb/s", "busbw Gb/s", "busbw / host capacity", "FCT p50 µs", "FCT p99 µs", "lost conns"},
		Notes:   []string{"algbw = size / time; busbw = algbw x " + fmt.Sprintf("%.3f", r.BusFactor) + " (NCCL's bus bandwidth); host capacity: one host's payload rate over all its planes. Target: busbw >= 0.9 of it at >= 64 MiB."},
	}
	t.Notes = append(t.Notes, linksNotes(o.Fabric.Links)...)
	t.Notes = append(t.Notes, startNotes(o.Fabric)...)
	speed := &Table{Title: "Simulator speed (wall time on this machine, set-up included: it varies from run to run)",
		Columns: []string{"size MiB", "loss", "mode", "data packets", "wall s", "data packets/s", "heap MiB"}}
	for _, w := range r.Rows {
		run, mib, mode := w.Run, float64(w.Bytes)/(1<<20), runMode(w.Baseline)
		speed.Add(mib, w.Loss, mode, run.Packets, run.WallTime.Seconds(), run.PacketRate(), heapMiB(run, r.HeapShared))
		t.Add(mib, w.Loss, mode, us(run.Makespan), gbps(w.AlgBW), gbps(w.BusBW), w.BusShare, us(w.FCTP50), us(w.FCTP99), run.Failed)
	}
	return []*Table{t, speed}
}

// CollectivePlot is the allreduce or alltoall scenario's figure. It plots
// bus bandwidth against size, a line per mode and loss rate.
func CollectivePlot(r sim.CollectiveResult) *Plot {
	pl := &Plot{Title: collectiveWhat(r.Name) + ": bus bandwidth against size", XLabel: "size (MiB, log2)", YLabel: "busbw / host capacity", YMin: 0, YMax: 1.05}
	series := map[string]*Series{}
	var order []string
	for _, w := range r.Rows {
		key := fmt.Sprintf("%s, %g%% loss", runMode(w.Baseline), 100*w.Loss)
		s := series[key]
		if s == nil {
			s = &Series{Name: key}
			series[key] = s
			order = append(order, key)
		}
		s.X, s.Y = append(s.X, math.Log2(float64(w.Bytes)/(1<<20))), append(s.Y, w.BusShare)
	}
	for _, k := range order {
		pl.Series = append(pl.Series, *series[k])
	}
	return pl
}

// PermutationTables is the permutation scenario's table, a row per run.
func PermutationTables(r sim.PermutationResult) []*Table {
	o := r.Options
	t := &Table{
		Title: fmt.Sprintf("Permutation: %d hosts, each sending %d MiB to host + %d, %d planes of %g Gb/s, %s",
			o.Fabric.Hosts, o.FlowBytes>>20, o.Shift, o.Fabric.Planes, float64(o.Fabric.LinkRate)/1e9, topology(o.Fabric)),
		Columns: []string{"mode", "paths", "aggregate Gb/s", "of capacity", "FCT p50 µs", "FCT p99 µs", "slowest / fastest"},
		Notes:   []string{"Capacity: every host's payload rate over all its planes (the baseline uses one plane: at most 1/planes of it)."},
	}
	t.Notes = append(t.Notes, linksNotes(o.Fabric.Links)...)
	t.Notes = append(t.Notes, startNotes(o.Fabric)...)
	for _, w := range r.Rows {
		t.Add(runMode(w.Baseline), w.Paths, gbps(w.Goodput), w.OfCapacity, us(w.FCTP50), us(w.FCTP99), w.Spread)
	}
	if !o.Fabric.Bounds {
		return []*Table{t}
	}
	flows := sim.Permutation(o.Fabric.Hosts, o.Shift, o.FlowBytes)
	b := boundsTable("mode", "paths")
	for _, w := range r.Rows {
		b.Add(append([]any{runMode(w.Baseline), w.Paths}, boundsCells(w.Run.Bounds, w.Run.SlowestShare(flows))...)...)
	}
	return []*Table{t, b}
}

// PermutationPlot is the permutation scenario's figure, every run's
// completion times in order.
func PermutationPlot(r sim.PermutationResult) *Plot {
	pl := &Plot{Title: "Permutation: completion times, sorted", XLabel: "flows (sorted)", YLabel: "FCT (µs)"}
	for _, w := range r.Rows {
		s := Series{Name: fmt.Sprintf("%s, %d paths", runMode(w.Baseline), w.Paths)}
		for i, d := range w.SortedFCT {
			s.X, s.Y = append(s.X, float64(i)), append(s.Y, us(d))
		}
		pl.Series = append(pl.Series, s)
	}
	return pl
}

// flowsMode names how a traffic file's connections run.
func flowsMode(f sim.FabricOptions) string {
	if f.Baseline {
		return "baseline (one path per connection)"
	}
	if f.FirstWindow == engine.FirstWindowFixed {
		return fmt.Sprintf("mroce, %d paths per connection, first windows of 16 packets", f.Paths)
	}
	return fmt.Sprintf("mroce, %d paths per connection", f.Paths)
}

// FlowsTables is a traffic file's tables, a summary and every flow's
// completion time.
func FlowsTables(r sim.FlowsScenarioResult) []*Table {
	f, flows, run := r.Traffic.Fabric, r.Traffic.Flows, r.Run
	sum := &Table{
		Title: fmt.Sprintf("%d flows on %d hosts, %d planes of %g Gb/s, %s", len(flows), f.Hosts, f.Planes, float64(f.LinkRate)/1e9, flowsMode(f)),
		Columns: []string{"flows", "connections", "bytes", "makespan µs", "aggregate Gb/s", "FCT p50 µs", "FCT p99 µs", "FCT max µs", "lost",
			"data packets", "resent", "tail probes", "timeouts"},
		Notes: linksNotes(f.Links),
	}
	sum.Add(len(flows), run.Connections, r.Bytes, us(run.Makespan), gbps(r.Goodput), us(r.FCTP50), us(r.FCTP99), us(r.FCTMax),
		run.Failed, run.Packets, run.Retransmits, run.TailProbes, run.Timeouts)
	tables := []*Table{sum}
	if run.Bounds != nil {
		b := boundsTable()
		b.Add(boundsCells(run.Bounds, run.SlowestShare(flows))...)
		tables = append(tables, b)
	}
	each := &Table{Title: "Every flow (FCT from when it was posted)", Columns: []string{"flow", "src", "dst", "bytes", "start µs", "FCT µs"}}
	if f.StartJitter > 0 {
		each.Columns[4] = "posted µs" // its start and its jitter, or later where it waited for others
	}
	for i, fl := range flows {
		start := us(fl.Start)
		if f.StartJitter > 0 {
			start = float64(run.Started[i].Nanoseconds()) / 1e3
		}
		each.Add(i, fl.Src, fl.Dst, fl.Bytes, start, float64(run.FCT[i].Nanoseconds())/1e3)
	}
	return append(tables, each)
}

// FlowsSeedsTables is a traffic file run with several seeds: each run's
// figures, then their minimum, median and maximum.
func FlowsSeedsTables(r sim.FlowsSeedsResult) []*Table {
	first := r.Runs[0]
	f, flows := first.Traffic.Fabric, first.Traffic.Flows
	t := &Table{
		Title: fmt.Sprintf("%d flows on %d hosts, %d planes of %g Gb/s, %s, seeds %d to %d", len(flows), f.Hosts, f.Planes,
			float64(f.LinkRate)/1e9, flowsMode(f), r.Seeds[0], r.Seeds[len(r.Seeds)-1]),
		Columns: []string{"seed", "makespan µs", "aggregate Gb/s", "FCT p50 µs", "FCT p99 µs", "FCT max µs", "lost", "resent", "tail probes", "timeouts"},
		Notes:   linksNotes(f.Links),
	}
	if f.StartJitter > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("Each flow starts up to %v late, drawn from the seed.", f.StartJitter))
	}
	// The figures of each run, the times and rates first, then the counts,
	// which are printed as whole numbers where they are.
	const firstCount = 5
	cols := make([][]float64, len(t.Columns)-1)
	value := func(j int, v float64) any {
		if j >= firstCount && v == math.Trunc(v) {
			return int64(v)
		}
		return v
	}
	for i, run := range r.Runs {
		row := []float64{us(run.Run.Makespan), gbps(run.Goodput), us(run.FCTP50), us(run.FCTP99), us(run.FCTMax),
			float64(run.Run.Failed), float64(run.Run.Retransmits), float64(run.Run.TailProbes), float64(run.Run.Timeouts)}
		cells := []any{r.Seeds[i]}
		for j, v := range row {
			cols[j] = append(cols[j], v)
			cells = append(cells, value(j, v))
		}
		t.Add(cells...)
	}
	for _, stat := range []struct {
		name string
		at   func([]float64) float64
	}{{"min", func(v []float64) float64 { return v[0] }}, {"median", median}, {"max", func(v []float64) float64 { return v[len(v)-1] }}} {
		cells := []any{stat.name}
		for j, c := range cols {
			v := slices.Clone(c)
			slices.Sort(v)
			cells = append(cells, value(j, stat.at(v)))
		}
		t.Add(cells...)
	}
	if !f.Bounds {
		return []*Table{t}
	}
	b := boundsTable("seed")
	for i, run := range r.Runs {
		b.Add(append([]any{r.Seeds[i]}, boundsCells(run.Run.Bounds, run.Run.SlowestShare(flows))...)...)
	}
	return []*Table{t, b}
}

// median is the middle of sorted values, or the mean of the two middle ones.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// FlowsSeedsPlot is the completion times of every seed's run, sorted.
func FlowsSeedsPlot(r sim.FlowsSeedsResult) *Plot {
	pl := &Plot{Title: "Completion times, sorted, one line a seed", XLabel: "flows (sorted)", YLabel: "FCT (µs)"}
	for i, run := range r.Runs {
		s := Series{Name: fmt.Sprintf("seed %d", r.Seeds[i])}
		for j, d := range run.SortedFCT {
			s.X, s.Y = append(s.X, float64(j)), append(s.Y, float64(d.Nanoseconds())/1e3)
		}
		pl.Series = append(pl.Series, s)
	}
	return pl
}

// FlowsPlot is a traffic file's figure, the completion times in order.
func FlowsPlot(r sim.FlowsScenarioResult) *Plot {
	pl := &Plot{Title: "Completion times, sorted", XLabel: "flows (sorted)", YLabel: "FCT (µs)"}
	s := Series{Name: flowsMode(r.Traffic.Fabric)}
	for i, d := range r.SortedFCT {
		s.X, s.Y = append(s.X, float64(i)), append(s.Y, float64(d.Nanoseconds())/1e3)
	}
	pl.Series = []Series{s}
	return pl
}

// topology names a fabric's shape per plane.
func topology(f sim.FabricOptions) string {
	switch {
	case f.FatTreeK > 0:
		return fmt.Sprintf("a three-tier fat tree per plane, k = %d", f.FatTreeK)
	case f.HostsPerLeaf > 0:
		return fmt.Sprintf("a leaf-spine per plane, %d hosts per leaf, %d spines", f.HostsPerLeaf, f.Spines)
	}
	return "one switch per plane"
}
