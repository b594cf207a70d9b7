package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// Flow is one WRITE of Bytes from host Src to host Dst. It is posted at
// Start, counted from the run's start, once every flow in After is done.
// After holds indices into the flow list. A flow of After that ends at
// this flow's Src is done when all its data has arrived there, as a
// collective's step waits for what it receives. Any other is done when
// its sender's WRITE completes. Flows from the same Src to the same Dst
// share a connection and a stream, and are posted in list order.
type Flow struct {
	Src, Dst, Bytes int
	Start           time.Duration
	After           []int
}

// FlowsResult is what a many-flow run measured.
type FlowsResult struct {
	// FCT is each flow's completion time from its posting, or 0 for a
	// flow that failed. Started is when it was posted, from the run's
	// start.
	FCT, Started []time.Duration
	// Makespan runs from the run's start, where Start counts from, to the
	// last completion.
	Makespan time.Duration
	// Failed counts the flows whose connection failed.
	Failed int
	// Delivered is the payload bytes the hosts' downlinks carried in each
	// Bucket, from the first Start.
	Delivered []float64
	Bucket    time.Duration
	// HostCapacity is one host's payload rate in bytes/s over all its
	// planes.
	HostCapacity float64
	Connections  int
	// Packets counts the data packets the senders sent. WallTime is what
	// the run took in real time, set-up included. Together they give the
	// simulator's speed.
	Packets  uint64
	WallTime time.Duration
	// Retransmits, TailProbes and Timeouts sum the senders' counters.
	Retransmits, TailProbes, Timeouts uint64
	// HeapBytes is the live Go heap at the end of the run with the world
	// still in it. It is the simulator's memory for the connections,
	// regions and fabric.
	HeapBytes uint64
	// OverProcesses is set when the run went over processes, a host
	// each, rather than on one clock.
	OverProcesses bool
	// Bounds are what the paths' routes allow the connections, with
	// FabricOptions.Bounds.
	Bounds *RouteBounds
	// Events counts the events and timers the run fired and Datagrams
	// the datagrams the fabric delivered, set-up included. They are what
	// the simulator's speed is made of.
	Events, Datagrams uint64
}

// Goodput is the bytes of every flow over the makespan, in bytes/s.
func (r FlowsResult) Goodput(flows []Flow) float64 {
	var b int
	for _, f := range flows {
		b += f.Bytes
	}
	return float64(b) / r.Makespan.Seconds()
}

// SlowestShare is the least rate of a flow, its bytes over its completion
// time, as a share of its host's capacity. A flow that failed has 0.
func (r FlowsResult) SlowestShare(flows []Flow) float64 {
	least := math.Inf(1)
	for i, f := range flows {
		share := 0.0
		if r.FCT[i] > 0 {
			share = float64(f.Bytes) / r.FCT[i].Seconds() / r.HostCapacity
		}
		least = min(least, share)
	}
	return least
}

// PacketRate is the simulator's speed in data packets per second of wall
// time.
func (r FlowsResult) PacketRate() float64 { return float64(r.Packets) / r.WallTime.Seconds() }

// RunFlows runs flows over a fabric of o, one connection per (Src, Dst),
// and samples what the downlinks deliver every bucket.
func RunFlows(o FabricOptions, flows []Flow, bucket time.Duration) (FlowsResult, error) {
	if o.Bounds && len(o.Faults) > 0 {
		// Links that fail or slow down change what the routes allow while
		// the flows run; the bounds take one fabric.
		return FlowsResult{}, errors.New("bounds: not with faults, which change the fabric during the run")
	}
	wallStart := time.Now()
	r := &flowRun{o: o, flows: flows, ps: sizeFor(o.MTU),
		res: FlowsResult{FCT: make([]time.Duration, len(flows)), Started: make([]time.Duration, len(flows)), Bucket: bucket}}
	if err := r.buildWorld(); err != nil {
		return r.res, err
	}
	r.groupPairs()
	if err := r.linkDependencies(); err != nil {
		return r.res, err
	}
	r.countPlacements()
	if err := r.registerRegions(); err != nil {
		return r.res, err
	}
	if err := r.connectPairs(); err != nil {
		return r.res, err
	}
	if err := r.startClock(); err != nil {
		return r.res, err
	}
	r.sampleDownlinks(bucket)
	r.schedule()
	if !r.w.run(time.Minute, func() bool { return r.left() == 0 }) {
		return r.res, fmt.Errorf("%d flows did not finish in a minute of virtual time", r.left())
	}
	r.collect()
	r.res.WallTime = time.Since(wallStart)
	r.res.Events, r.res.Datagrams = r.w.fired(), r.w.fab.Delivered()
	err := r.measureHeap()
	if err == nil && o.Bounds {
		r.res.Bounds, err = r.routeBounds()
	}
	runtime.KeepAlive(r.w)
	return r.res, err
}

// hostPair is a connection's two hosts.
type hostPair struct{ src, dst int }

// flowRun is the state of one RunFlows. Its steps are methods, called in
// the order RunFlows lists them.
type flowRun struct {
	o     FabricOptions
	flows []Flow
	ps    packetSize
	res   FlowsResult
	w     *world

	// pairOf numbers the pairs of hosts that flows connect. pairFlows
	// holds each pair's flows in list order, which is the order they are
	// posted in and so the order their WRITEs are placed at the receiver.
	pairOf    map[hostPair]int
	pairFlows [][]int

	// waiting counts what each flow still waits for. Its start time
	// counts one until its timer fires, and each flow of its After list
	// counts one more. dependents lists the flows that wait for each.
	waiting    []int
	dependents [][]int

	// src and dst are each host's source and target regions.
	src, dst []*memreg.Region

	// conns and evs are each pair's connection and its sender's events,
	// set up in the order of order.
	conns map[hostPair]*engine.Conn
	evs   map[hostPair]*flowEvents
	order []hostPair

	// start is when the flows start, and delivered each host's downlink
	// bytes per bucket from then.
	start     clock.Time
	delivered [][]float64

	// pending counts each source host's flows not yet done. Over
	// processes, each host's process counts its own.
	pending []int
	// postFailed marks the flows whose post was refused.
	postFailed []bool
	// readyToPost marks the flows no longer waiting. nextPost is, for
	// each pair, its next flow to post, counted by the sender's process.
	readyToPost []bool
	nextPost    []int
}

// buildWorld builds the fabric and the engines. The run goes over
// processes when the flows, the faults and the fabric allow it.
func (r *flowRun) buildWorld() error {
	o, ps := r.o, r.ps
	link := netem.LinkConfig{Rate: o.LinkRate, Delay: o.Delay, Queue: o.Links.queue(o.Buffer)}
	fc := netem.Config{Seed: o.Seed, Hosts: o.Hosts, Planes: o.Planes, HostsPerLeaf: o.HostsPerLeaf, Spines: o.Spines, FatTreeK: o.FatTreeK,
		Uplink: link, Downlink: link, FabricUp: link, FabricDown: link, MaxDatagram: ps.maxPacket(),
		SharedBuffer: o.Links.shared()}
	// A host's uplink is its NIC's port. Its connections share the NIC by
	// the endpoint's OutboundCapacity, and each port by its PortRates. It
	// marks nothing, since ECN marks come from switch ports. A marked queue
	// that the host's own connections build would cut their windows for
	// what no other host caused.
	fc.Uplink.Queue.ECNThreshold, fc.Uplink.Queue.ECNRamp = 0, nil
	if o.Loss > 0 {
		fc.Downlink.Impair.Loss = &netem.RandomLoss{P: o.Loss}
	}
	if o.PFC {
		fc.Uplink.Queue = netem.QueueConfig{PFC: &netem.PFC{XOff: 64 << 10, XOn: 32 << 10}}
	}
	for _, pl := range o.PlaneLinks {
		for _, kind := range []struct {
			k  netem.LinkKind
			lc netem.LinkConfig
		}{{netem.Uplink, fc.Uplink}, {netem.Downlink, fc.Downlink}, {netem.FabricUp, fc.FabricUp},
			{netem.FabricDown, fc.FabricDown}, {netem.CoreUp, fc.FabricUp}, {netem.CoreDown, fc.FabricDown}} {
			lc := kind.lc
			if pl.Rate > 0 {
				lc.Rate = pl.Rate
			}
			if pl.Delay > 0 {
				lc.Delay = pl.Delay
			}
			if pl.Buffer > 0 && kind.k != netem.Uplink {
				lc.Queue.Limit = pl.Buffer // a switch's; the hosts' NIC queues keep theirs
			}
			fc.Overrides = append(fc.Overrides, netem.Override{Plane: pl.Plane,
				Match: netem.LinkMatch{Kind: kind.k, Host: -1, Leaf: -1, Spine: -1}, Link: lc})
		}
	}
	r.res.HostCapacity = float64(o.Planes) * float64(o.LinkRate) / 8 * ps.payloadShare()
	if len(o.PlaneLinks) > 0 {
		r.res.HostCapacity = 0
		for p := range o.Planes {
			r.res.HostCapacity += float64(o.planeRate(p)) / 8 * ps.payloadShare()
		}
	}
	// Thousands of flows may open to one host at once. No source is forged
	// in a simulation, so none is asked to prove its address, which would
	// cost the handshakes beyond RetryAt a round trip (spec section 8.1).
	cfgFor := func(h int) engine.Config {
		c := engine.Config{Paths: o.Paths, Streams: 1, MaxPacket: ps.maxPacket(), NoProgress: time.Second,
			LineRate: float64(o.LinkRate) / 8, InboundCapacity: r.res.HostCapacity, OutboundCapacity: engine.Headroom * r.res.HostCapacity,
			MaxAccepting: 4096, RetryAt: engine.RetryNever, DelayTarget: o.DelayTarget,
			FirstWindow: o.FirstWindow, Resend: o.Resend, Tracer: o.Tracer}
		// Each plane's port sends at its own rate, which a NIC knows.
		for p := range o.Planes {
			c.PortRates = append(c.PortRates, float64(o.planeRate(p))/8*ps.payloadShare())
		}
		if o.Baseline {
			c.Mode = proto.ModeBaseline
		}
		return c
	}
	var w *world
	err := netem.ErrNotGrouped
	if grouped(o, r.flows) {
		w, err = newGroupedWorld(fc, o.Seed, o.RealPayloads, cfgFor, o.Workers)
	}
	if errors.Is(err, netem.ErrNotGrouped) {
		w, err = newWorld(fc, o.Seed, o.RealPayloads, cfgFor)
	}
	if err != nil {
		return err
	}
	r.w = w
	r.res.OverProcesses = w.group != nil
	return nil
}

// grouped reports whether a run of flows on o may go over processes, as
// far as the flows and the faults go. The fabric has its say too in
// netem.NewGrouped.
func grouped(o FabricOptions, flows []Flow) bool {
	if len(o.PlaneLinks) > 0 {
		return false // a plane's delay may be below the lookahead the others give
	}
	if o.Tracer != nil {
		return false // a Tracer is called from one goroutine; a group runs its hosts on several
	}
	// Over processes, a fault comes after what is on an uplink's wire has
	// arrived. That is at most a full packet's serialization and a link
	// delay after the flows' start. The 2 ns cover the serializer's
	// remainder and come after it.
	lead := o.Delay + sizeFor(o.MTU).serialization(o.LinkRate) + 2
	for _, ft := range o.Faults {
		if ft.At < lead {
			return false
		}
	}
	for _, f := range flows {
		if len(f.After) > 0 && len(o.Faults) > 0 {
			// Over processes, a flow that a fault fails would release only
			// the flows of its own host.
			return false
		}
		for _, d := range f.After {
			if d < 0 || d >= len(flows) || flows[d].Dst != f.Src {
				return false // it would learn of another host's completion at once
			}
		}
	}
	return true
}

// groupPairs numbers the pairs of hosts and lists each pair's flows.
func (r *flowRun) groupPairs() {
	r.pairOf = map[hostPair]int{}
	for i, f := range r.flows {
		p := hostPair{f.Src, f.Dst}
		k, ok := r.pairOf[p]
		if !ok {
			k = len(r.pairFlows)
			r.pairOf[p] = k
			r.pairFlows = append(r.pairFlows, nil)
		}
		r.pairFlows[k] = append(r.pairFlows[k], i)
	}
}

// linkDependencies counts what each flow waits for and lists the flows
// that wait for each.
func (r *flowRun) linkDependencies() error {
	r.waiting = make([]int, len(r.flows))
	r.dependents = make([][]int, len(r.flows))
	for i, f := range r.flows {
		r.waiting[i] = 1 + len(f.After)
		for _, d := range f.After {
			if d < 0 || d >= len(r.flows) || d == i {
				return fmt.Errorf("flow %d waits for flow %d: no such other flow", i, d)
			}
			r.dependents[d] = append(r.dependents[d], i)
		}
	}
	return nil
}

// countPlacements makes every host listen and count the WRITEs placed
// whole at it, pair by pair. Each one placed releases the flows that
// wait for its arrival.
func (r *flowRun) countPlacements() {
	w := r.w
	hostAt := map[netip.Addr]int{}
	for h := range w.hosts {
		for p := 0; p < r.o.Planes; p++ {
			hostAt[netem.Addr(p, h)] = h
		}
	}
	// placed counts each pair's WRITEs placed, by the receiver's process.
	placed := make([]int, len(r.pairFlows))
	for h := range w.hosts {
		w.hosts[h].ep.Listen(w.hosts[h].pd, func(*engine.Conn) (engine.Events, bool) {
			return &arrivals{events: events{sim: w.hosts[h].clk}, placed: func(c *engine.Conn) {
				src := -1
				for p := 0; p < r.o.Planes && src < 0; p++ {
					if a := c.RemoteAddr(p); a.IsValid() {
						src = hostAt[a]
					}
				}
				k, ok := r.pairOf[hostPair{src, h}]
				if !ok || placed[k] == len(r.pairFlows[k]) {
					return // not a connection of the flows, and none other is made
				}
				id := r.pairFlows[k][placed[k]]
				placed[k]++
				r.release(id, true, false, false)
			}}, true
		})
	}
}

// registerRegions gives every host one source and one target region, as
// large as the largest flow. Flows to one host overlap in its target,
// since nothing here reads it.
func (r *flowRun) registerRegions() error {
	largest := 1
	for _, f := range r.flows {
		largest = max(largest, f.Bytes)
		if f.Src == f.Dst || f.Src < 0 || f.Dst < 0 || f.Src >= r.o.Hosts || f.Dst >= r.o.Hosts {
			return fmt.Errorf("flow %d -> %d: hosts are 0 .. %d and differ", f.Src, f.Dst, r.o.Hosts-1)
		}
	}
	r.src = make([]*memreg.Region, r.o.Hosts)
	r.dst = make([]*memreg.Region, r.o.Hosts)
	for h := range r.w.hosts {
		r.src[h] = r.w.hosts[h].region(largest, memreg.LocalWrite)
		r.dst[h] = r.w.hosts[h].region(largest, memreg.LocalWrite|memreg.RemoteWrite)
	}
	return nil
}

// connectPairs sets up one connection per pair before any flow starts.
// On one clock they are set up one after the other, over processes all
// at once.
func (r *flowRun) connectPairs() error {
	w := r.w
	r.conns = map[hostPair]*engine.Conn{}
	r.evs = map[hostPair]*flowEvents{}
	for _, f := range r.flows {
		p := hostPair{f.Src, f.Dst}
		if r.conns[p] != nil {
			continue
		}
		ev := &flowEvents{sim: w.hosts[f.Src].clk, started: map[uint64]clock.Time{}, done: map[uint64]clock.Time{}}
		var c *engine.Conn
		var err error
		if w.group != nil {
			c, err = w.dial(f.Src, f.Dst, ev)
		} else {
			c, err = w.connect(f.Src, f.Dst, ev)
		}
		if err != nil {
			return err
		}
		r.conns[p], r.evs[p] = c, ev
		r.order = append(r.order, p)
	}
	if w.group != nil {
		w.run(time.Second, func() bool {
			for _, p := range r.order {
				if r.conns[p].State() == engine.Connecting {
					return false
				}
			}
			return true
		})
		for _, p := range r.order {
			if c := r.conns[p]; c.State() != engine.Established {
				return fmt.Errorf("connection %d->%d: %v", p.src, p.dst, c.Err())
			}
		}
	}
	r.res.Connections = len(r.conns)
	return nil
}

// startClock marks the flows' start and schedules the faults from it.
func (r *flowRun) startClock() error {
	r.start = r.w.now()
	for _, ft := range r.o.Faults {
		if err := r.w.fab.ScheduleFault(time.Duration(r.start)+ft.At, ft); err != nil {
			return err
		}
	}
	return nil
}

// sampleDownlinks counts the data bytes each host's downlinks deliver,
// per bucket from the flows' start. Each host has its own buckets,
// filled by its own process, and collect sums them after the run. The
// bytes are whole numbers, so the sums are the same in any order.
func (r *flowRun) sampleDownlinks(bucket time.Duration) {
	r.delivered = make([][]float64, r.o.Hosts)
	if bucket <= 0 {
		return
	}
	r.w.fab.AddHostTap(func(h int, e *netem.TapEvent) {
		d := e.Datagram
		if e.Verdict != netem.Sent || e.Link.Kind() != netem.Downlink || len(d.Data) < 2 || !proto.Type(d.Data[1]).IsData() {
			return
		}
		i := int(e.At.Sub(r.start) / bucket)
		for len(r.delivered[h]) <= i {
			r.delivered[h] = append(r.delivered[h], 0)
		}
		r.delivered[h][i] += float64(d.Size())
	})
}

// schedule arms every flow's start. A flow that starts at 0 stops
// waiting for its start at once, and the others when their timers fire.
func (r *flowRun) schedule() {
	r.pending = make([]int, r.o.Hosts)
	for _, f := range r.flows {
		r.pending[f.Src]++
	}
	r.postFailed = make([]bool, len(r.flows))
	r.readyToPost = make([]bool, len(r.flows))
	r.nextPost = make([]int, len(r.pairFlows))
	for _, p := range r.order {
		r.evs[p].pending = &r.pending[p.src]
		r.evs[p].finished = func(id uint64, ok bool) { r.release(int(id), false, ok, !ok) }
	}
	jitter := startJitter(r.o.Seed, r.o.StartJitter)
	for i, f := range r.flows {
		start := f.Start
		start += jitter()
		if start == 0 {
			r.ready(i)
		} else {
			r.w.hosts[f.Src].clk.NewTimer(func() { r.ready(i) }).Reset(r.start.Add(start))
		}
	}
}

// startJitter returns the delays of flows' starts, one a call, uniform in
// [0, most) from the seed's own stream, apart from the links' and the hash
// keys'; all 0 when most is 0.
func startJitter(seed uint64, most time.Duration) func() time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0x73746172)) // "star"
	return func() time.Duration {
		if most <= 0 {
			return 0
		}
		return time.Duration(rng.Int64N(int64(most)))
	}
}

// release readies the flows that wait for flow id. When id has arrived,
// that is the flows that start at its destination. When it completed at
// its source, it is the others. When it failed, it is all of them on one
// clock, and over processes those at its source.
func (r *flowRun) release(id int, arrived, completed, failed bool) {
	for _, d := range r.dependents[id] {
		atDst := r.flows[d].Src == r.flows[id].Dst
		if arrived && atDst || completed && !atDst || failed && (r.w.group == nil || r.flows[d].Src == r.flows[id].Src) {
			r.ready(d)
		}
	}
}

// ready counts down what flow i waits for. Once it waits for nothing, it
// is posted after the flows listed before it on its pair, so that each
// pair posts in list order.
func (r *flowRun) ready(i int) {
	if r.waiting[i]--; r.waiting[i] != 0 {
		return
	}
	r.readyToPost[i] = true
	k := r.pairOf[hostPair{r.flows[i].Src, r.flows[i].Dst}]
	clk := r.w.hosts[r.flows[i].Src].clk
	for ; r.nextPost[k] < len(r.pairFlows[k]) && r.readyToPost[r.pairFlows[k][r.nextPost[k]]]; r.nextPost[k]++ {
		j := r.pairFlows[k][r.nextPost[k]]
		// A timer posts it, since ready may run inside the engine's callback.
		clk.NewTimer(func() { r.post(j) }).Reset(clk.Now())
	}
}

// post posts flow i's WRITE. A refused post counts the flow done and
// failed.
func (r *flowRun) post(i int) {
	f := r.flows[i]
	p := hostPair{f.Src, f.Dst}
	c, ev := r.conns[p], r.evs[p]
	ev.started[uint64(i)] = ev.sim.Now()
	err := c.Post(engine.SendWR{ID: uint64(i), Op: engine.OpWrite, Local: engine.SGE{Region: r.src[f.Src], Length: uint32(f.Bytes)},
		RKey: r.dst[f.Dst].Key()})
	if err != nil {
		r.postFailed[i] = true
		r.pending[f.Src]--
		r.release(i, false, false, true)
	}
}

// left counts the flows not yet done on every host.
func (r *flowRun) left() int {
	n := 0
	for _, p := range r.pending {
		n += p
	}
	return n
}

// collect gathers the flows' times, the failures, the delivered bytes and
// the senders' counters into the result.
func (r *flowRun) collect() {
	res := &r.res
	for _, failed := range r.postFailed {
		if failed {
			res.Failed++
		}
	}
	last := r.start
	for _, p := range r.order {
		ev := r.evs[p]
		for id, at := range ev.started {
			res.Started[id] = at.Sub(r.start)
		}
		for id, at := range ev.done {
			res.FCT[id] = at.Sub(ev.started[id])
			last = max(last, at)
		}
		res.Failed += ev.failed
	}
	res.Makespan = last.Sub(r.start)
	for _, d := range r.delivered {
		for len(res.Delivered) < len(d) {
			res.Delivered = append(res.Delivered, 0)
		}
		for i, b := range d {
			res.Delivered[i] += b
		}
	}
	for _, c := range r.conns {
		st := c.SenderStats()
		res.Packets += st.Packets
		res.Retransmits += st.Retransmits
		res.TailProbes += st.TailProbes
		res.Timeouts += st.Timeouts
	}
}

// measureHeap reads the live heap with the world still in it, after a
// collection so that garbage does not count, and writes HeapProfile when
// it is set.
func (r *flowRun) measureHeap() error {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.res.HeapBytes = ms.HeapAlloc
	if HeapProfile != "" {
		return writeHeapProfile(HeapProfile)
	}
	return nil
}

// HeapProfile, when set, names a file that receives a runtime/pprof heap
// profile at the end of every run of flows, with the world still live in
// it. Each run's profile replaces the one before. It serves mroce sim
// --memprofile and is set before running, never during runs.
var HeapProfile string

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sim: heap profile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("sim: heap profile: %w", err)
	}
	return f.Close()
}

// flowEvents records the completions of one pair's flows.
type flowEvents struct {
	sim     *clock.Sim
	started map[uint64]clock.Time
	done    map[uint64]clock.Time
	failed  int
	pending *int
	// finished is told of every flow that completed or failed, so that
	// what waits for it may go.
	finished func(id uint64, ok bool)
}

func (e *flowEvents) Completion(_ *engine.Conn, wc engine.Completion) {
	if wc.Status != engine.StatusOK {
		e.failed++
	} else {
		e.done[wc.ID] = e.sim.Now()
	}
	if e.pending != nil {
		*e.pending--
	}
	if e.finished != nil {
		e.finished(wc.ID, wc.Status == engine.StatusOK)
	}
}

func (e *flowEvents) State(*engine.Conn, engine.ConnState, error) {}

// arrivals are a receiver's events in a run of flows. As an
// engine.WriteObserver it tells placed of every WRITE placed whole.
type arrivals struct {
	events
	placed func(c *engine.Conn)
}

func (a *arrivals) WritePlaced(c *engine.Conn, _ uint16, _ uint32) { a.placed(c) }

// Percentile is the p-th percentile of d, p running from 0 to 1.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}
