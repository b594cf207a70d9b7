package netem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/clock/parallel"
	"github.com/mroce/mroce/link"
)

// Scheduler is the event loop a Fabric runs on: clock.Sim in virtual time.
type Scheduler interface {
	Now() clock.Time
	At(t clock.Time, ev clock.Event)
}

// Fabric is an emulated network: hosts with one NIC port per plane, and per
// plane a switch or a leaf-spine. Datagrams enter through a Host (a
// link.Port), cross their plane's links, and are pushed to the destination
// host's Receiver. A Fabric is driven by one goroutine: the one running its
// Scheduler.
type Fabric struct {
	cfg    Config
	hosts  []*Host
	links  []*Link
	planes []plane
	procs  []*proc
	group  *parallel.Group // nil: one process
	pfc    bool            // some link has PFC (no datagram's hop looks for it otherwise)

	freePFC []*pfcEvent
	// The pools' surplus, over processes (rebalance).
	sparePackets []*packet
	spareBufs    [][]byte
	spareHeaders [][]byte
	trace        uint64
	taps         []func(*TapEvent)
	hostTaps     []func(host int, e *TapEvent)
	planeWatch   []func(host, plane int, up bool)
	singleUp     []*Link // [host], single-port hosts only
	singleDown   []*Link
}

// proc is the part of a fabric one logical process of a parallel.Group owns
// (NewGrouped: a host, its NIC's uplinks and the switch ports that feed
// it), with its own pools and counters; a fabric on one Scheduler has one.
// A datagram crossing to another process's link is sent there a link
// delay ahead.
type proc struct {
	idx         int
	sched       Scheduler
	freeBufs    [][]byte
	freeHeaders [][]byte // HeaderBufferLen each
	freePackets []*packet
	nextPacket  uint64
	noRoute     uint64
	delivered   uint64
	planeDown   [maxPlanes]bool // as its hosts' NICs see each plane (PlaneDown, Repair)
}

// plane is one plane's links and state.
type plane struct {
	index     int
	uplinks   []*Link   // [host]
	downlinks []*Link   // [host]
	leafUp    [][]*Link // [leaf][spine], leaf-spine only
	spineDown [][]*Link // [spine][leaf]
	ecmpKey   uint64
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
		// One NIC port per host, in no plane: plane faults never touch it.
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
	f.scheduleFaults(cfg.Faults)
	return f, nil
}

// scheduleFaults schedules faults already validated: on every process,
// each applying the fault to the links it runs. Over processes, the links
// note the changes to come too (Link.changes).
func (f *Fabric) scheduleFaults(faults []Fault) {
	for _, ft := range faults {
		for _, p := range f.procs {
			p.sched.At(clock.Time(ft.At), &faultEvent{f, ft, p})
		}
		if s, ok := ft.Kind.linkState(); ok && f.group != nil {
			at := max(clock.Time(ft.At), f.group.Now())
			for _, l := range f.links {
				if l.plane == ft.Plane && l.matches(ft.Link) {
					i := sort.Search(len(l.changes), func(i int) bool { return l.changes[i].at > at }) // after those at the same time, as the events fire
					l.changes = slices.Insert(l.changes, i, stateChange{at, s})
				}
			}
		}
	}
}

func (f *Fabric) leafOf(host int) int {
	if f.cfg.HostsPerLeaf == 0 {
		return 0
	}
	return host / f.cfg.HostsPerLeaf
}

func (f *Fabric) newLink(lc LinkConfig, kind LinkKind, p, from, to int) *Link {
	l := &Link{
		fab: f, p: f.procs[0], id: len(f.links), kind: kind, plane: p, from: from, to: to, owner: -1, factor: 1, decided: -1,
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
	l.cfg, l.rate, l.delay = lc, lc.Rate, lc.Delay
	l.limit, l.ecnK, l.red = lc.Queue.Limit, lc.Queue.ECNThreshold, lc.Queue.RED
	im := &lc.Impair
	l.impaired = im.Loss != nil || im.Corrupt > 0 || im.Duplicate > 0
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

// ErrNotGrouped is NewGrouped's refusal of a configuration a fabric over
// processes cannot carry: the caller may build it on one clock instead.
var ErrNotGrouped = errors.New("netem: not a fabric over processes")

// NewGrouped builds a fabric whose hosts are the processes of g, one each
// (g.Len() == cfg.Hosts): host h's engine runs on g.LP(h), and so do its
// NIC's uplinks and the switch ports that feed it, so that a datagram
// crosses from one process to another on an uplink, a link delay (at least
// g's lookahead) after it left. A fault is played on every process, each
// changing the links it runs at the fault's time. One switch per plane, no
// PFC, no trace or taps but host taps: each would share state between
// processes.
func NewGrouped(cfg Config, g *parallel.Group) (*Fabric, error) {
	switch {
	case g.Len() != cfg.Hosts:
		return nil, fmt.Errorf("netem: %d processes for %d hosts", g.Len(), cfg.Hosts)
	case cfg.HostsPerLeaf > 0 || cfg.SinglePort || cfg.Trace:
		return nil, fmt.Errorf("%w: it has one switch per plane, no single-port hosts and no trace", ErrNotGrouped)
	}
	if err := cfg.validate(); err != nil { // the faults too: New is given none
		return nil, err
	}
	faults := cfg.Faults
	cfg.Faults = nil // scheduled once the processes are the hosts'
	f, err := New(cfg, g.LP(0))
	if err != nil {
		return nil, err
	}
	f.cfg.Faults = faults
	f.group = g
	g.Between(f.rebalance)
	f.procs = nil
	for h, host := range f.hosts {
		host.p = &proc{idx: h, sched: g.LP(h)}
		f.procs = append(f.procs, host.p)
	}
	for _, l := range f.links {
		switch {
		case l.pfc:
			return nil, fmt.Errorf("%w: it has no PFC", ErrNotGrouped)
		case l.kind == Uplink && l.cfg.Delay < g.Lookahead():
			return nil, fmt.Errorf("%w: uplink delay %v is shorter than the processes' lookahead %v", ErrNotGrouped, l.cfg.Delay, g.Lookahead())
		case l.kind == Uplink && l.cfg.Impair.Jitter > 0:
			return nil, fmt.Errorf("%w: it has no jitter on uplinks (a datagram could arrive sooner than the lookahead)", ErrNotGrouped)
		default:
			l.p = f.hosts[l.owner].p
		}
	}
	f.scheduleFaults(faults)
	return f, nil
}

// rebalance evens out the processes' pools between windows: datagrams are
// taken from the pool of the process that sends them and given back to
// that of the one they reach, so a process that receives more than it
// sends would keep what another has to make anew. A pool above
// poolHigh gives all but poolLow to the fabric's spare; one below poolLow
// takes from it up to poolLow (a window's worth of a host's sending, and
// more).
func (f *Fabric) rebalance() {
	for _, p := range f.procs {
		p.freePackets = balance(p.freePackets, &f.sparePackets)
		p.freeBufs = balance(p.freeBufs, &f.spareBufs)
		p.freeHeaders = balance(p.freeHeaders, &f.spareHeaders)
	}
}

const poolLow, poolHigh = 1024, 4096

func balance[T any](pool []T, spare *[]T) []T {
	switch n := len(pool); {
	case n > poolHigh:
		*spare = append(*spare, pool[poolLow:]...)
		clear(pool[poolLow:])
		return pool[:poolLow]
	case n < poolLow && len(*spare) > 0:
		k := min(poolLow-n, len(*spare))
		s := *spare
		pool = append(pool, s[len(s)-k:]...)
		clear(s[len(s)-k:])
		*spare = s[:len(s)-k]
	}
	return pool
}

// Config returns the fabric's configuration, defaults filled in.
func (f *Fabric) Config() Config { return f.cfg }

// Host returns host i, which is the link.Port of that host.
func (f *Fabric) Host(i int) *Host { return f.hosts[i] }

// Hosts is the number of hosts.
func (f *Fabric) Hosts() int { return len(f.hosts) }

// Links returns every link, indexed by Link.ID.
func (f *Fabric) Links() []*Link { return f.links }

// Uplink and Downlink return host h's links on plane p (with single-port
// hosts, its only links, whatever p).
func (f *Fabric) Uplink(p, h int) *Link {
	if f.cfg.SinglePort {
		return f.singleUp[h]
	}
	return f.planes[p].uplinks[h]
}

func (f *Fabric) Downlink(p, h int) *Link {
	if f.cfg.SinglePort {
		return f.singleDown[h]
	}
	return f.planes[p].downlinks[h]
}

// BytesTo returns, per plane, the bytes host h's downlinks have delivered
// to it: how a host's traffic spread over its NIC ports.
func (f *Fabric) BytesTo(h int) []uint64 {
	out := make([]uint64, len(f.planes))
	for p := range out {
		out[p] = f.Downlink(p, h).Stats().Bytes
	}
	return out
}

// FabricLink returns the leaf-to-spine (up) or spine-to-leaf link of plane p.
func (f *Fabric) FabricLink(p, leaf, spine int, up bool) *Link {
	if up {
		return f.planes[p].leafUp[leaf][spine]
	}
	return f.planes[p].spineDown[spine][leaf]
}

// PlaneUp reports whether plane p is up, as a host's NIC sees its port
// state: a PlaneDown fault takes it down, a blackhole does not. (Over
// processes, as host 0's sees it: between windows, every host's does.)
func (f *Fabric) PlaneUp(p int) bool { return !f.procs[0].planeDown[p] }

// Addr is host h's address on plane p: 10.p.(h/256).(h%256).
func Addr(plane, host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(plane), byte(host >> 8), byte(host)})
}

// locate maps an address to (plane, host) on this fabric. Single-port hosts
// have only their plane-0 address.
func (f *Fabric) locate(a netip.Addr) (plane, host int, ok bool) {
	if !a.Is4() {
		return 0, 0, false
	}
	b := a.As4()
	plane, host = int(b[1]), int(b[2])<<8|int(b[3])
	ok = b[0] == 10 && plane < len(f.planes) && host < len(f.hosts) && (plane == 0 || !f.cfg.SinglePort)
	return plane, host, ok
}

// Spine returns the spine that ECMP picks for a datagram from src to dst, or
// -1 when it turns at its leaf (or the addresses do not route).
func (f *Fabric) Spine(src, dst netip.AddrPort) int {
	_, s := f.Path(src, dst)
	return s
}

// Path returns the plane and spine a datagram from src to dst takes; spine
// is -1 when it turns at its leaf, and both are -1 when the addresses do not
// route. The plane is the source address's, or, with single-port hosts, the
// one the source leaf's hash picks.
func (f *Fabric) Path(src, dst netip.AddrPort) (plane, spine int) {
	p, sh, ok1 := f.locate(src.Addr())
	q, dh, ok2 := f.locate(dst.Addr())
	if !ok1 || !ok2 || p != q {
		return -1, -1
	}
	if f.cfg.HostsPerLeaf == 0 || f.leafOf(sh) == f.leafOf(dh) {
		return p, -1
	}
	return f.ecmp(p, f.leafOf(sh), src, dst)
}

// ecmp picks the plane and spine of a datagram leaving leaf: a hash of the
// 5-tuple (protocol UDP) keyed by the plane's key and the leaf's index, as a
// switch with a per-switch hash seed would. With single-port hosts the leaf
// hashes over the spines of every plane, so the hash picks the plane too.
func (f *Fabric) ecmp(p, leaf int, src, dst netip.AddrPort) (plane, spine int) {
	s, d := src.Addr().As4(), dst.Addr().As4()
	x := uint64(s[0])<<24 | uint64(s[1])<<16 | uint64(s[2])<<8 | uint64(s[3])
	y := uint64(d[0])<<24 | uint64(d[1])<<16 | uint64(d[2])<<8 | uint64(d[3])
	h := mix64(f.planes[p].ecmpKey ^ uint64(leaf))
	h = mix64(h ^ x<<32 ^ y)
	h = mix64(h ^ uint64(src.Port())<<32 ^ uint64(dst.Port())<<16 ^ 17)
	choices := uint64(f.cfg.Spines)
	if f.cfg.SinglePort {
		choices *= uint64(len(f.planes))
	}
	i := int((h >> 32) * choices >> 32)
	if f.cfg.SinglePort {
		return i / f.cfg.Spines, i % f.cfg.Spines
	}
	return p, i
}

// mix64 is a 64-bit finalizer (the one of SplitMix64): every input bit
// affects every output bit.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	return z ^ z>>31
}

// route fills pkt.route for a datagram from host sh to host dh on plane p.
func (f *Fabric) route(pkt *packet, p, sh, dh int) {
	pkt.route[0] = uint32(f.Uplink(p, sh).id)
	sl, dl := f.leafOf(sh), f.leafOf(dh)
	if f.cfg.HostsPerLeaf == 0 || sl == dl {
		pkt.route[1] = uint32(f.Downlink(p, dh).id)
		pkt.hops = 2
		return
	}
	p, s := f.ecmp(p, sl, pkt.d.Src, pkt.d.Dst)
	pl := &f.planes[p]
	pkt.route[1] = uint32(pl.leafUp[sl][s].id)
	pkt.route[2] = uint32(pl.spineDown[s][dl].id)
	pkt.route[3] = uint32(f.Downlink(p, dh).id)
	pkt.hops = 4
}

// NoRoute counts datagrams dropped at a host because their addresses name no
// host, or hosts on different planes.
func (f *Fabric) NoRoute() uint64 { return f.sum(func(p *proc) uint64 { return p.noRoute }) }

// Delivered counts datagrams pushed to receivers.
func (f *Fabric) Delivered() uint64 { return f.sum(func(p *proc) uint64 { return p.delivered }) }

// InFlight counts datagrams inside the fabric (queued, on the wire).
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

// TraceHash is the FNV-1a hash of every link event so far (time, link,
// packet, verdict), when Config.Trace is set: equal for two runs of one
// configuration and seed.
func (f *Fabric) TraceHash() uint64 { return f.trace }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// record is every link event: it feeds the trace hash and the taps.
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
	code := uint64(v) + uint64(cause) // a drop's code says its cause
	for _, v := range [4]uint64{uint64(at), uint64(l.id), pkt.id, code} {
		for i := 0; i < 8; i++ {
			h ^= v & 0xFF
			h *= fnvPrime
			v >>= 8
		}
	}
	f.trace = h
}

// Host is one host's NIC ports: the link.Port through which it sends, and
// the place its Receiver is attached.
type Host struct {
	fab  *Fabric
	id   int
	p    *proc
	recv link.Receiver
}

// ID is the host's index.
func (h *Host) ID() int { return h.id }

// Addr is the host's address on plane p.
func (h *Host) Addr(p int) netip.Addr { return Addr(p, h.id) }

// Attach sets the receiver datagrams for this host are pushed to. Without
// one, they are delivered and discarded.
func (h *Host) Attach(r link.Receiver) {
	h.recv = r
}

// Buffer returns an empty buffer with capacity Config.MaxDatagram.
func (h *Host) Buffer() []byte { return h.fab.buffer(h.p) }

// HeaderBuffer returns an empty buffer with capacity HeaderBufferLen, for
// a datagram whose payload is padding (link.Datagram.Pad) or a small
// control packet.
func (h *Host) HeaderBuffer() []byte { return h.p.headerBuffer() }

// HeaderBufferLen is the capacity of a header buffer.
func (h *Host) HeaderBufferLen() int { return HeaderBufferLen }

// HeaderBufferLen is the capacity of a host's header buffers: room for any
// header of a data packet, or an ACK of up to four records.
const HeaderBufferLen = 256

// Send injects datagrams from this host. Each Src must be one of this host's
// addresses; it picks the plane. Send takes ownership of every Data buffer.
// Datagrams larger than MaxDatagram, or with a source that is not this
// host's or a destination on another plane, are dropped and counted in
// NoRoute.
func (h *Host) Send(batch []link.Datagram) {
	f := h.fab
	for i := range batch {
		d := &batch[i]
		p, sh, ok1 := f.locate(d.Src.Addr())
		q, dh, ok2 := f.locate(d.Dst.Addr())
		if !ok1 || !ok2 || sh != h.id || p != q || d.Pad < 0 || int(d.Pad) > f.cfg.MaxDatagram-len(d.Data) {
			h.p.nextPacket++
			h.p.noRoute++
			f.recycle(h.p, d.Data)
			continue
		}
		pkt := f.newPacket(h.p)
		pkt.d = *d
		f.route(pkt, p, sh, dh)
		pkt.link(0).enqueue(pkt)
	}
}

func (f *Fabric) buffer(p *proc) []byte {
	if n := len(p.freeBufs); n > 0 {
		b := p.freeBufs[n-1]
		p.freeBufs = p.freeBufs[:n-1]
		return b[:0]
	}
	return make([]byte, 0, f.cfg.MaxDatagram)
}

func (p *proc) headerBuffer() []byte {
	if n := len(p.freeHeaders); n > 0 {
		b := p.freeHeaders[n-1]
		p.freeHeaders = p.freeHeaders[:n-1]
		return b[:0]
	}
	return make([]byte, 0, HeaderBufferLen)
}

func (f *Fabric) recycle(p *proc, b []byte) {
	switch {
	case cap(b) >= f.cfg.MaxDatagram:
		p.freeBufs = append(p.freeBufs, b[:0])
	case cap(b) == HeaderBufferLen:
		p.freeHeaders = append(p.freeHeaders, b[:0])
	}
}

// packet is a datagram inside the fabric. It is its own arrival event.
//
// What a hop reads (the route, the datagram's size and mark) is its first
// cache line, the route as the links' ids rather than pointers so that
// the datagram's first fields fit beside it (see link.Datagram): a large
// run has tens of thousands of packets in flight, and each one's arrival
// is the first touch of it in a while (TestPacketHopLine). The addresses,
// read at the ends, are the next line.
type packet struct {
	fab       *Fabric
	route     [4]uint32 // the links' ids (Fabric.links)
	ingress   uint32    // 1 + the id of the link it arrived on at its current node, for PFC; 0: none
	hops, hop uint8     // hop: index in route of the link it is on, or arriving from
	// crossed: it arrives in another process than its link's, which
	// decided when it left that the link would not fail under it.
	crossed bool
	d       link.Datagram
	id      uint64
	// 192 bytes in all: Go's allocation class of that size starts every
	// object on a cache line (136 bytes would straddle them).
	_ [56]byte
}

// link is the link of route[hop].
func (pkt *packet) link(hop uint8) *Link { return pkt.fab.links[pkt.route[hop]] }

// pausable is the link the packet arrived on at its current node when the
// node may pause it (PFC), else nil. In a fabric without PFC it reads no
// link: a datagram's every hop asks.
func (pkt *packet) pausable() *Link {
	if !pkt.fab.pfc || pkt.ingress == 0 {
		return nil
	}
	if in := pkt.fab.links[pkt.ingress-1]; in.pfc {
		return in
	}
	return nil
}

func (f *Fabric) newPacket(p *proc) *packet {
	var pkt *packet
	if n := len(p.freePackets); n > 0 {
		pkt = p.freePackets[n-1]
		p.freePackets = p.freePackets[:n-1]
	} else {
		pkt = &packet{fab: f}
	}
	p.nextPacket++
	pkt.id = uint64(p.idx)<<40 | p.nextPacket
	pkt.hop = 0
	pkt.ingress = 0
	pkt.crossed = false
	return pkt
}

func (f *Fabric) freePacket(p *proc, pkt *packet) {
	f.recycle(p, pkt.d.Data)
	pkt.d = link.Datagram{}
	p.freePackets = append(p.freePackets, pkt)
}

// clone copies a packet for duplication: its own buffer, its own id.
func (f *Fabric) clone(p *proc, pkt *packet) *packet {
	c := f.newPacket(p)
	id := c.id
	*c = *pkt
	c.id = id
	buf := f.buffer(p)
	if cap(pkt.d.Data) == HeaderBufferLen {
		buf = p.headerBuffer()
	}
	c.d.Data = append(buf, pkt.d.Data...)
	return c
}

// next is the process the packet arrives in at the far end of route[hop]:
// the next link's, or the destination host's.
func (pkt *packet) next() *proc {
	if pkt.hop+1 < pkt.hops {
		return pkt.link(pkt.hop + 1).p
	}
	return pkt.fab.hosts[pkt.link(pkt.hop).to].p
}

// Fire is the packet's arrival at the far end of route[hop].
func (pkt *packet) Fire() {
	f := pkt.fab
	from := pkt.link(pkt.hop)
	if pkt.crossed {
		pkt.crossed = false // from is another process's: not to be read here
	} else if from.dropIfFailed(pkt) { // the link failed while the datagram was on its wire
		return
	}
	pkt.hop++
	if pkt.hop == pkt.hops {
		h := f.hosts[from.to]
		now := h.p.sched.Now()
		f.record(from, pkt, Delivered, 0, now)
		h.p.delivered++
		if h.recv != nil {
			h.recv.Receive(&pkt.d, now)
		}
		f.freePacket(h.p, pkt)
		return
	}
	pkt.ingress = uint32(from.id) + 1
	pkt.link(pkt.hop).enqueue(pkt)
}

// faultEvent plays one scheduled fault on one process.
type faultEvent struct {
	fab   *Fabric
	fault Fault
	p     *proc
}

func (e *faultEvent) Fire() { e.fab.apply(e.fault, e.p) }

// apply changes, for a fault, the state of the links process p runs and of
// the plane as its hosts see it.
func (f *Fabric) apply(ft Fault, p *proc) {
	down := &p.planeDown[ft.Plane]
	wasDown := *down
	switch ft.Kind {
	case PlaneDown:
		*down = true
	case Repair:
		if ft.Link == nil {
			*down = false
		}
	}
	if *down != wasDown {
		defer f.notifyPlane(p, ft.Plane, !*down)
	}
	for _, l := range f.links {
		if l.p != p || l.plane != ft.Plane || !l.matches(ft.Link) {
			continue
		}
		switch ft.Kind {
		case PlaneDown:
			l.setState(linkDown)
		case PlaneBlackhole:
			l.setState(linkBlackhole)
		case LinkSlowdown:
			l.factor = ft.Factor
			l.rate = max(1, int64(float64(l.cfg.Rate)*ft.Factor))
		case Repair:
			l.setState(linkUp)
			l.factor = 1
			l.rate = l.cfg.Rate
		}
	}
}

// OnPlaneChange calls fn for every host, in host order, when a plane goes
// down or comes back (PlaneDown, Repair): what the host's NIC sees as its
// port's link state. Over processes it is called on the host's process.
// A blackholed plane does not look down, so fn is not called for it.
func (f *Fabric) OnPlaneChange(fn func(host, plane int, up bool)) {
	f.planeWatch = append(f.planeWatch, fn)
}

// notifyPlane tells the hosts of process p.
func (f *Fabric) notifyPlane(p *proc, plane int, up bool) {
	for _, fn := range f.planeWatch {
		for _, h := range f.hosts {
			if h.p == p {
				fn(h.id, plane, up)
			}
		}
	}
}

// After runs fn at time at (now if in the past) on the fabric's
// goroutine, in order with the fabric's own events: to look at the
// fabric when a fault takes effect, say.
func (f *Fabric) After(at time.Duration, fn func()) {
	if f.group != nil {
		panic("netem: After on a fabric over processes: on which?")
	}
	f.procs[0].sched.At(clock.Time(at), clock.Func(fn))
}

// ScheduleFault adds a fault at time at (now if in the past). Over
// processes, call it between windows, and for a time after the datagrams
// on the wires of the uplinks it changes arrive (at most a datagram's
// serialization, a link delay and a reorder gap ahead): each decided when
// it left whether it would arrive (FaultLeadTime).
func (f *Fabric) ScheduleFault(at time.Duration, ft Fault) error {
	ft.At = at
	if err := ft.validate(&f.cfg); err != nil {
		return fmt.Errorf("netem: %w", err)
	}
	if f.group != nil {
		if first := f.FaultLeadTime(ft); at < first {
			return fmt.Errorf("netem: a fault at %v over processes: the datagrams on the wires of its uplinks arrive until %v", at, first)
		}
	}
	f.scheduleFaults([]Fault{ft})
	return nil
}

// FaultLeadTime is, over processes and between windows, the earliest time
// ScheduleFault takes ft for: after every datagram on the wire of an uplink
// whose state it changes has arrived. On one clock, or for a slowdown, it
// is now.
func (f *Fabric) FaultLeadTime(ft Fault) time.Duration {
	if f.group == nil {
		return time.Duration(f.procs[0].sched.Now())
	}
	first := f.group.Now()
	if _, changes := ft.Kind.linkState(); !changes {
		return time.Duration(first)
	}
	for _, l := range f.links {
		if l.kind == Uplink && l.plane == ft.Plane && l.matches(ft.Link) {
			first = max(first, l.decided+1)
		}
	}
	return time.Duration(first)
}
