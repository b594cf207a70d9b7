package netem

import (
	"math/rand/v2"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/clock/parallel"
)

// Scheduler is the event loop a Fabric runs on, a clock.Sim in virtual time.
type Scheduler interface {
	Now() clock.Time
	At(t clock.Time, ev clock.Event)
}

// Fabric is an emulated network. Each host has one NIC port per plane, and
// each plane is a switch or a leaf-spine. Datagrams enter through a Host,
// which is a link.Port. They cross their plane's links and are pushed to the
// destination host's Receiver. The goroutine running the Fabric's Scheduler
// is the only one that drives it.
type Fabric struct {
	cfg        Config
	hosts      []*Host
	planes     []plane
	links      []*Link // every link, by id
	singleUp   []*Link // by host, with single-port hosts only
	singleDown []*Link
	pfc        bool // some link has PFC, so a datagram's hop must look for it

	procs []*proc         // one, or one per host over processes
	group *parallel.Group // nil on one Scheduler

	// The pools' surplus over processes, which rebalance shares out.
	sparePackets []*packet
	spareBufs    [][]byte
	spareHeaders [][]byte
	freePFC      []*pfcEvent

	trace      uint64 // the trace hash
	taps       []func(*TapEvent)
	hostTaps   []func(host int, e *TapEvent)
	planeWatch []func(host, plane int, up bool)
}

// proc is the part of a fabric that one logical process owns, with its own
// pools and counters. A fabric on one Scheduler has one. Over the processes
// of a parallel.Group, each proc holds a host, its NIC's uplinks and the
// switch ports that feed it. A datagram crossing to another process's link
// is sent there a link delay ahead.
type proc struct {
	idx   int
	sched Scheduler

	freePackets []*packet
	freeBufs    [][]byte
	freeHeaders [][]byte // HeaderBufferLen each

	nextPacket uint64 // packets made, which numbers them
	noRoute    uint64
	delivered  uint64

	planeDown [maxPlanes]bool // each plane as its hosts' NICs see it
}

// plane is one plane's links and its ECMP hash key.
type plane struct {
	index     int
	uplinks   []*Link   // by host
	downlinks []*Link   // by host
	leafUp    [][]*Link // by leaf, then spine, in a leaf-spine only
	spineDown [][]*Link // by spine, then leaf

	// A fat tree's (Config.FatTreeK): edgeUp by edge switch, then
	// aggregation switch of its pod; aggDown by aggregation switch, then
	// edge switch of its pod; aggUp by aggregation switch, then core of its
	// group; coreDown by core, then pod.
	edgeUp, aggDown, aggUp, coreDown [][]*Link

	ecmpKey uint64
}

// New builds a fabric on sched. Every datagram's random choices come from
// cfg.Seed.
func New(cfg Config, sched Scheduler) (*Fabric, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxDatagram == 0 {
		cfg.MaxDatagram = defaultMaxDatagram
	}
	f := &Fabric{cfg: cfg, trace: fnvOffset, procs: []*proc{{sched: sched}}}
	for h := 0; h < cfg.Hosts; h++ {
		f.hosts = append(f.hosts, &Host{fab: f, id: h, p: f.procs[0]})
	}
	seeds := rand.New(rand.NewPCG(cfg.Seed, 0x6d726f6365)) // "mroce"
	if cfg.SinglePort {
		// One NIC port per host, in no plane, so plane faults never touch it.
		for h := 0; h < cfg.Hosts; h++ {
			f.singleUp = append(f.singleUp, f.newLink(cfg.Uplink, Uplink, -1, h, f.leafOf(h)))
			f.singleDown = append(f.singleDown, f.newLink(cfg.Downlink, Downlink, -1, f.leafOf(h), h))
		}
	}
	for p := 0; p < cfg.Planes; p++ {
		pl := plane{index: p, ecmpKey: seeds.Uint64()}
		for h := 0; h < cfg.Hosts && !cfg.SinglePort; h++ {
			leaf := f.leafOf(h)
			pl.uplinks = append(pl.uplinks, f.newLink(cfg.Uplink, Uplink, p, h, leaf))
			pl.downlinks = append(pl.downlinks, f.newLink(cfg.Downlink, Downlink, p, leaf, h))
		}
		if cfg.FatTreeK > 0 {
			f.buildFatTree(&pl)
		}
		if cfg.HostsPerLeaf > 0 {
			leaves := (cfg.Hosts + cfg.HostsPerLeaf - 1) / cfg.HostsPerLeaf
			pl.leafUp = make([][]*Link, leaves)
			pl.spineDown = make([][]*Link, cfg.Spines)
			for l := 0; l < leaves; l++ {
				for s := 0; s < cfg.Spines; s++ {
					pl.leafUp[l] = append(pl.leafUp[l], f.newLink(cfg.FabricUp, FabricUp, p, l, s))
				}
			}
			for s := 0; s < cfg.Spines; s++ {
				for l := 0; l < leaves; l++ {
					pl.spineDown[s] = append(pl.spineDown[s], f.newLink(cfg.FabricDown, FabricDown, p, s, l))
				}
			}
		}
		f.planes = append(f.planes, pl)
	}
	if cfg.SharedBuffer != nil {
		f.shareBuffers(*cfg.SharedBuffer)
	}
	f.scheduleFaults(cfg.Faults)
	return f, nil
}

func (f *Fabric) leafOf(host int) int {
	switch {
	case f.cfg.FatTreeK > 0:
		return host / (f.cfg.FatTreeK / 2)
	case f.cfg.HostsPerLeaf == 0:
		return 0
	}
	return host / f.cfg.HostsPerLeaf
}

// buildFatTree makes the switch links of plane pl's fat tree, for the pods
// that hold hosts. Edge switch e is in pod e/(k/2), aggregation switch a
// in pod a/(k/2), and core c joins aggregation switch c/(k/2) of each pod.
func (f *Fabric) buildFatTree(pl *plane) {
	half := f.cfg.FatTreeK / 2
	edges := (f.cfg.Hosts + half - 1) / half
	pods := (edges + half - 1) / half
	pl.edgeUp = make([][]*Link, pods*half)
	pl.aggDown = make([][]*Link, pods*half)
	pl.aggUp = make([][]*Link, pods*half)
	pl.coreDown = make([][]*Link, half*half)
	for e := range pods * half {
		pod := e / half
		for j := range half {
			pl.edgeUp[e] = append(pl.edgeUp[e], f.newLink(f.cfg.FabricUp, FabricUp, pl.index, e, pod*half+j))
		}
	}
	for a := range pods * half {
		pod := a / half
		for e := range half {
			pl.aggDown[a] = append(pl.aggDown[a], f.newLink(f.cfg.FabricDown, FabricDown, pl.index, a, pod*half+e))
		}
		for i := range half {
			pl.aggUp[a] = append(pl.aggUp[a], f.newLink(f.coreLink(true), CoreUp, pl.index, a, (a%half)*half+i))
		}
	}
	for c := range half * half {
		for pod := range pods {
			pl.coreDown[c] = append(pl.coreDown[c], f.newLink(f.coreLink(false), CoreDown, pl.index, c, pod*half+c/half))
		}
	}
}

// shareBuffers gives each switch one buffer, shared by the links that leave
// it. A link leaves the switch its From names, by its kind: a leaf (or an
// edge switch of a fat tree, or a plane's one switch) for Downlink and
// FabricUp, a spine (or an aggregation switch) for FabricDown and CoreUp,
// and a core switch for CoreDown. Uplinks leave hosts. With single-port
// hosts a leaf is every plane's.
func (f *Fabric) shareBuffers(b SharedBuffer) {
	type sw struct{ plane, tier, index int }
	pools := map[sw]*bufferPool{}
	for _, l := range f.links {
		var tier int
		switch l.kind {
		case Uplink:
			continue
		case Downlink, FabricUp:
			tier = 0
		case FabricDown, CoreUp:
			tier = 1
		case CoreDown:
			tier = 2
		}
		plane := l.plane
		if f.cfg.SinglePort && tier == 0 {
			plane = -1 // a single-port host's leaf serves every plane
		}
		k := sw{plane, tier, l.from}
		if pools[k] == nil {
			pools[k] = &bufferPool{bytes: b.Bytes, alpha: b.Alpha}
		}
		l.pool = pools[k]
	}
}

// coreLink is the setting of a link between aggregation and core
// switches: CoreUp or CoreDown, or FabricUp or FabricDown where it is not
// given.
func (f *Fabric) coreLink(up bool) LinkConfig {
	lc, fallback := f.cfg.CoreDown, f.cfg.FabricDown
	if up {
		lc, fallback = f.cfg.CoreUp, f.cfg.FabricUp
	}
	if lc.Rate == 0 {
		return fallback
	}
	return lc
}

func (f *Fabric) newLink(lc LinkConfig, kind LinkKind, p, from, to int) *Link {
	l := &Link{
		fab: f, p: f.procs[0], id: len(f.links), kind: kind, plane: p, from: from, to: to, owner: -1, decided: -1,
		rng: rand.New(rand.NewPCG(f.cfg.Seed, uint64(len(f.links))+1)),
	}
	switch kind {
	case Uplink:
		l.owner = from
	case Downlink:
		l.owner = to
	}
	for _, o := range f.cfg.Overrides {
		if (o.Plane < 0 || o.Plane == p) && l.matches(&o.Match) {
			lc = o.Link
		}
	}
	l.cfg, l.rate, l.delay, l.mtu = lc, lc.Rate, lc.Delay, lc.MTU
	l.limit, l.ecnK, l.red, l.ramp = lc.Queue.Limit, lc.Queue.ECNThreshold, lc.Queue.RED, lc.Queue.ECNRamp
	im := &lc.Impair
	l.impaired = im.Corrupt > 0 || im.Duplicate > 0
	l.jittered = im.Jitter > 0 || im.Reorder > 0
	switch {
	case lc.Overhead == 0:
		l.overhead = DefaultOverhead
	case lc.Overhead > 0:
		l.overhead = lc.Overhead
	}
	if lc.Impair.Loss != nil {
		l.loss = lc.Impair.Loss.clone()
	}
	l.pfc = lc.Queue.PFC != nil
	f.pfc = f.pfc || l.pfc
	if r := lc.Queue.RED; r != nil {
		l.redWeight = r.Weight
		if l.redWeight == 0 {
			l.redWeight = defaultREDWeight
		}
	}
	f.links = append(f.links, l)
	return l
}

// Config returns the fabric's configuration, defaults filled in.
func (f *Fabric) Config() Config { return f.cfg }

// Host returns host i, which is the link.Port of that host.
func (f *Fabric) Host(i int) *Host { return f.hosts[i] }

// Hosts is the number of hosts.
func (f *Fabric) Hosts() int { return len(f.hosts) }

// Links returns every link, indexed by Link.ID.
func (f *Fabric) Links() []*Link { return f.links }

// Uplink returns host h's uplink on plane p. A single-port host has one
// uplink, whatever p.
func (f *Fabric) Uplink(p, h int) *Link {
	if f.cfg.SinglePort {
		return f.singleUp[h]
	}
	return f.planes[p].uplinks[h]
}

// Downlink returns host h's downlink on plane p. A single-port host has
// one downlink, whatever p.
func (f *Fabric) Downlink(p, h int) *Link {
	if f.cfg.SinglePort {
		return f.singleDown[h]
	}
	return f.planes[p].downlinks[h]
}

// BytesTo returns the bytes host h's downlinks have delivered to it, by
// plane. It shows how a host's traffic spread over its NIC ports.
func (f *Fabric) BytesTo(h int) []uint64 {
	out := make([]uint64, len(f.planes))
	for p := range out {
		out[p] = f.Downlink(p, h).Stats().Bytes
	}
	return out
}

// FabricLink returns plane p's link from leaf to spine if up is set, else
// from spine to leaf.
func (f *Fabric) FabricLink(p, leaf, spine int, up bool) *Link {
	if up {
		return f.planes[p].leafUp[leaf][spine]
	}
	return f.planes[p].spineDown[spine][leaf]
}

// PlaneUp reports whether plane p is up, as a host's NIC sees its port
// state. A PlaneDown fault takes it down, and a blackhole does not. Over
// processes it answers for host 0, which between windows sees what every
// host sees.
func (f *Fabric) PlaneUp(p int) bool { return !f.procs[0].planeDown[p] }

// NoRoute counts datagrams dropped at a host because their addresses name no
// host, or hosts on different planes.
func (f *Fabric) NoRoute() uint64 { return f.sum(func(p *proc) uint64 { return p.noRoute }) }

// Delivered counts datagrams pushed to receivers.
func (f *Fabric) Delivered() uint64 { return f.sum(func(p *proc) uint64 { return p.delivered }) }

// InFlight counts datagrams inside the fabric, queued or on a wire.
func (f *Fabric) InFlight() uint64 {
	return f.sum(func(p *proc) uint64 { return p.nextPacket }) - f.Delivered() - f.dropped()
}

func (f *Fabric) sum(of func(*proc) uint64) uint64 {
	var n uint64
	for _, p := range f.procs {
		n += of(p)
	}
	return n
}

func (f *Fabric) dropped() uint64 {
	n := f.NoRoute()
	for _, l := range f.links {
		n += l.stats.dropsTotal()
	}
	return n
}

// TraceHash is the FNV-1a hash of every link event so far, when
// Config.Trace is set. Each event hashes its time, link, packet and verdict.
// Two runs of one configuration and seed have equal hashes.
func (f *Fabric) TraceHash() uint64 { return f.trace }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// record sees every link event. It feeds the trace hash and the taps.
func (f *Fabric) record(l *Link, pkt *packet, v Verdict, cause DropCause, at clock.Time) {
	if len(f.taps)+len(f.hostTaps) > 0 {
		e := TapEvent{At: at, Link: l, ID: pkt.id, Datagram: &pkt.d, Verdict: v, Cause: cause}
		for _, tap := range f.taps {
			tap(&e)
		}
		for _, tap := range f.hostTaps {
			tap(l.owner, &e)
		}
	}
	if !f.cfg.Trace {
		return
	}
	h := f.trace
	code := uint64(v) + uint64(cause) // a drop's code includes its cause
	for _, v := range [4]uint64{uint64(at), uint64(l.id), pkt.id, code} {
		for i := 0; i < 8; i++ {
			h ^= v & 0xFF
			h *= fnvPrime
			v >>= 8
		}
	}
	f.trace = h
}
