// The handshake. CONNECT and ACCEPT, and the values they negotiate (spec
// section 8).

package engine

import (
	"net/netip"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// onConnect answers a CONNECT (spec section 8.1).
func (e *Endpoint) onConnect(pkt *proto.Packet, d *link.Datagram, plane int) {
	h := pkt.Handshake()
	key := acceptKey{d.Src.Addr(), h.SrcConnID()}
	if c := e.accepted[key]; c != nil {
		c.sendHandshake() // a resent CONNECT gets the same ACCEPT
		return
	}
	if until, ok := e.closedKey[key]; ok && e.clock.Now() < until {
		e.stats.Quarantined++ // a late copy of the CONNECT of a connection now closed
		return
	}
	reply := func(reason proto.CloseReason, detail uint32) {
		e.sendClose(plane, netip.AddrPortFrom(d.Src.Addr(), h.ReplyPort()), h.SrcConnID(), reason, detail)
	}
	if off, ok := checkHandshake(h); !ok {
		e.stats.Malformed++
		reply(proto.CloseParams, uint32(off))
		return
	}
	if h.Mode() > proto.ModeBaseline {
		reply(proto.CloseParams, 40) // a mode this endpoint does not know (spec section 8.2)
		return
	}
	if e.listener == nil {
		e.stats.Refused++
		reply(proto.CloseRefused, 0)
		return
	}
	if e.accepting >= e.cfg.MaxAccepting {
		// A flood of CONNECTs, forged perhaps, must not grow state without
		// bound. Beyond the cap they are refused.
		e.stats.Refused++
		reply(proto.CloseResource, 0)
		return
	}
	c := e.newConn(e.listenPD, nil, false)
	c.setRemote(plane, d.Src.Addr())
	c.peerPort = h.ReplyPort()
	c.peerID = h.SrcConnID()
	c.acceptKey = key
	c.state = Accepting
	ev, ok := e.listener(c) // before any per-connection state is allocated
	if !ok {
		delete(e.conns, c.localID)
		e.stats.Refused++
		reply(proto.CloseRefused, 0)
		return
	}
	c.events = ev
	c.negotiate(h, min(int(h.Paths()), e.cfg.Paths), min(int(h.Streams()), e.cfg.Streams))
	e.accepted[key] = c
	e.accepting++
	// One ACCEPT answers each CONNECT, this one and every copy resent, and
	// no timer sends more: a forged CONNECT draws one ACCEPT to its forged
	// source, no more (spec section 8.1). The timer only ends the half-open
	// connection at its deadline.
	c.hsDeadline = e.clock.Now().Add(e.cfg.ConnectTimeout)
	c.sendHandshake()
	c.hsTimer.Reset(c.hsDeadline)
}

type acceptKey struct {
	src netip.Addr
	id  uint32
}

// checkHandshake checks the ranges of spec section 5.8. It returns the byte
// offset of the first bad field, which CLOSE PARAMS carries as its Detail.
func checkHandshake(h proto.HandshakeHeader) (int, bool) {
	switch {
	case h.SrcConnID() == 0:
		return 0, false
	case h.DSNWindow() < 1 || h.DSNWindow() > proto.MaxDSNWindow:
		return 12, false
	case h.MaxPacket() < proto.MinMTU || int(h.MaxPacket()) > proto.MaxPacketLen:
		return 16, false
	case h.Paths() < 1 || h.Paths() > proto.MaxPaths:
		return 18, false
	case h.Streams() < 1:
		return 20, false
	case h.ReplyPort() == 0:
		return 22, false
	case h.InboundCapacity() == 0:
		return 32, false
	}
	return 0, true
}

// acceptable checks an ACCEPT against the ranges of spec section 5.8 and
// against what this side offered: no more paths or streams, the same
// mode. It returns the byte offset of the first field refused, which
// CLOSE PARAMS carries as its Detail (spec section 5.9).
func acceptable(h proto.HandshakeHeader, cfg *Config) (int, bool) {
	if off, ok := checkHandshake(h); !ok {
		return off, false
	}
	switch {
	case int(h.Paths()) > cfg.Paths:
		return 18, false
	case int(h.Streams()) > cfg.Streams:
		return 20, false
	case h.Mode() != cfg.Mode:
		return 40, false
	}
	return 0, true
}

// negotiate fixes the connection's parameters from the peer's handshake
// header and the path and stream counts chosen (spec section 8.2).
func (c *Conn) negotiate(h proto.HandshakeHeader, paths, streams int) {
	c.paths, c.streams = paths, streams
	c.maxPacket = min(c.ep.cfg.MaxPacket, int(h.MaxPacket()))
	c.peerWindow = int(h.DSNWindow())
	c.peerISN, c.peerIDSN = h.InitialPSN(), h.InitialDSN()
	c.readsOut = min(c.ep.cfg.MaxReadsOut, int(h.MaxReadsIn()))
	c.mode = h.Mode()
	if c.mode == proto.ModeBaseline {
		c.paths = 1
		c.tp = newBaseline(c)
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
	if c.state == Accepting {
		return // an acceptor answers CONNECTs and sends nothing of its own
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

// onAccept completes the initiator's handshake.
func (c *Conn) onAccept(pkt *proto.Packet) {
	if !c.initiator {
		c.ep.stats.Malformed++
		return
	}
	h := pkt.Handshake()
	if c.state == Connecting {
		if off, ok := acceptable(h, &c.ep.cfg); !ok {
			c.peerID = h.SrcConnID()
			c.ep.sendClose(c.firstPlane(), netip.AddrPortFrom(c.remote[c.firstPlane()], c.peerPort), h.SrcConnID(), proto.CloseParams, uint32(off))
			c.fail(&RemoteError{Reason: proto.CloseParams}, StatusFlushed, false)
			return
		}
		c.peerID = h.SrcConnID()
		c.negotiate(h, int(h.Paths()), int(h.Streams()))
		c.establish()
	}
	// The third message of the handshake goes on every plane, and again for
	// each resent ACCEPT (spec section 8.1).
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
	c.heard = c.ep.clock.Now()
	c.alive.Reset(c.heard.Add(c.ep.cfg.KeepAlive))
	if c.events != nil {
		c.events.State(c, Established, nil)
	}
	c.snd.pump()
}
