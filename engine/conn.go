package engine

import (
	"errors"
	"net/netip"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

var errNoRemote = errors.New("engine: no remote address")

// Conn is one connection: its handshake, its send side (sender) and its
// receive side (receiver).
type Conn struct {
	// What the packets read, first: every one the connection sends or
	// receives reads some of these fields, its sender's or its receiver's,
	// and with thousands of connections each cache line of them is one to
	// fetch. What the handshake and the application's calls read comes
	// after.
	ep              *Endpoint
	pd              *memreg.Domain
	state           ConnState
	mode            proto.Mode
	peerPort        uint16
	localID, peerID uint32
	maxPacket       int // negotiated at the handshake, with paths, streams and readsOut
	paths, streams  int
	known           uint64       // bit p: remote[p] is known (planes 0-63; see knows)
	readsOut        int          // READs this side may have outstanding
	remote          []netip.Addr // the peer's address per plane; invalid until known
	ackTimer        clock.Timer
	progress        clock.Timer // fires after Config.NoProgress without progress while work is outstanding

	snd sender
	rcv receiver

	events    Events
	initiator bool
	err       error
	acceptKey acceptKey

	// Negotiated at the handshake too.
	peerWindow int    // DSNs the peer accepts beyond its cumulative DSN
	isn, idsn  uint32 // this side's initial PSN and DSN
	peerISN    uint32
	peerIDSN   uint32
	bl         baseline // baseline mode's state

	hsTimer    clock.Timer
	hsInterval time.Duration
	hsDeadline clock.Time
}

// ID is the connection's local id (the DstConnID its peer sends to).
func (c *Conn) ID() uint32 { return c.localID }

// RemoteAddr is the peer's address on plane p, or the zero Addr while it
// is not known.
func (c *Conn) RemoteAddr(p int) netip.Addr {
	if p < 0 || p >= len(c.remote) {
		return netip.Addr{}
	}
	return c.remote[p]
}

// knows reports whether the peer's address on plane p is known: from a
// bit in the connection's first cache line for the first 64 planes, which
// every packet sent or received asks about (the addresses are a line or
// three of their own).
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

// Domain is the connection's protection domain.
func (c *Conn) Domain() *memreg.Domain { return c.pd }

// negotiate fixes the connection's parameters from the peer's handshake
// header and the path and stream counts chosen.
func (c *Conn) negotiate(h proto.HandshakeHeader, paths, streams int) {
	c.paths, c.streams = paths, streams
	c.maxPacket = min(c.ep.cfg.MaxPacket, int(h.MaxPacket()))
	c.peerWindow = int(h.DSNWindow())
	c.peerISN, c.peerIDSN = h.InitialPSN(), h.InitialDSN()
	c.readsOut = min(c.ep.cfg.MaxReadsOut, int(h.MaxReadsIn()))
	c.mode = h.Mode()
	if c.isBaseline() {
		c.paths = 1
		c.initBaseline()
	}
	c.snd.init(c)
	c.rcv.init(c)
}

func (c *Conn) startHandshake() {
	c.state = Connecting
	c.hsDeadline = c.ep.clock.Now().Add(c.ep.cfg.ConnectTimeout)
	c.sendHandshake()
	c.armHandshakeTimer(handshakeRetry)
}

func (c *Conn) armHandshakeTimer(d time.Duration) {
	c.hsInterval = d
	at := c.ep.clock.Now().Add(d)
	if at > c.hsDeadline {
		at = c.hsDeadline
	}
	c.hsTimer.Reset(at)
}

func (c *Conn) onHandshakeTimer() {
	if c.state != Connecting && c.state != Accepting {
		return
	}
	if c.ep.clock.Now() >= c.hsDeadline {
		c.fail(ErrConnectFailed, StatusFlushed, false)
		c.ep.flush()
		return
	}
	c.sendHandshake()
	c.armHandshakeTimer(2 * c.hsInterval)
	c.ep.flush()
}

// sendHandshake sends this side's CONNECT or ACCEPT.
func (c *Conn) sendHandshake() {
	cfg := &c.ep.cfg
	t, dst := proto.TypeConnect, uint32(0)
	paths, streams, mode := cfg.Paths, cfg.Streams, cfg.Mode
	if mode == proto.ModeBaseline {
		paths = 1
	}
	if !c.initiator {
		t, dst = proto.TypeAccept, c.peerID
		paths, streams, mode = c.paths, c.streams, c.mode
	}
	var pkt proto.Packet
	c.build(&pkt, t, 0, 0)
	pkt.Common.SetDstConnID(dst)
	h := pkt.Handshake()
	h.SetSrcConnID(c.localID)
	h.SetInitialPSN(c.isn)
	h.SetInitialDSN(c.idsn)
	h.SetDSNWindow(uint32(cfg.DSNWindow))
	h.SetMaxPacket(uint16(cfg.MaxPacket))
	h.SetPaths(uint16(paths))
	h.SetStreams(uint16(streams))
	h.SetReplyPort(cfg.Port)
	h.SetMaxReadsOut(uint16(cfg.MaxReadsOut))
	h.SetMaxReadsIn(uint16(cfg.MaxReadsIn))
	h.SetInboundCapacity(proto.CapacityUnknown)
	h.SetMode(mode)
	c.emit(&pkt, c.firstPlane(), c.ep.cfg.SourcePorts[0])
}

// firstPlane is the lowest plane whose peer address is known.
func (c *Conn) firstPlane() int {
	for i, a := range c.remote {
		if a.IsValid() {
			return i
		}
	}
	return 0
}

// build lays out a packet of type t in a fresh buffer from the port. When
// the port pads (padPort), a placeholder payload is left out and the
// packet takes a header buffer, as does any other packet that fits one.
func (c *Conn) build(pkt *proto.Packet, t proto.Type, records, payload int) {
	var err error
	hlen, _ := proto.HeaderLen(t, records)
	switch pp := c.ep.padPort; {
	case pp != nil && payload > 0:
		buf := pp.HeaderBuffer()
		err = proto.BuildPlaceholder(pkt, buf[:cap(buf)], t, payload)
	case pp != nil && hlen+payload+proto.TrailerLen <= link.HeaderBufferLen:
		buf := pp.HeaderBuffer()
		err = proto.Build(pkt, buf[:cap(buf)], t, records, payload)
	default:
		buf := c.ep.port.Buffer()
		err = proto.Build(pkt, buf[:cap(buf)], t, records, payload)
	}
	if err != nil {
		panic("engine: building a packet: " + err.Error()) // sizes are ours: a bug
	}
	pkt.Common.SetTimestamp(uint32(c.ep.clock.Now()))
}

// emit seals a packet and queues it on plane from source port srcPort.
func (c *Conn) emit(pkt *proto.Packet, plane int, srcPort uint16) {
	t := pkt.Type()
	ecn := link.NotECT
	if t.IsData() {
		ecn = link.ECT0
	}
	c.ep.send(link.Datagram{
		Src:  netip.AddrPortFrom(c.ep.cfg.Planes[plane], srcPort),
		Dst:  netip.AddrPortFrom(c.remote[plane], c.peerPort),
		ECN:  ecn,
		DSCP: proto.DefaultDSCP(t),
		Data: c.ep.seal(pkt),
		Pad:  int32(pkt.Pad()),
	})
}

// receive handles a decoded packet for this connection (spec section 9 from
// step 7 on).
func (c *Conn) receive(pkt *proto.Packet, d *link.Datagram, plane int, at clock.Time) {
	if c.state == Closed {
		return
	}
	if !c.knows(plane) {
		c.setRemote(plane, d.Src.Addr()) // learn the peer's address on this plane
	}
	switch t := pkt.Type(); {
	case t == proto.TypeAccept:
		c.onAccept(pkt)
		return
	case t == proto.TypeClose:
		c.onClose(pkt, plane)
		return
	case c.state == Connecting:
		return // nothing else is valid before the ACCEPT
	case c.state == Accepting:
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
		c.snd.onCNP(at)
	default:
		c.ep.stats.Malformed++
	}
}

// onAccept completes the initiator's handshake.
func (c *Conn) onAccept(pkt *proto.Packet) {
	if !c.initiator {
		c.ep.stats.Malformed++
		return
	}
	h := pkt.Handshake()
	if c.state == Connecting {
		if _, ok := checkHandshake(h); !ok || int(h.Paths()) > c.ep.cfg.Paths ||
			int(h.Streams()) > c.ep.cfg.Streams || h.Mode() != c.ep.cfg.Mode {
			c.peerID = h.SrcConnID()
			c.ep.sendClose(c.firstPlane(), netip.AddrPortFrom(c.remote[c.firstPlane()], c.peerPort), h.SrcConnID(), proto.CloseParams, 0)
			c.fail(&RemoteError{Reason: proto.CloseParams}, StatusFlushed, false)
			return
		}
		c.peerID = h.SrcConnID()
		c.negotiate(h, int(h.Paths()), int(h.Streams()))
		c.establish()
	}
	// The third message, on every plane (and again for a resent ACCEPT).
	for p := range c.remote {
		if c.knows(p) {
			c.rcv.sendAck(p, false)
		}
	}
}

func (c *Conn) establish() {
	if c.state == Accepting {
		c.ep.accepting--
	}
	c.state = Established
	c.hsTimer.Stop()
	if c.events != nil {
		c.events.State(c, Established, nil)
	}
	c.snd.pump()
}

// onClose handles the peer's CLOSE.
func (c *Conn) onClose(pkt *proto.Packet, plane int) {
	cl := pkt.Close()
	if cl.Reason() == proto.CloseClosed {
		if c.state != Closed {
			c.fail(ErrClosed, StatusFlushed, false)
		}
		return
	}
	c.ep.sendClose(plane, netip.AddrPortFrom(c.remote[plane], c.peerPort), c.peerID, proto.CloseClosed, 0)
	var err error = &RemoteError{Reason: cl.Reason(), Detail: cl.Detail()}
	switch cl.Reason() {
	case proto.CloseNormal:
		err = ErrClosed
	case proto.CloseRefused:
		err = ErrRefused
	}
	c.fail(err, StatusFlushed, false)
}

// Close ends the connection: CLOSE to the peer, outstanding work flushed.
func (c *Conn) Close() {
	if c.state == Closed {
		return
	}
	c.fail(ErrClosed, StatusFlushed, true)
	c.ep.flush()
}

// fail ends the connection with err: every outstanding request completes
// with status st, and the peer is told when tell is set.
func (c *Conn) fail(err error, st Status, tell bool) {
	if c.state == Closed {
		return
	}
	reason := proto.CloseNormal
	var detail uint32
	var re *RemoteError
	var pe *ProtocolError
	switch {
	case errors.Is(err, ErrTimeout):
		reason = proto.CloseTimeout
	case errors.As(err, &re) && re.Nack != 0:
		reason, detail = proto.CloseFatal, uint32(re.Nack)
	case errors.As(err, &pe):
		reason, detail = proto.CloseFatal, uint32(pe.Code)
	}
	if c.state == Accepting {
		c.ep.accepting--
	}
	c.state = Closed
	c.err = err
	c.hsTimer.Stop()
	c.progress.Stop()
	c.ackTimer.Stop()
	c.snd.flush(st, err)
	c.rcv.flush(err)
	for _, p := range c.snd.paths {
		p.timer.Stop()
	}
	c.ep.forget(c, tell, reason, detail)
	if c.events != nil {
		c.events.State(c, Closed, err)
	}
}

// madeProgress keeps the no-progress clock: it runs only while work is
// outstanding, and restarts only when the peer acknowledged something new
// (posting more work to a vanished peer must not keep it alive).
func (c *Conn) madeProgress(acked bool) {
	switch {
	case !c.snd.busy():
		c.progress.Stop()
	case acked || c.progress.Deadline() == clock.Never:
		c.progress.Reset(c.ep.clock.Now().Add(c.ep.cfg.NoProgress))
	}
}

func (c *Conn) onNoProgress() {
	if c.state == Closed || !c.snd.busy() {
		return
	}
	c.fail(ErrTimeout, StatusTimeout, true)
	c.ep.flush()
}

func (c *Conn) onAckTimer() {
	if c.state != Established {
		return
	}
	if c.rcv.repeat {
		c.rcv.repeatAck()
	} else {
		c.rcv.ackNow()
	}
	c.ep.flush()
}

// Post queues a WRITE, WRITE_IMM or SEND.
func (c *Conn) Post(wr SendWR) error {
	if c.state != Established {
		if c.state == Closed {
			return ErrClosed
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
// post receives from its accept callback on, before it is established.
func (c *Conn) PostRecv(wr RecvWR) error {
	switch c.state {
	case Closed:
		return ErrClosed
	case Connecting:
		return ErrNotReady
	}
	return c.rcv.postRecv(wr)
}
