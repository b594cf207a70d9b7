package engine

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"net/netip"
	"slices"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

// Endpoint is one host's transport. It holds the host's connections, the
// port their packets go through, and the clock their timers run on. It is
// the link.Receiver of its port.
type Endpoint struct {
	// What the endpoint runs on.
	cfg     Config
	clock   clock.Clock
	sched   clock.Scheduler // the clock, when it knows how late its host runs it; nil in virtual time
	port    link.Port
	padPort paddingPort // the port, when placeholder payloads travel as its padding
	random  io.Reader
	tracer  Tracer // Config.Tracer

	// Connections. Recently closed ones stay quarantined, by id in closed
	// and by their CONNECT in closedKey (spec section 8.5).
	conns     map[uint32]*Conn           // by local connection id
	dropper   *Conn                      // the connection of the last datagram the host dropped (LocalDrop)
	nextPlane int                        // where in its known planes the next connection's paths are dealt from (dealtPlanes, dealByRate)
	dealPass  []float64                  // by plane, where dealByRate has dealt to: a path advances it by the fastest port's rate over the plane's
	dealtAt   float64                    // the pass of the last path dealByRate dealt
	drain     hostRate                   // the rate this endpoint drains its receive buffer at, learned from its overflows (localdrop.go)
	marks     inboundMarks               // the share of arrivals CE-marked, and what the hints hold back for it (inbound.go)
	listener  func(*Conn) (Events, bool) // nil when not listening
	listenPD  *memreg.Domain
	accepted  map[acceptKey]*Conn // CONNECTs answered, by the initiator's id and initial sequence numbers
	accepting int                 // connections accepted and not yet established
	closed    map[uint32]*closedConn
	closedKey map[acceptKey]clock.Time

	// Address validation (spec section 8.1): the HMAC-SHA256 of tokens,
	// under a secret drawn when the first token is made and again every
	// tokenKeyLife (renewTokenKey), the one before, and a sum.
	mac      hash.Hash
	macPrev  hash.Hash
	macDrawn clock.Time
	macSum   [sha256.Size]byte

	// Rate allocation among this endpoint's connections.
	alloc    *cc.Allocator // shares InboundCapacity among the senders to this endpoint; nil when unknown
	outAlloc *cc.Allocator // shares OutboundCapacity among this endpoint's senders; nil when not set
	ports    *nicPorts     // what each plane's port has to send, and its own queue's limit
	// marking is set for a plane once any connection's path on it saw a CE
	// mark. Its queues mark, and marks are the finer signal: its paths
	// take no delay signal (docs/cc.md, "Where no queue marks").
	marking []bool
	// down is set for a plane whose port the host sees down (SetPlaneUp).
	down []bool

	batch  []link.Datagram // datagrams queued for the port
	opened []byte          // the last protected packet opened (auth.go)
	// ownOpened holds a packet of this endpoint's that its host handed
	// back (TooBig, LocalDrop), opened: the port may hand one back while a
	// received packet in opened is being handled.
	ownOpened []byte
	stats     EndpointStats
}

// NewEndpoint makes an endpoint sending through port on clk. Attach it to
// the port as its receiver.
func NewEndpoint(cfg Config, clk clock.Clock, port link.Port) (*Endpoint, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	// Every packet is laid out in a buffer from the port, so a packet
	// larger than the port's buffers could never be built.
	if room := cap(port.Buffer()); cfg.MaxPacket > room {
		return nil, fmt.Errorf("engine: max packet %d: the port's datagrams hold at most %d bytes; lower MaxPacket or raise the port's MaxDatagram", cfg.MaxPacket, room)
	}
	r := cfg.Random
	if r == nil {
		r = rand.Reader
	}
	e := &Endpoint{
		cfg: cfg, clock: clk, port: port, random: r, tracer: cfg.Tracer,
		conns: map[uint32]*Conn{}, accepted: map[acceptKey]*Conn{},
		closed: map[uint32]*closedConn{}, closedKey: map[acceptKey]clock.Time{},
	}
	if pp, ok := port.(paddingPort); ok && cfg.PlaceholderPayloads {
		e.padPort = pp
	}
	e.sched, _ = clk.(clock.Scheduler)
	e.drain.lift()
	if cfg.InboundCapacity > 0 && !cfg.NoRateHints {
		e.alloc = cc.NewAllocator(cc.AllocParams{Capacity: cfg.InboundCapacity, Horizon: cfg.HintHorizon})
	}
	if cfg.OutboundCapacity > 0 {
		// Connections join the allocation with their first packet and leave
		// when they have nothing more to send, or close. A connection paced
		// far below the level must not be forgotten between two of its
		// packets, hence the long quiet time.
		e.outAlloc = cc.NewAllocator(cc.AllocParams{Capacity: cfg.OutboundCapacity, Horizon: cfg.HintHorizon,
			Quiet: 50 * cfg.HintHorizon})
	}
	e.ports = newNICPorts(len(cfg.Planes), cfg.PortRates, cfg.MaxPacket)
	e.marking = make([]bool, len(cfg.Planes))
	e.down = make([]bool, len(cfg.Planes))
	return e, nil
}

// Config returns the endpoint's configuration with defaults filled in.
func (e *Endpoint) Config() Config { return e.cfg }

// Listen accepts connections. For each CONNECT, accept decides whether to
// take it and returns the Events of the new connection. Connections use pd.
func (e *Endpoint) Listen(pd *memreg.Domain, accept func(*Conn) (Events, bool)) {
	e.listener, e.listenPD = accept, pd
}

func (e *Endpoint) random32() uint32 {
	var b [4]byte
	if _, err := io.ReadFull(e.random, b[:]); err != nil {
		panic("engine: random source failed: " + err.Error())
	}
	return binary.LittleEndian.Uint32(b[:])
}

// newConnID draws a connection id that is not 0, not in use and not
// quarantined.
func (e *Endpoint) newConnID() uint32 {
	for {
		id := e.random32()
		_, used := e.conns[id]
		_, closed := e.closed[id]
		if id != 0 && !used && !closed {
			return id
		}
	}
}

// planeOf returns the index of a local address among the planes, or -1.
func (e *Endpoint) planeOf(a netip.Addr) int {
	for i, p := range e.cfg.Planes {
		if p == a {
			return i
		}
	}
	return -1
}

// Receive is the entry of every datagram for this endpoint.
func (e *Endpoint) Receive(d *link.Datagram, at clock.Time) {
	e.drained(at, d.Size())
	var pkt proto.Packet
	var err error
	if len(d.Data) >= proto.MinPacketLen && proto.CommonHeader(d.Data).Protected() && d.Pad == 0 {
		err = e.open(&pkt, d, at)
	} else {
		err = e.decode(&pkt, d)
	}
	if err != nil {
		if perr, ok := err.(proto.Error); ok {
			e.stats.Decode[perr]++
		}
		return
	}
	plane := e.planeOf(d.Dst.Addr())
	if plane < 0 {
		plane = 0
	}
	if pkt.Type() == proto.TypeConnect {
		e.onConnect(&pkt, d, plane)
		e.flush()
		return
	}
	c := e.conns[pkt.Common.DstConnID()]
	if c == nil {
		if cc := e.closed[pkt.Common.DstConnID()]; cc != nil && e.clock.Now() < cc.expires {
			e.onClosedConn(cc, &pkt, plane)
			e.flush()
			return
		}
		e.stats.UnknownConn++
		return
	}
	c.receive(&pkt, d, plane, at)
	e.flush()
}

// decode parses and checks a datagram's packet the way this endpoint's
// packets are sealed (see seal).
func (e *Endpoint) decode(pkt *proto.Packet, d *link.Datagram) error {
	switch {
	case d.Pad != 0 && e.cfg.PlaceholderPayloads:
		return pkt.DecodePlaceholder(d.Data, int(d.Pad)) // a placeholder, whose datagram is padded
	case d.Pad != 0:
		return proto.ErrTruncated // the bytes are not there
	case e.cfg.PlaceholderPayloads:
		// A simulation's packets without padding carry no CRC. Nothing in
		// such a simulation flips their bits (spec section 5.11).
		return pkt.DecodeNoCRC(d.Data)
	}
	return pkt.Decode(d.Data)
}

// seal finishes a packet with its CRC. A packet of an endpoint with
// placeholder payloads carries none (see Config.PlaceholderPayloads).
func (e *Endpoint) seal(pkt *proto.Packet) []byte {
	if e.cfg.PlaceholderPayloads {
		return pkt.Unsealed()
	}
	return pkt.Seal()
}

// TooBig is called by the port when a datagram this endpoint sent did not
// fit its path. The kernel refused it as larger than the path MTU, because
// DF is set (see link.TooBigHandler). A PROBE of the path MTU search
// (spec section 6.7) has found a size too big, at once. Any other packet
// shows that the plane's MTU fell below what it carried before: with
// RECUT negotiated, new packets are cut to fit and a data packet is resent
// cut smaller (mtuFell). Without it resending would never help, since a
// packet's size is fixed when it is cut, so the connection fails with a
// PathMTUError that names the path and the sizes.
func (e *Endpoint) TooBig(d *link.Datagram) {
	var pkt proto.Packet
	if err := e.decodeOwn(&pkt, d); err != nil {
		return // not one of ours
	}
	for _, id := range e.connIDs() { // a refusal is rare, and the sorted walk keeps failures in order
		c := e.conns[id]
		if !c.sent(&pkt, d) {
			continue
		}
		if pkt.Type() == proto.TypeProbe && isMTUProbe(pkt.Probe().ProbeID()) {
			c.mtuProbeTooBig(pkt.Probe().ProbeID())
			continue
		}
		if c.mtuFell(e.planeOf(d.Src.Addr()), d.Size()) {
			if pkt.Type().IsData() {
				c.snd.tooBig(&pkt)
			}
			continue
		}
		c.fail(&PathMTUError{Src: d.Src, Dst: d.Dst, Size: d.Size(), MaxPacket: c.sendMax}, StatusFlushed, true)
	}
	e.flush()
}

// sent reports whether the connection could have sent pkt as datagram d:
// it is addressed to the peer, from one of the connection's planes to the
// peer's address there.
func (c *Conn) sent(pkt *proto.Packet, d *link.Datagram) bool {
	if c.state == Closed || c.peerID != pkt.Common.DstConnID() || c.peerPort != d.Dst.Port() {
		return false
	}
	plane := c.ep.planeOf(d.Src.Addr())
	return plane >= 0 && plane < len(c.remote) && c.remote[plane] == d.Dst.Addr()
}

// send queues one datagram, and flush hands the queue to the port.
// Everything a call into the engine sends goes out in batches of up to 64.
// A port that holds its sends until the end of its loop's turn, like the
// UDP driver, joins the batches of many calls.
func (e *Endpoint) send(d link.Datagram) {
	e.batch = append(e.batch, d)
	if len(e.batch) >= 64 {
		e.flush()
	}
}

func (e *Endpoint) flush() {
	if len(e.batch) == 0 {
		return
	}
	e.port.Send(e.batch)
	clear(e.batch)
	e.batch = e.batch[:0]
}

// connIDs lists the connection ids in order, so that whatever is done to
// every connection is done in the same order in every run.
func (e *Endpoint) connIDs() []uint32 {
	ids := make([]uint32, 0, len(e.conns))
	for id := range e.conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Connect starts a connection to the peer whose plane addresses are remote,
// one per plane in plane order, and which listens on port. The handshake
// runs in the background. ev.State reports Established or the failure.
func (e *Endpoint) Connect(remote []netip.Addr, port uint16, pd *memreg.Domain, ev Events) (*Conn, error) {
	if len(remote) == 0 {
		return nil, errNoRemote
	}
	for i := 0; i < len(e.cfg.Planes) && i < len(remote); i++ {
		if r := remote[i]; r.IsValid() && r.Unmap().Is4() != e.cfg.Planes[i].Unmap().Is4() {
			return nil, fmt.Errorf("engine: plane %d: remote %v and local %v are of different IP families", i, r, e.cfg.Planes[i])
		}
	}
	c := e.newConn(pd, ev, true)
	for i := 0; i < len(e.cfg.Planes) && i < len(remote); i++ {
		c.setRemote(i, remote[i])
	}
	c.peerPort = port
	c.startHandshake()
	e.flush()
	return c, nil
}

func (e *Endpoint) newConn(pd *memreg.Domain, ev Events, initiator bool) *Conn {
	c := &Conn{
		ep: e, pd: pd, scope: pd.NewScope(), events: ev, initiator: initiator, tp: multipath{},
		localID: e.newConnID(),
		remote:  make([]netip.Addr, len(e.cfg.Planes)),
		isn:     e.random32(), idsn: e.random32(),
	}
	e.conns[c.localID] = c
	c.progress = e.clock.NewTimer(c.onNoProgress)
	c.alive = e.clock.NewTimer(c.onAlive)
	c.ackTimer = e.clock.NewTimer(c.onAckTimer)
	c.hsTimer = e.clock.NewTimer(c.onHandshakeTimer)
	return c
}

// Quiet reports whether the endpoint has nothing to do but keep its
// connections alive: no handshake under way, no connection with work
// outstanding, no CLOSE being resent. In virtual time a world of quiet
// endpoints only exchanges keep-alives (spec section 8.6), so whatever a
// caller still waits for will not happen.
func (e *Endpoint) Quiet() bool {
	for _, c := range e.conns {
		if c.state != Established || c.snd.busy() {
			return false
		}
	}
	for _, cc := range e.closed {
		if !cc.done {
			return false
		}
	}
	return true
}
