package engine

import (
	"errors"
	"net/netip"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

var errNoRemote = errors.New("engine: no remote address")

// Conn is one connection. It runs the handshake, and holds the send side
// (sender) and the receive side (receiver) of the connection's two
// directions (spec section 6.1).
type Conn struct {
	// What every packet the connection sends or receives reads comes
	// first. The handshake's and the application's fields come after.
	ep       *Endpoint
	state    ConnState
	localID  uint32 // the DstConnID the peer sends to
	peerID   uint32 // the DstConnID this side sends to
	peerPort uint16 // the peer's ReplyPort
	// The peer's addresses, one per plane, invalid until known. Bit p of
	// known is set when remote[p] is known, for the planes 0 to 63 (see
	// knows).
	known  uint64
	remote []netip.Addr
	tp     transport // multipath, or baseline (spec section 10)
	pd     *memreg.Domain
	scope  *memreg.Scope // what the peer's keys reach: the domain's regions and the connection's own
	// The authenticated mode (auth.go). session holds the keys once the
	// handshake made them; initiation and response are the two halves of
	// the handshake; accepted is the AuthAccept an initiator took.
	session    *auth.Session
	initiation *auth.Initiation
	response   *auth.Response
	accepted   [acceptImageLen]byte // an initiator's ACCEPT taken, but its Timestamp
	// heardProtected is set once a packet of the peer's has opened: the
	// peer is established.
	heardProtected bool
	maxPacket      int        // negotiated at the handshake (spec section 8.2), as are paths, streams and readsOut
	sendMax        int        // the largest packet this side sends now: maxPacket, or what the path MTU search has shown (pmtu.go)
	mtu            *mtuSearch // nil when nothing is searched
	paths          int
	streams        int
	readsOut       int  // READs this side may have outstanding
	credits        bool // both sides offered CREDITS: ACKs name receive limits, and sends keep within them (spec section 6.5)
	recut          bool // both sides offered RECUT: a resend may be cut smaller when the path MTU falls (spec section 6.7)
	atomics        bool // both sides offered ATOMICS: either may send FETCH_ADD and CMP_SWAP (spec section 5.12)
	ackTimer       clock.Timer
	progress       clock.Timer // fires after Config.NoProgress without progress while work is outstanding
	heard          clock.Time  // when the last packet from the peer arrived

	// The two directions.
	snd sender
	rcv receiver

	// Identity, and what the application sees.
	initiator bool
	acceptKey acceptKey // how the acceptor recognizes a resent CONNECT (spec section 8.1)
	events    Events
	err       error // why the connection closed

	// The rest of what the handshake negotiated (spec section 8.2).
	mode       proto.Mode
	peerWindow int    // DSNs the peer accepts beyond its cumulative DSN
	isn, idsn  uint32 // this side's initial PSN and DSN
	peerISN    uint32
	peerIDSN   uint32

	// The timers of liveness and of the handshake.
	alive      clock.Timer // sends keep-alives and declares a silent peer dead (spec section 8.6)
	hsTimer    clock.Timer // resends the CONNECT or ACCEPT until hsDeadline
	hsInterval time.Duration
	hsDeadline clock.Time
	hsPlane    int        // where the next CONNECT goes, or where the last CONNECT came from (spec section 8.1)
	hsReply    netip.Addr // the acceptor's: the source of the last CONNECT, where its ACCEPT goes
	// The acceptor's: the first CONNECT's source and plane, whose resends
	// are answered before any token is looked at (spec section 8.1).
	acceptedFrom netip.Addr
	acceptedOn   int
	token        *[proto.TokenLen]byte // the last RETRY's token, which the CONNECT carries on tokenPlane (spec section 8.1)
	tokenPlane   int                   // the plane the last RETRY came on, whose address its token is bound to
	hsStay       bool                  // the next resend stays on hsPlane, the plane of a RETRY just taken
	retries      int                   // RETRYs taken in this connect attempt
	hsSends      int                   // CONNECTs or ACCEPTs sent
	hsSentAt     clock.Time            // when the last of them went
	hsRTT        time.Duration         // the handshake's round trip, when one CONNECT or ACCEPT was sent, or else the round trip timeRoundTrip's keep-alive timed
	hsStamp      uint32                // the Timestamp of the last of them
	rttProbe     uint32                // the Timestamp of timeRoundTrip's keep-alive, while its reply is awaited
	rttProbing   bool                  // timeRoundTrip's keep-alive awaits its reply
	// hsOneWay is a reading of the one-way delay toward the peer on
	// hsOneWayPlane, taken at the handshake before any data
	// (handshakeDelay); hsOneWayOK while it waits for the sender to take it.
	hsOneWay      uint32
	hsOneWayPlane int
	hsOneWayOK    bool
}

// ID is the connection's local id, the DstConnID its peer sends to.
func (c *Conn) ID() uint32 { return c.localID }

// RemoteAddr is the peer's address on plane p, or the zero Addr while it
// is not known.
func (c *Conn) RemoteAddr(p int) netip.Addr {
	if p < 0 || p >= len(c.remote) {
		return netip.Addr{}
	}
	return c.remote[p]
}

// RemotePort is the peer's UDP port, where every packet to it goes.
func (c *Conn) RemotePort() uint16 { return c.peerPort }

// knows reports whether the peer's address on plane p is known. Every
// packet sent or received asks. For the first 64 planes a bit answers,
// without reading the addresses.
func (c *Conn) knows(p int) bool {
	if p < 64 {
		return c.known&(1<<p) != 0
	}
	return c.remote[p].IsValid()
}

// setRemote sets the peer's address on plane p.
func (c *Conn) setRemote(p int, a netip.Addr) {
	c.remote[p] = a
	if p < 64 {
		c.known &^= 1 << p
		if a.IsValid() {
			c.known |= 1 << p
		}
	}
	if c.mtu != nil {
		c.resize() // the plane's packets must fit it (spec section 6.7)
		c.probeMTUs()
	}
}

// sharedPlane finds the plane of a packet from src that arrived on a
// local address several planes share, as loopback planes do when the
// system picks 127.0.0.1 for each. The local address then names the first
// of them, and the peer's address tells them apart: the plane whose peer
// address is src, or else the first of them whose peer address is not
// known yet, which learns it (spec section 8.1). It returns -1 when there
// is neither.
func (c *Conn) sharedPlane(plane int, src netip.Addr) int {
	local := c.ep.cfg.Planes[plane]
	unknown := -1
	for p, a := range c.ep.cfg.Planes {
		switch {
		case a != local || p == plane:
		case c.knows(p) && c.remote[p] == src:
			return p
		case !c.knows(p) && unknown < 0:
			unknown = p
		}
	}
	if unknown >= 0 {
		c.setRemote(unknown, src)
	}
	return unknown
}

// PeerID is the peer's id for this connection.
func (c *Conn) PeerID() uint32 { return c.peerID }

// State is the connection's state.
func (c *Conn) State() ConnState { return c.state }

// Err is why the connection closed, or nil.
func (c *Conn) Err() error { return c.err }

// Paths and Streams are the negotiated counts.
func (c *Conn) Paths() int   { return c.paths }
func (c *Conn) Streams() int { return c.streams }

// MaxPacket is the negotiated largest packet.
func (c *Conn) MaxPacket() int { return c.maxPacket }

// Initial is this side's InitialPSN and InitialDSN, as its CONNECT or
// ACCEPT carried them (spec section 8.1).
func (c *Conn) Initial() (psn, dsn uint32) { return c.isn, c.idsn }

// PeerInitial is the peer's InitialPSN and InitialDSN, 0 until its CONNECT
// or ACCEPT has arrived (spec section 8.1).
func (c *Conn) PeerInitial() (psn, dsn uint32) { return c.peerISN, c.peerIDSN }

// Domain is the connection's protection domain.
func (c *Conn) Domain() *memreg.Domain { return c.pd }

// Scope is the connection's own part of its domain. A region registered
// through it is reached by this connection's peer alone (docs/spec.md
// section 5.1).
func (c *Conn) Scope() *memreg.Scope { return c.scope }

// Atomics reports whether both sides offered ATOMICS, so that either may
// post FETCH_ADD and CMP_SWAP (spec section 8.3).
func (c *Conn) Atomics() bool { return c.atomics }

// build lays out a packet of type t in a fresh buffer from the port. When
// the port pads (see paddingPort), a placeholder payload is left out and
// the packet takes a header buffer, as does any other packet that fits one.
func (c *Conn) build(pkt *proto.Packet, t proto.Type, records, payload int) {
	var err error
	hlen, _ := proto.HeaderLen(t, records)
	switch pp := c.ep.padPort; {
	case pp != nil && payload > 0 && t.HasPayload(): // not a CONNECT's token, which must travel
		buf := pp.HeaderBuffer()
		err = proto.BuildPlaceholder(pkt, buf[:cap(buf)], t, payload)
	case pp != nil && hlen+payload+proto.TrailerLen <= pp.HeaderBufferLen():
		buf := pp.HeaderBuffer()
		err = proto.Build(pkt, buf[:cap(buf)], t, records, payload)
	case c.protects(t):
		buf := c.ep.port.Buffer()
		err = proto.BuildProtected(pkt, buf[:cap(buf)], t, records, payload)
	default:
		buf := c.ep.port.Buffer()
		err = proto.Build(pkt, buf[:cap(buf)], t, records, payload)
	}
	if err != nil {
		panic("engine: building a packet: " + err.Error()) // the sizes are ours, so this is a bug
	}
	pkt.Common.SetTimestamp(uint32(c.ep.clock.Now()))
}

// emit seals a packet and queues it on plane from source port srcPort.
func (c *Conn) emit(pkt *proto.Packet, plane int, srcPort uint16) {
	c.emitTo(pkt, plane, srcPort, c.remote[plane])
}

// emitTo is emit to the peer's address dst on plane, which an ACCEPT
// answering a CONNECT on a plane not yet known needs (sendHandshake).
func (c *Conn) emitTo(pkt *proto.Packet, plane int, srcPort uint16, dst netip.Addr) {
	data := c.seal(pkt)
	if data == nil {
		return
	}
	t := pkt.Type()
	ecn := link.NotECT
	if t.IsData() {
		ecn = link.ECT0
	}
	c.ep.send(link.Datagram{
		Src:  netip.AddrPortFrom(c.ep.cfg.Planes[plane], srcPort),
		Dst:  netip.AddrPortFrom(dst, c.peerPort),
		ECN:  ecn,
		DSCP: proto.DefaultDSCP(t),
		Data: data,
		Pad:  int32(pkt.Pad()),
	})
}

// receive handles a decoded packet for this connection, from step 7 of spec
// section 9 on.
func (c *Conn) receive(pkt *proto.Packet, d *link.Datagram, plane int, at clock.Time) {
	if c.state == Closed {
		return
	}
	if c.ep.authed() && !pkt.Common.Protected() {
		if !c.takesClear(pkt.Type()) {
			c.ep.stats.Unprotected++ // anyone on the path could have made it (spec section 13.3)
			return
		}
		// An ACCEPT's key exchange is checked before the ACCEPT teaches an
		// address or counts as hearing from the peer. Once established, a
		// repeat teaches and counts nothing (spec section 13.3).
		if pkt.Type() == proto.TypeAccept && (!c.finishAccept(pkt) || c.state != Connecting) {
			if c.state == Established {
				c.answerAccept()
			}
			return
		}
	}
	if pkt.Type() == proto.TypeRetry {
		c.onRetry(pkt, d, plane) // it teaches no address
		return
	}
	switch {
	case !c.knows(plane):
		c.setRemote(plane, d.Src.Addr()) // learn the peer's address on this plane (spec section 8.1)
	case d.Src.Addr() != c.remote[plane]:
		if p := c.sharedPlane(plane, d.Src.Addr()); p >= 0 {
			plane = p
			break
		}
		// The peer's address on a plane does not change; its source ports
		// may. A packet from another address is not the peer's (spec
		// section 9, step 7).
		c.ep.stats.WrongSource++
		return
	}
	if c.fresh(pkt) {
		c.snd.hear(c.heard, at)
		c.heard = at
	}
	switch t := pkt.Type(); {
	case t == proto.TypeAccept:
		c.onAccept(pkt, plane)
		return
	case t == proto.TypeClose:
		c.onClose(pkt, plane)
		return
	case c.state == Connecting:
		return // nothing else is valid before the ACCEPT
	case c.state == Accepting:
		c.handshakeDelay(pkt.Common.Timestamp())
		c.establish()
	}
	switch t := pkt.Type(); {
	case t.IsData():
		c.rcv.onData(pkt, d, plane, at)
	case t == proto.TypeAck:
		c.snd.onAck(pkt, at)
	case t == proto.TypeNack:
		c.snd.onNack(pkt)
	case t == proto.TypeProbe:
		c.rcv.onProbe(pkt, d, plane, at)
	case t == proto.TypeProbeReply:
		c.snd.onProbeReply(pkt, at)
	case t == proto.TypeCNP:
		c.tp.cnp(&c.snd, at)
	default:
		c.ep.stats.Malformed++
	}
}

// Post queues a WRITE, WRITE_IMM or SEND. On a connection that has ended
// it returns why it ended.
func (c *Conn) Post(wr SendWR) error {
	if c.state != Established {
		if c.state == Closed {
			return ended(c.err)
		}
		return ErrNotReady
	}
	if err := c.snd.post(wr); err != nil {
		return err
	}
	c.snd.pump()
	c.madeProgress(false)
	c.ep.flush()
	return nil
}

// PostRecv posts a receive buffer on a stream. An accepted connection may
// post receives before it is established, once its accept callback has
// returned. On a connection that has ended it returns why it ended.
func (c *Conn) PostRecv(wr RecvWR) error {
	switch c.state {
	case Closed:
		return ended(c.err)
	case Connecting:
		return ErrNotReady
	}
	return c.rcv.postRecv(wr)
}
