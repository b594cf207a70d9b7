package sim

import (
	"errors"
	"fmt"
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

// FabricOptions are the network and the engines of a many-flow scenario.
type FabricOptions struct {
	Hosts, Planes int
	// HostsPerLeaf and Spines make each plane a leaf-spine (0: one switch
	// per plane).
	HostsPerLeaf, Spines int
	LinkRate             int64
	Links
	Loss          float64 // random loss on every downlink
	Paths         int     // per connection
	Baseline, PFC bool
	// Faults are played at their times from the flows' start (after the
	// connections are set up); one sooner than a packet's serialization
	// and Delay, or one with flows that wait for others, keeps the run on
	// one clock.
	Faults []netem.Fault
	Seed   uint64
	// RealPayloads makes the engines copy and checksum every payload byte,
	// as on a real wire; by default payloads are placeholders (newWorld).
	RealPayloads bool
	// Workers is the cores one run takes (0: one per core) when it runs
	// over processes, a host each (newGroupedWorld): when no flow waits
	// for one that ends at another host and the fabric has one switch per
	// plane, a delay and no PFC. Its results are the same for any Workers.
	Workers int
}

// grouped reports whether a run of flows on o may go over processes, as
// far as the flows and the faults go; the fabric has its say too
// (netem.NewGrouped: one switch per plane, a delay, no PFC).
func grouped(o FabricOptions, flows []Flow) bool {
	// Over processes a fault comes after what is on an uplink's wire has
	// arrived (netem.Fabric.ScheduleFault): at most a full packet's
	// serialization and a link delay after the flows' start.
	lead := o.Delay + sizeFor(o.MTU).serialization(o.LinkRate) + 2 // a nanosecond of the serializer's remainder, and after
	for _, ft := range o.Faults {
		if ft.At < lead {
			return false
		}
	}
	for _, f := range flows {
		if len(f.After) > 0 && len(o.Faults) > 0 {
			return false // a flow a fault fails releases, over processes, only the flows of its own host
		}
		for _, d := range f.After {
			if d < 0 || d >= len(flows) || flows[d].Dst != f.Src {
				return false // it would learn of another host's completion at once
			}
		}
	}
	return true
}

// DefaultFabric is 64 hosts on planes of 100 Gb/s, one switch each.
func DefaultFabric(planes int) FabricOptions {
	return FabricOptions{Hosts: 64, Planes: planes, LinkRate: 100e9, Links: DefaultLinks(), Paths: 8, Seed: 1}
}

// Flow is one WRITE of Bytes from host Src to host Dst, posted at Start
// (virtual time from the run's start) once every flow in After (indices
// in the list) is done: for a flow of After that ends at this flow's Src,
// when its data has all arrived there (as a collective's step waits for
// what it receives); for another, when its sender's WRITE completes.
// Flows from the same Src to the same Dst share a connection and a
// stream, and are posted in list order.
type Flow struct {
	Src, Dst, Bytes int
	Start           time.Duration
	After           []int
}

// FlowsResult is what a many-flow run measured.
type FlowsResult struct {
	// FCT is each flow's completion time from its posting (0 for a flow
	// that failed), and Started when it was posted, from the run's start.
	FCT, Started []time.Duration
	// Makespan runs from the first Start to the last completion.
	Makespan time.Duration
	// Failed counts flows whose connection failed: "connections lost".
	Failed int
	// Delivered is the payload bytes the hosts' downlinks carried per
	// Bucket, from the first Start.
	Delivered []float64
	Bucket    time.Duration
	// HostCapacity is one host's payload rate over all its planes (bytes/s).
	HostCapacity float64
	Connections  int
	// Packets counts the data packets the senders sent (for the
	// simulator's speed), WallTime what the run took, set-up included.
	Packets  uint64
	WallTime time.Duration
	// Retransmits, TailProbes and Timeouts sum the senders' counters.
	Retransmits, TailProbes, Timeouts uint64
	// HeapBytes is the live Go heap at the end of the run, the world
	// still in it (the simulator's memory: connections, regions, fabric).
	HeapBytes uint64
	// OverProcesses: the run went over processes, a host each
	// (newGroupedWorld), not on one clock.
	OverProcesses bool
	// Events counts the events and timers the run fired, Datagrams the
	// datagrams the fabric delivered (set-up included): what the
	// simulator's speed is made of.
	Events, Datagrams uint64
}

// Goodput is the bytes of every flow over the makespan (bytes/s).
func (r FlowsResult) Goodput(flows []Flow) float64 {
	var b int
	for _, f := range flows {
		b += f.Bytes
	}
	return float64(b) / r.Makespan.Seconds()
}

// PacketRate is the simulator's speed: data packets per second of wall
// time.
func (r FlowsResult) PacketRate() float64 { return float64(r.Packets) / r.WallTime.Seconds() }

// RunFlows runs flows over a fabric of o, one connection per (Src, Dst),
// and samples what the downlinks deliver every bucket.
func RunFlows(o FabricOptions, flows []Flow, bucket time.Duration) (FlowsResult, error) {
	wallStart := time.Now()
	res := FlowsResult{FCT: make([]time.Duration, len(flows)), Started: make([]time.Duration, len(flows)), Bucket: bucket}
	ps := sizeFor(o.MTU)
	link := netem.LinkConfig{Rate: o.LinkRate, Delay: o.Delay, Queue: netem.QueueConfig{Limit: o.Buffer, ECNThreshold: o.ECNThreshold}}
	fc := netem.Config{Seed: o.Seed, Hosts: o.Hosts, Planes: o.Planes, HostsPerLeaf: o.HostsPerLeaf, Spines: o.Spines,
		Uplink: link, Downlink: link, FabricUp: link, FabricDown: link, MaxDatagram: ps.maxPacket()}
	// A host's uplink is its NIC's port: its connections share it by the
	// endpoint's OutboundCapacity, and it marks nothing (ECN marks come
	// from switch ports). Marked, a queue the host's own connections make
	// would cut their windows for what no other host caused.
	fc.Uplink.Queue.ECNThreshold = 0
	if o.Loss > 0 {
		fc.Downlink.Impair.Loss = &netem.RandomLoss{P: o.Loss}
	}
	if o.PFC {
		fc.Uplink.Queue = netem.QueueConfig{PFC: &netem.PFC{XOff: 64 << 10, XOn: 32 << 10}}
	}
	res.HostCapacity = float64(o.Planes) * float64(o.LinkRate) / 8 * ps.payloadShare()
	cfgFor := func(h int) engine.Config {
		c := engine.Config{Paths: o.Paths, Streams: 1, MaxPacket: ps.maxPacket(), NoProgress: time.Second,
			LineRate: float64(o.LinkRate) / 8, InboundCapacity: 0.98 * res.HostCapacity, OutboundCapacity: res.HostCapacity,
			MaxAccepting: 4096}
		if o.Baseline {
			c.Mode = proto.ModeBaseline
		}
		return c
	}
	var w *world
	err := netem.ErrNotGrouped
	if grouped(o, flows) {
		w, err = newGroupedWorld(fc, o.Seed, o.RealPayloads, cfgFor, o.Workers)
	}
	if errors.Is(err, netem.ErrNotGrouped) {
		w, err = newWorld(fc, o.Seed, o.RealPayloads, cfgFor)
	}
	if err != nil {
		return res, err
	}
	res.OverProcesses = w.group != nil
	// The flows of each pair, in list order: the order they are posted in
	// (post), so the order their WRITEs are placed at the receiver.
	type pair struct{ a, b int }
	pairOf := map[pair]int{}
	var pairFlows [][]int
	for i, f := range flows {
		k, ok := pairOf[pair{f.Src, f.Dst}]
		if !ok {
			k = len(pairFlows)
			pairOf[pair{f.Src, f.Dst}] = k
			pairFlows = append(pairFlows, nil)
		}
		pairFlows[k] = append(pairFlows[k], i)
	}
	// waiting counts what each flow waits for: its start time (1, until
	// its timer fires) and the flows of its After list.
	waiting := make([]int, len(flows))
	dependents := make([][]int, len(flows))
	for i, f := range flows {
		waiting[i] = 1 + len(f.After)
		for _, d := range f.After {
			if d < 0 || d >= len(flows) || d == i {
				return res, fmt.Errorf("flow %d waits for flow %d: no such other flow", i, d)
			}
			dependents[d] = append(dependents[d], i)
		}
	}
	var ready func(i int)
	// release readies what waits for flow id: arrived, what starts at its
	// destination; completed (at its source), the others; failed, all on
	// one clock, and over processes those on its source's.
	release := func(id int, arrived, completed, failed bool) {
		for _, d := range dependents[id] {
			atDst := flows[d].Src == flows[id].Dst
			if arrived && atDst || completed && !atDst || failed && (w.group == nil || flows[d].Src == flows[id].Src) {
				ready(d)
			}
		}
	}
	hostAt := map[netip.Addr]int{}
	for h := range w.hosts {
		for p := 0; p < o.Planes; p++ {
			hostAt[netem.Addr(p, h)] = h
		}
	}
	placed := make([]int, len(pairFlows)) // by pair: WRITEs placed, counted by the receiver's process
	for h := range w.hosts {
		w.hosts[h].ep.Listen(w.hosts[h].pd, func(*engine.Conn) (engine.Events, bool) {
			return &arrivals{events: events{sim: w.hosts[h].clk}, placed: func(c *engine.Conn) {
				src := -1
				for p := 0; p < o.Planes && src < 0; p++ {
					if a := c.RemoteAddr(p); a.IsValid() {
						src = hostAt[a]
					}
				}
				k, ok := pairOf[pair{src, h}]
				if !ok || placed[k] == len(pairFlows[k]) {
					return // not a connection of the flows' (none other is made)
				}
				id := pairFlows[k][placed[k]]
				placed[k]++
				release(id, true, false, false)
			}}, true
		})
	}
	// Regions: one source and one target per host, as large as the
	// largest flow; flows to one host overlap in its target (nothing here
	// reads it).
	largest := 1
	for _, f := range flows {
		largest = max(largest, f.Bytes)
		if f.Src == f.Dst || f.Src < 0 || f.Dst < 0 || f.Src >= o.Hosts || f.Dst >= o.Hosts {
			return res, fmt.Errorf("flow %d -> %d: hosts are 0 .. %d and differ", f.Src, f.Dst, o.Hosts-1)
		}
	}
	src := make([]*memreg.Region, o.Hosts)
	dst := make([]*memreg.Region, o.Hosts)
	for h := range w.hosts {
		src[h] = w.hosts[h].region(largest, memreg.LocalWrite)
		dst[h] = w.hosts[h].region(largest, memreg.LocalWrite|memreg.RemoteWrite)
	}
	// One connection per pair, set up before any flow starts: one after
	// the other on one clock, all at once over processes.
	conns := map[pair]*engine.Conn{}
	evs := map[pair]*flowEvents{}
	var order []pair
	for _, f := range flows {
		if p := (pair{f.Src, f.Dst}); conns[p] == nil {
			ev := &flowEvents{sim: w.hosts[f.Src].clk, started: map[uint64]clock.Time{}, done: map[uint64]clock.Time{}}
			var c *engine.Conn
			var err error
			if w.group != nil {
				c, err = w.dial(f.Src, f.Dst, ev)
			} else {
				c, err = w.connect(f.Src, f.Dst, ev)
			}
			if err != nil {
				return res, err
			}
			conns[p], evs[p] = c, ev
			order = append(order, p)
		}
	}
	if w.group != nil {
		w.run(time.Second, func() bool {
			for _, p := range order {
				if conns[p].State() == engine.Connecting {
					return false
				}
			}
			return true
		})
		for _, p := range order {
			if c := conns[p]; c.State() != engine.Established {
				return res, fmt.Errorf("connection %d->%d: %v", p.a, p.b, c.Err())
			}
		}
	}
	res.Connections = len(conns)
	// Measure what the downlinks deliver from the first start.
	start := w.now()
	for _, ft := range o.Faults {
		if err := w.fab.ScheduleFault(time.Duration(start)+ft.At, ft); err != nil {
			return res, err
		}
	}
	// Each host's downlinks are sampled into its own buckets (over
	// processes, by its own process), summed after the run: whole bytes,
	// so in any order the same sums.
	delivered := make([][]float64, o.Hosts)
	if bucket > 0 {
		w.fab.AddHostTap(func(h int, e *netem.TapEvent) {
			d := e.Datagram
			if e.Verdict != netem.Sent || e.Link.Kind() != netem.Downlink || len(d.Data) < 2 || !proto.Type(d.Data[1]).IsData() {
				return
			}
			i := int(e.At.Sub(start) / bucket)
			for len(delivered[h]) <= i {
				delivered[h] = append(delivered[h], 0)
			}
			delivered[h][i] += float64(d.Size())
		})
	}
	// pending counts the flows not yet done, by source host: over
	// processes, each host's process counts its own.
	pending := make([]int, o.Hosts)
	for _, f := range flows {
		pending[f.Src]++
	}
	postFailed := make([]bool, len(flows))
	post := func(i int) {
		f := flows[i]
		p := pair{f.Src, f.Dst}
		c, ev := conns[p], evs[p]
		ev.started[uint64(i)] = ev.sim.Now()
		err := c.Post(engine.SendWR{ID: uint64(i), Op: engine.OpWrite, Local: engine.SGE{Region: src[f.Src], Length: uint32(f.Bytes)},
			RKey: dst[f.Dst].Key()})
		if err != nil {
			postFailed[i] = true
			pending[f.Src]--
			release(i, false, false, true)
		}
	}
	// A ready flow is posted once the flows listed before it on its pair
	// are: in list order.
	readyToPost := make([]bool, len(flows))
	nextPost := make([]int, len(pairFlows)) // by pair, counted by the sender's process
	ready = func(i int) {
		if waiting[i]--; waiting[i] != 0 {
			return
		}
		readyToPost[i] = true
		k := pairOf[pair{flows[i].Src, flows[i].Dst}]
		clk := w.hosts[flows[i].Src].clk
		for ; nextPost[k] < len(pairFlows[k]) && readyToPost[pairFlows[k][nextPost[k]]]; nextPost[k]++ {
			j := pairFlows[k][nextPost[k]]
			clk.NewTimer(func() { post(j) }).Reset(clk.Now()) // not from inside the engine's callback
		}
	}
	for _, p := range order {
		evs[p].pending = &pending[p.a]
		evs[p].finished = func(id uint64, ok bool) { release(int(id), false, ok, !ok) }
	}
	for i, f := range flows {
		if f.Start == 0 {
			ready(i)
		} else {
			w.hosts[f.Src].clk.NewTimer(func() { ready(i) }).Reset(start.Add(f.Start))
		}
	}
	left := func() int {
		n := 0
		for _, p := range pending {
			n += p
		}
		return n
	}
	last := start
	if !w.run(time.Minute, func() bool { return left() == 0 }) {
		return res, fmt.Errorf("%d flows did not finish in a minute of virtual time", left())
	}
	for _, failed := range postFailed {
		if failed {
			res.Failed++
		}
	}
	for _, p := range order {
		for id, at := range evs[p].started {
			res.Started[id] = at.Sub(start)
		}
		for id, at := range evs[p].done {
			res.FCT[id] = at.Sub(evs[p].started[id])
			last = max(last, at)
		}
		res.Failed += evs[p].failed
	}
	res.Makespan = last.Sub(start)
	for _, d := range delivered {
		for len(res.Delivered) < len(d) {
			res.Delivered = append(res.Delivered, 0)
		}
		for i, b := range d {
			res.Delivered[i] += b
		}
	}
	for _, c := range conns {
		st := c.SenderStats()
		res.Packets += st.Packets
		res.Retransmits += st.Retransmits
		res.TailProbes += st.TailProbes
		res.Timeouts += st.Timeouts
	}
	res.WallTime = time.Since(wallStart)
	res.Events, res.Datagrams = w.fired(), w.fab.Delivered()
	// The live heap with the world still in it (connections, regions,
	// fabric): collected first, so that garbage does not count.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapBytes = ms.HeapAlloc
	if HeapProfile != "" {
		if err := writeHeapProfile(HeapProfile); err != nil {
			return res, err
		}
	}
	runtime.KeepAlive(w)
	return res, nil
}

// HeapProfile, when set, is a file that receives a heap profile
// (runtime/pprof's) at the end of every run of flows, with the world
// still live in it; each run's replaces the one before. A diagnostic for
// mroce sim --memprofile: set it before running, not during runs.
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
	sim      *clock.Sim
	started  map[uint64]clock.Time
	done     map[uint64]clock.Time
	failed   int
	pending  *int
	finished func(id uint64, ok bool) // a flow completed (or failed): what waits for it may go
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

// arrivals are a receiver's events in a run of flows: placed is told of
// every WRITE placed whole (engine.WriteObserver).
type arrivals struct {
	events
	placed func(c *engine.Conn)
}

func (a *arrivals) WritePlaced(c *engine.Conn, _ uint16, _ uint32) { a.placed(c) }

func (e *flowEvents) State(*engine.Conn, engine.ConnState, error) {}

// Percentile is the p-th percentile (0 to 1) of d.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}
