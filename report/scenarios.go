package report

import (
	"fmt"
	"time"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/sim"
)

// The tables and plots of the loss, incast, planes and planefail
// scenarios. Each lays out a result of package sim as it is, so that the
// figures stay the scenario's. Only the units change, bytes/s to Gb/s and
// durations to µs.

// gbps is a rate of bytes/s in Gb/s.
func gbps(bytesPerSecond float64) float64 { return bytesPerSecond * 8 / 1e9 }

// us is a duration in whole µs, as the tables show completion times.
func us(d time.Duration) float64 { return float64(d.Microseconds()) }

// linksNotes says what the links are when they are not the defaults, for
// a scenario's table. It says nothing when they are.
func linksNotes(l sim.Links) []string {
	if l.MTU == 0 {
		l.MTU = sim.DefaultMTU
	}
	d := sim.DefaultLinks()
	if l == d {
		return nil
	}
	return []string{fmt.Sprintf("Links: %s (the defaults: %s).", describeLinks(l), describeLinks(d))}
}

// startNotes says how a fabric scenario's connections start, where that
// is not the default.
func startNotes(f sim.FabricOptions) []string {
	if f.FirstWindow != engine.FirstWindowFixed {
		return nil
	}
	return []string{"First windows of 16 packets (--first-window fixed), where the default is one bandwidth-delay product of a host's NIC shared among the connections it opened."}
}

// describeLinks names the links' delay, marking threshold, buffers and
// packets.
func describeLinks(l sim.Links) string {
	marking := fmt.Sprintf("DCTCP marking at %d KiB", l.ECNThreshold>>10)
	if l.ECNMax > 0 {
		marking = fmt.Sprintf("marking on dequeue from %d to %d KiB", l.ECNThreshold>>10, l.ECNMax>>10)
	}
	buffers := fmt.Sprintf("%d KiB buffers", l.Buffer>>10)
	if l.SharedBuffer > 0 {
		buffers = fmt.Sprintf("%d KiB a queue within %d KiB a switch shared at alpha %g", l.Buffer>>10, l.SharedBuffer>>10, l.SharedBufferAlpha())
	}
	return fmt.Sprintf("%v of delay, %s, %s, %s packets", l.Delay, marking, buffers, sim.PacketName(l.MTU))
}

// heapMiB is a run's live heap in MiB for a speed table. It is nil, shown
// as "-", when other runs shared the heap with it.
func heapMiB(r sim.FlowsResult, shared bool) any {
	if shared {
		return nil
	}
	return float64(r.HeapBytes) / (1 << 20)
}

// LossTables is the loss scenario's table. It gives each run's goodput at
// each loss rate, and its ratio to the same run's at the first rate,
// beside the models.
func LossTables(r sim.LossResult) []*Table {
	o := r.Options
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
	where := "every downlink"
	if o.EveryLink {
		where = "every link"
	}
	t := &Table{
		Title: fmt.Sprintf("Goodput under %s loss on %s: %d MiB, mroce over %d paths on %d planes of %g Gb/s; baseline on one plane, window %d, ACK timeout %s",
			kind, where, o.Bytes>>20, o.Paths, o.Planes, float64(o.LinkRate)/1e9, o.BaselineWindow, timeout),
		Columns: []string{"loss", "mroce Gb/s", "mroce/0%", "target", "lost", "resent", "baseline lossy Gb/s", "baseline/0%", "model 1/(1+pW)", "go-back-N (1-p)/(1-p+pW)", "baseline PFC Gb/s", "PFC/0%"},
	}
	t.Notes = append(t.Notes, linksNotes(o.Links)...)
	for _, w := range r.Rows {
		t.Add(w.Loss, gbps(w.Mroce.Goodput), w.MroceRatio, w.Target, w.Mroce.Lost, w.Mroce.Retransmits,
			gbps(w.Baseline.Goodput), w.BaselineRatio, w.Model, w.GoBackN, gbps(w.BaselinePFC.Goodput), w.PFCRatio)
	}
	if o.Losses[0] != 0 {
		t.Notes = append(t.Notes, "Ratios are to the first loss rate's goodput, which is not 0.")
	}
	if o.EveryLink {
		t.Notes = append(t.Notes, "Loss p on every link: a packet crosses an uplink and a downlink, and 1 - (1 - p)^2 of the transmissions are lost on their way, each after it took its link's time. The target and the baseline's models take that as their p.")
	}
	t.Notes = append(t.Notes, "The target for mroce is 0.98 x (1 - p) of its loss-free goodput; the baseline is held to the model 1/(1+pW) within 10% up to 5% loss, and to go-back-N's (1-p)/(1-p+pW) within 10% at every loss.")
	return []*Table{t}
}

// LossPlot is the loss scenario's figure. It plots each run's goodput
// ratio against the loss rate, with the go-back-N model and the limit
// 1 - p.
func LossPlot(r sim.LossResult) *Plot {
	pl := &Plot{Title: "Goodput under loss, as a share of each one's loss-free goodput", XLabel: "loss rate (%)", YLabel: "of loss-free goodput", YMin: 0, YMax: 1.05, LegendBottomLeft: true}
	series := []Series{{Name: "mroce"}, {Name: "baseline, lossy fabric"}, {Name: "baseline, PFC fabric"}, {Name: "go-back-N model 1/(1+pW)"}, {Name: "limit 1 - p"}}
	for _, w := range r.Rows {
		for i, y := range []float64{w.MroceRatio, w.BaselineRatio, w.PFCRatio, w.Model, 1 - w.Loss} {
			series[i].X = append(series[i].X, 100*w.Loss)
			series[i].Y = append(series[i].Y, y)
		}
	}
	pl.Series = series
	return pl
}

// IncastTables is the incast scenario's table, a row per run.
func IncastTables(r sim.IncastScenarioResult) []*Table {
	o := r.Options
	t := &Table{
		Title:   fmt.Sprintf("N:1 incast, %d MiB from each sender, %s packets, DCTCP marking at %d KiB", o.Bytes>>20, sim.PacketName(o.MTU), o.ECNThreshold>>10),
		Columns: []string{"N", "Gb/s", "variant", "converged (base RTTs)", "sent rates converged", "Jain after 10 RTTs", "peak queue KiB", "drops", "after 1st RTT", "resent", "slowest FCT/ideal"},
		Notes: []string{"Converged: from the first data packet until every sender's delivered rate stays within 10% of its fair share (targets: 2 base RTTs at N = 8, 4 at N = 64). Sent rates converged: the same for the rates the senders put on their uplinks.",
			"Resent: data packets sent again, all senders together; beyond the drops, they were only late."},
	}
	if o.StartJitter > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("Each sender starts up to %v late, drawn from the seed; the convergence counts from the last sender's first data packet.", o.StartJitter))
	}
	t.Notes = append(t.Notes, linksNotes(o.Links)...)
	for _, x := range r.Runs {
		cfg := x.Config
		t.Add(cfg.Senders, float64(cfg.LinkRate)/1e9, cfg.Mode(), x.Convergence, x.SendConvergence, x.Jain, x.PeakQueue>>10, x.Drops, x.DropsAfterFirstRTT, x.Retransmits, x.FCTRatio)
	}
	return []*Table{t}
}

// IncastPlot is the incast scenario's figure. It plots the traced run's
// slowest, mean and fastest sender over fair share, and under them the
// receiver's queue.
func IncastPlot(r sim.IncastScenarioResult) *Plot {
	o := r.Options
	nMax := 0
	for _, n := range o.Senders {
		nMax = max(nMax, n)
	}
	pl := &Plot{Title: fmt.Sprintf("Incast %d:1 at %g Gb/s (mroce): delivered rate over fair share", nMax, float64(o.Rates[0])/1e9),
		XLabel: "base RTTs from the first data packet (window start)", YLabel: "rate / fair share"}
	series := []Series{{Name: "slowest sender"}, {Name: "mean"}, {Name: "fastest sender"}}
	queue := Series{Name: "receiver's downlink queue"}
	for _, w := range r.Trace {
		queue.X, queue.Y = append(queue.X, w.Start), append(queue.Y, w.QueueKiB)
		for i, y := range []float64{w.Slowest, w.Mean, w.Fastest} {
			series[i].X = append(series[i].X, w.Start)
			series[i].Y = append(series[i].Y, y)
		}
	}
	pl.Series = series
	pl.Below = &Plot{XLabel: pl.XLabel, YLabel: "deepest queue in the window (KiB)", Series: []Series{queue}}
	return pl
}

// PlanesTables is the planes scenario's tables, the throughput by planes
// and the simulator's speed.
func PlanesTables(r sim.PlanesResult) []*Table {
	o := r.Options
	title := fmt.Sprintf("All-to-all over 1 to %d planes: %d hosts, %d KiB from every host to every other, %d paths per connection, planes of %g Gb/s",
		o.Planes[len(o.Planes)-1], o.Fabric.Hosts, o.FlowBytes>>10, o.Fabric.Paths, float64(o.Fabric.LinkRate)/1e9)
	if o.Fabric.FatTreeK > 0 || o.Fabric.HostsPerLeaf > 0 {
		title += ", " + topology(o.Fabric) // one switch per plane goes unsaid, as before
	}
	t := &Table{
		Title:   title,
		Columns: []string{"planes", "connections", "aggregate Gb/s", "of capacity", "vs half the planes", "FCT p50 µs", "FCT p99 µs", "connections lost"},
		Notes:   []string{"Capacity: every host's payload rate over all its planes. The target for 8 planes over 4 is 2.0 +- 3%."},
	}
	t.Notes = append(t.Notes, linksNotes(o.Fabric.Links)...)
	t.Notes = append(t.Notes, startNotes(o.Fabric)...)
	speed := &Table{Title: "Simulator speed (wall time on this machine: it varies from run to run)",
		Columns: []string{"planes", "data packets", "wall s", "data packets/s", "heap MiB", "events / data packet", "datagrams / data packet"}}
	for _, w := range r.Rows {
		run := w.Run
		var vsHalf any
		if w.VsHalf != 0 {
			vsHalf = w.VsHalf
		}
		t.Add(w.Planes, run.Connections, gbps(w.Goodput), w.OfCapacity, vsHalf, us(w.FCTP50), us(w.FCTP99), run.Failed)
		speed.Add(w.Planes, run.Packets, run.WallTime.Seconds(), run.PacketRate(), heapMiB(run, r.HeapShared),
			float64(run.Events)/float64(run.Packets), float64(run.Datagrams)/float64(run.Packets))
	}
	return []*Table{t, speed}
}

// PlanesPlot is the planes scenario's figure. It plots aggregate goodput
// against planes, beside the line from one plane's.
func PlanesPlot(r sim.PlanesResult) *Plot {
	pl := &Plot{Title: "All-to-all throughput against planes", XLabel: "planes (NIC ports per host)", YLabel: "aggregate goodput (Tb/s)"}
	got, ideal := Series{Name: "mroce"}, Series{Name: "linear from one plane"}
	for _, w := range r.Rows {
		got.X, got.Y = append(got.X, float64(w.Planes)), append(got.Y, w.Goodput*8/1e12)
	}
	if len(got.Y) > 0 {
		for _, x := range got.X {
			ideal.X, ideal.Y = append(ideal.X, x), append(ideal.Y, got.Y[0]*x/got.X[0])
		}
	}
	pl.Series = []Series{got, ideal}
	return pl
}

// planeFailName is how the planefail scenario names its failure.
func planeFailName(o sim.PlaneFailOptions) string {
	if o.Down {
		return "down (the hosts see it)"
	}
	return "blackholed"
}

// PlaneFailTables is the planefail scenario's table. It gives the
// throughput before the failure, over the window its target is measured
// over, and around the repair.
func PlaneFailTables(r sim.PlaneFailResult) []*Table {
	o := r.Options
	f := o.Fabric
	to := "to the next"
	if o.AllToAll {
		to = "to every other"
	}
	left := float64(f.Planes-1) / float64(f.Planes)
	t := &Table{
		Title: fmt.Sprintf("Plane %d of %d %s at %v, repaired at %v: %d hosts, each WRITEing %d MiB %s (%d connections), %d paths per connection",
			o.Plane, f.Planes, planeFailName(o), o.FailAt, o.RepairAt, f.Hosts, o.FlowBytes>>20, to, r.Flows, f.Paths),
		Columns: []string{"period", "throughput / all planes' capacity", "target"},
		Notes: []string{fmt.Sprintf("Base RTT %v. Target after the failure: 0.95 x %d/%d = %.3f, averaged over the %d base RTTs starting %d after it (%v to %v). Connections lost: %d of %d.",
			r.BaseRTT, f.Planes-1, f.Planes, 0.95*left, sim.FailWindowTo-sim.FailWindowFrom, sim.FailWindowFrom, r.WindowFrom, r.WindowTo, r.Run.Failed, r.Run.Connections)},
	}
	t.Notes = append(t.Notes, linksNotes(f.Links)...)
	t.Notes = append(t.Notes, startNotes(f)...)
	if r.Run.Makespan < r.WindowTo {
		t.Notes = append(t.Notes, fmt.Sprintf("The flows ended at %v, before the window did: its figure covers only what was sent in it.", r.Run.Makespan))
	}
	t.Add("before the failure (from the start: the first round trips included)", r.Before, nil)
	t.Add(fmt.Sprintf("%d-%d base RTTs after", sim.FailWindowFrom, sim.FailWindowTo), r.Window, r.Target)
	if o.RepairAt > o.FailAt {
		t.Add("failed, until the repair", r.UntilRepair, nil)
		t.Add("after the repair (+10 base RTTs)", r.AfterRepair, nil)
	}
	return []*Table{t}
}

// PlaneFailPlot is the planefail scenario's figure. It plots throughput
// over time beside the share of the planes left.
func PlaneFailPlot(r sim.PlaneFailResult) *Plot {
	o := r.Options
	f := o.Fabric
	left := float64(f.Planes-1) / float64(f.Planes)
	pl := &Plot{Title: fmt.Sprintf("Plane %d of %d %s, then repaired", o.Plane, f.Planes, planeFailName(o)),
		XLabel: "µs from the flows' start", YLabel: "delivered / all planes' capacity", YMin: 0, YMax: 1.1}
	s := Series{Name: "mroce"}
	for i, y := range r.Throughput {
		s.X = append(s.X, float64(time.Duration(i)*r.Bucket)/float64(time.Microsecond))
		s.Y = append(s.Y, y)
	}
	lim := Series{Name: fmt.Sprintf("%d/%d", f.Planes-1, f.Planes)}
	if len(s.X) > 0 {
		lim.X, lim.Y = []float64{s.X[0], s.X[len(s.X)-1]}, []float64{left, left}
	}
	pl.Series = []Series{s, lim}
	return pl
}
