// The handshake. CONNECT, ACCEPT and RETRY, and the values they negotiate
// (spec section 8).

package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
	"math"
	"net/netip"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// onConnect answers a CONNECT (spec section 8.1).
func (e *Endpoint) onConnect(pkt *proto.Packet, d *link.Datagram, plane int) {
	h := pkt.Handshake()
	key := acceptKey{h.SrcConnID(), h.InitialPSN(), h.InitialDSN()}
	c := e.accepted[key]
	if c != nil {
		if hello, ok := pkt.AuthHello(); c.response != nil && (!ok || !c.response.Same(hello)) {
			e.stats.BadHandshakes++ // a resent CONNECT repeats its key exchange (spec section 13.3)
			return
		}
		if p := c.resendPlane(d.Src.Addr(), plane); p >= 0 {
			c.hsPlane, c.hsReply = p, d.Src.Addr()
			c.sendHandshake() // a resent CONNECT gets the same ACCEPT
			return
		}
		if c.state != Accepting {
			e.stats.WrongSource++ // none of the addresses the connection learned
			return
		}
		// A resend from another address while the connection is
		// half-open: another plane of the initiator's, where its first
		// CONNECT or that one's ACCEPT was lost, or a copy sent from
		// elsewhere. It is checked as a new CONNECT would be, its token
		// under pressure, and answered with the same ACCEPT; it teaches
		// no address (spec section 8.1).
	} else if until, ok := e.closedKey[key]; ok && e.clock.Now() < until {
		e.stats.Quarantined++ // a late copy of the CONNECT of a connection now closed
		return
	}
	reply := func(reason proto.CloseReason, detail uint32) {
		e.sendClose(plane, netip.AddrPortFrom(d.Src.Addr(), h.ReplyPort()), h.SrcConnID(), reason, detail, nil)
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
	validated := false
	if tok, ok := pkt.Token(); ok {
		switch e.checkToken(tok, d.Src.Addr(), h) {
		case tokenBad:
			// Not made here for this source, id and port: forged, altered,
			// or sent back from another address than the RETRY went to.
			e.stats.BadTokens++
			return
		case tokenExpired:
			e.stats.ExpiredTokens++ // answered as a CONNECT without one
		case tokenValid:
			validated = true
		}
	}
	if !validated && e.accepting >= e.cfg.retryThreshold() {
		// Under pressure a CONNECT makes no state until its source shows,
		// by returning the token, that it receives at its address. One
		// RETRY answers it, smaller than it, and nothing else (spec
		// section 8.1).
		e.stats.RetriesSent++
		e.sendRetry(plane, netip.AddrPortFrom(d.Src.Addr(), h.ReplyPort()), h.SrcConnID(), e.makeToken(d.Src.Addr(), h))
		return
	}
	if c != nil {
		c.hsPlane, c.hsReply = plane, d.Src.Addr()
		c.sendHandshake()
		return
	}
	if e.accepting >= e.cfg.MaxAccepting {
		// A flood of CONNECTs, forged perhaps, must not grow state without
		// bound. Beyond the cap they are refused, before any key exchange
		// is worked out.
		e.stats.Refused++
		reply(proto.CloseResource, 0)
		return
	}
	response, refuse, drop := e.checkHello(pkt)
	switch {
	case drop:
		return // it does not prove the credentials: not answered (spec section 13.3)
	case refuse != 0:
		reply(proto.CloseParams, refuse)
		return
	}
	// The CONNECT teaches no address: anyone who saw it can send it from
	// elsewhere. The ACCEPT goes to its source, and the initiator's
	// answer to it teaches the planes (spec sections 8.1 and 13.3).
	c = e.newConn(e.listenPD, nil, false)
	c.hsPlane, c.hsReply = plane, d.Src.Addr()
	c.acceptedFrom, c.acceptedOn = d.Src.Addr(), plane
	c.peerPort = h.ReplyPort()
	c.peerID = h.SrcConnID()
	c.acceptKey = key
	c.response = response
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

// acceptKey recognizes a resent CONNECT: the initiator's id and initial
// sequence numbers, which every resend repeats on whichever plane it goes,
// 96 random bits that an off-path host cannot guess (spec section 8.1).
type acceptKey struct {
	id, isn, idsn uint32
}

// sendRetry answers a CONNECT with a RETRY carrying tok, to dst, the
// CONNECT's source address and ReplyPort, from the plane it arrived on
// (spec section 8.1). The RETRY keeps no state.
func (e *Endpoint) sendRetry(plane int, dst netip.AddrPort, peerID uint32, tok [proto.TokenLen]byte) {
	buf := e.port.Buffer()
	var pkt proto.Packet
	if err := proto.Build(&pkt, buf[:cap(buf)], proto.TypeRetry, 0, 0); err != nil {
		panic(err)
	}
	pkt.Common.SetDstConnID(peerID)
	pkt.Common.SetTimestamp(uint32(e.clock.Now()))
	pkt.Retry().SetToken(tok)
	e.send(link.Datagram{
		Src:  netip.AddrPortFrom(e.cfg.Planes[plane], e.cfg.SourcePorts[0]),
		Dst:  dst,
		DSCP: proto.DefaultDSCP(proto.TypeRetry),
		Data: e.seal(&pkt),
	})
}

// A token, as mroce makes it (spec section 8.1), is 4 bytes of the
// acceptor's clock in milliseconds when it made it, then the first 12 bytes
// of HMAC-SHA256, under the endpoint's secret, of that time, the CONNECT's
// source address as 16 bytes, its SrcConnID and its ReplyPort. The
// endpoint checks it again with nothing stored but the secret.

// tokenMS is the token's clock: milliseconds modulo 2^32.
func tokenMS(t clock.Time) uint32 { return uint32(int64(t) / int64(time.Millisecond)) }

// makeToken makes the token of a RETRY that answers a CONNECT from src
// with handshake header h.
func (e *Endpoint) makeToken(src netip.Addr, h proto.HandshakeHeader) (tok [proto.TokenLen]byte) {
	now := e.clock.Now()
	e.renewTokenKey(now)
	issued := tokenMS(now)
	binary.BigEndian.PutUint32(tok[:4], issued)
	copy(tok[4:], e.tokenMAC(e.mac, issued, src, h.SrcConnID(), h.ReplyPort()))
	return tok
}

type tokenCheck uint8

const (
	tokenBad tokenCheck = iota
	tokenExpired
	tokenValid
)

// checkToken checks a CONNECT's token: that this endpoint made it for the
// CONNECT's source address src, SrcConnID and ReplyPort, and when.
func (e *Endpoint) checkToken(tok [proto.TokenLen]byte, src netip.Addr, h proto.HandshakeHeader) tokenCheck {
	if e.mac == nil {
		return tokenBad // no token made yet, so none is ours
	}
	now := e.clock.Now()
	e.renewTokenKey(now)
	issued := binary.BigEndian.Uint32(tok[:4])
	if !hmac.Equal(tok[4:], e.tokenMAC(e.mac, issued, src, h.SrcConnID(), h.ReplyPort())) &&
		(e.macPrev == nil || !hmac.Equal(tok[4:], e.tokenMAC(e.macPrev, issued, src, h.SrcConnID(), h.ReplyPort()))) {
		return tokenBad
	}
	// Serial: a token from the future is as old as 2^32 ms less its lead.
	if age := tokenMS(now) - issued; age > uint32(tokenLifetime/time.Millisecond) {
		return tokenExpired
	}
	return tokenValid
}

// renewTokenKey draws the tokens' secret when the first token is made, and
// a new one when a token is made or checked tokenKeyLife or more after the
// last draw. The issue time a token carries comes round every 2^32 ms, and
// a token seen on its way would be valid again then under the same secret.
// The secret before stays, unless it is twice tokenKeyLife old, so that
// its tokens are told valid or expired, not taken for a stranger's: an
// expired one draws a new RETRY. A token 2^32 ms old is under neither.
// The secrets come from the source of the connection ids, so that a
// simulation without pressure draws exactly what it did before tokens
// existed.
func (e *Endpoint) renewTokenKey(now clock.Time) {
	if e.mac != nil && now.Sub(e.macDrawn) < tokenKeyLife {
		return
	}
	e.macPrev = nil
	if e.mac != nil && now.Sub(e.macDrawn) < 2*tokenKeyLife {
		e.macPrev = e.mac
	}
	var key [tokenKeyLen]byte
	if _, err := io.ReadFull(e.random, key[:]); err != nil {
		panic("engine: random source failed: " + err.Error())
	}
	e.mac, e.macDrawn = hmac.New(sha256.New, key[:]), now
}

// tokenMAC is a token's MAC under mac, tokenMACLen bytes, valid until the
// next call.
func (e *Endpoint) tokenMAC(mac hash.Hash, issued uint32, src netip.Addr, id uint32, port uint16) []byte {
	var msg [4 + 16 + 4 + 2]byte
	binary.BigEndian.PutUint32(msg[0:], issued)
	a := src.Unmap().As16() // IPv4 as IPv4-mapped IPv6
	copy(msg[4:], a[:])
	binary.BigEndian.PutUint32(msg[20:], id)
	binary.BigEndian.PutUint16(msg[24:], port)
	mac.Reset()
	mac.Write(msg[:])
	return mac.Sum(e.macSum[:0])[:tokenMACLen]
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

// capabilities are what this endpoint offers at the handshake (spec
// section 8.3): receive credits, resends cut to a fallen path MTU and
// atomics, unless Config.NoCredits, Config.NoRecut and Config.NoAtomics.
func (e *Endpoint) capabilities() proto.Capabilities {
	var caps proto.Capabilities
	if e.authed() {
		caps |= proto.CapAuth
	}
	if !e.cfg.NoCredits {
		caps |= proto.CapCredits
	}
	if !e.cfg.NoRecut {
		caps |= proto.CapRecut
	}
	if !e.cfg.NoAtomics {
		caps |= proto.CapAtomics
	}
	return caps
}

// negotiate fixes the connection's parameters from the peer's handshake
// header and the path and stream counts chosen (spec section 8.2).
func (c *Conn) negotiate(h proto.HandshakeHeader, paths, streams int) {
	c.paths, c.streams = paths, streams
	c.maxPacket = min(c.ep.cfg.MaxPacket, int(h.MaxPacket()))
	c.sendMax = c.maxPacket
	if base := c.ep.cfg.BasePacket; base > 0 {
		c.sendMax = min(base, c.maxPacket) // until the path MTU search shows more (spec section 6.7)
	}
	c.peerWindow = int(h.DSNWindow())
	c.peerISN, c.peerIDSN = h.InitialPSN(), h.InitialDSN()
	c.readsOut = min(c.ep.cfg.MaxReadsOut, int(h.MaxReadsIn()))
	c.mode = h.Mode()
	agreed := c.ep.capabilities() & h.Capabilities()
	if c.mode != proto.ModeMultipath {
		agreed &= proto.CapAtomics // the baseline has atomics alone (spec section 10)
	}
	c.credits = agreed&proto.CapCredits != 0
	c.recut = agreed&proto.CapRecut != 0
	c.atomics = agreed&proto.CapAtomics != 0
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
	c.hsPlane = c.nextPlane(len(c.remote) - 1) // the lowest plane up
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
	// Each resend goes on the next plane in turn, so that a plane that
	// failed, or whose acceptor address is wrong, delays the connection
	// by one interval and stops none. A RETRY showed that its plane
	// carries both ways, and its token holds there alone: the next
	// resend stays on its plane (spec section 8.1).
	if !c.hsStay {
		c.hsPlane = c.nextPlane(c.hsPlane)
	}
	c.hsStay = false
	c.sendHandshake()
	// The interval stops doubling at handshakeMaxGap, so that a connect
	// timeout longer than the default buys resends, not only longer waits
	// between them: on a lossy network each try may fail (spec section
	// 8.1).
	c.armHandshakeTimer(min(2*c.hsInterval, handshakeMaxGap))
	c.ep.flush()
}

// sendHandshake sends this side's CONNECT or ACCEPT on hsPlane. A CONNECT
// carries the token of the last RETRY taken, if any, on the plane that
// RETRY came on: the token holds for the initiator's address there alone
// (spec section 8.1).
func (c *Conn) sendHandshake() {
	cfg := &c.ep.cfg
	t, dst := proto.TypeConnect, uint32(0)
	paths, streams, mode := cfg.Paths, cfg.Streams, cfg.Mode
	if mode == proto.ModeBaseline {
		paths = 1
	}
	hello := 0
	if c.ep.authed() {
		hello = proto.AuthHelloLen
	}
	token := c.token != nil && c.tokenPlane == c.hsPlane
	payload := hello
	if token {
		payload += proto.TokenLen
	}
	if !c.initiator {
		t, dst = proto.TypeAccept, c.peerID
		paths, streams, mode = c.paths, c.streams, c.mode
		payload = 0
		if c.ep.authed() {
			payload = proto.AuthAcceptLen
		}
	}
	var pkt proto.Packet
	c.build(&pkt, t, 0, payload)
	if token && c.initiator {
		copy(pkt.Payload[hello:], c.token[:])
	}
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
	caps := c.ep.capabilities()
	if t == proto.TypeAccept { // the ACCEPT gives the result, the AND of both (spec section 8.2)
		if !c.credits {
			caps &^= proto.CapCredits
		}
		if !c.recut {
			caps &^= proto.CapRecut
		}
		if !c.atomics {
			caps &^= proto.CapAtomics
		}
	}
	h.SetCapabilities(caps)
	if c.ep.authed() { // the key exchange binds the header, so it comes last
		if !c.initiator {
			c.acceptFor(&pkt)
		} else if !c.helloFor(&pkt) {
			return
		}
	}
	to := c.remote[c.hsPlane]
	if !c.initiator {
		to = c.hsReply
	}
	c.emitTo(&pkt, c.hsPlane, c.ep.cfg.SourcePorts[0], to)
	c.hsSends++
	c.hsSentAt, c.hsStamp = c.ep.clock.Now(), pkt.Common.Timestamp()
}

// resendPlane is where the ACCEPT that answers a CONNECT resent from src,
// arriving on plane arrival, goes: a plane whose peer address is src, the
// plane of arrival first (planes may share a local address, as on
// loopback, and then their packets all seem to arrive on the first), or
// the plane of the first CONNECT if it came from src. It is -1 for any
// other source.
func (c *Conn) resendPlane(src netip.Addr, arrival int) int {
	if c.knows(arrival) && c.remote[arrival] == src {
		return arrival
	}
	for p, a := range c.remote {
		if c.knows(p) && a == src {
			return p
		}
	}
	if src == c.acceptedFrom {
		return c.acceptedOn
	}
	return -1
}

// nextPlane is the first plane after p, in turn, whose peer address is
// known and which this host does not see down; else the first after p
// whose address is known; else p.
func (c *Conn) nextPlane(p int) int {
	n := len(c.remote)
	for _, up := range [2]bool{true, false} {
		for i := 1; i <= n; i++ {
			if q := (p + i) % n; c.knows(q) && (!up || !c.ep.down[q]) {
				return q
			}
		}
	}
	return p
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

// onRetry takes a RETRY, the acceptor's request that this side's CONNECT
// come back with the token (spec section 8.1). It must come from the
// acceptor's address on its plane, to a CONNECT not yet accepted, and at
// most maxRetries times per connect attempt. The CONNECT goes again at
// once, and every later resend carries the token; the timers run on.
func (c *Conn) onRetry(pkt *proto.Packet, d *link.Datagram, plane int) {
	switch {
	case !c.knows(plane) || d.Src.Addr() != c.remote[plane]:
		c.ep.stats.WrongSource++
		return
	case !c.initiator || c.state != Connecting || c.retries >= maxRetries:
		c.ep.stats.RetriesIgnored++
		return
	}
	c.retries++
	c.ep.stats.RetriesTaken++
	tok := pkt.Retry().Token()
	c.token, c.tokenPlane, c.hsPlane, c.hsStay = &tok, plane, plane, true
	c.sendHandshake()
}

// onAccept completes the initiator's handshake, with an ACCEPT that came
// on plane, where a refusal of its values goes back.
func (c *Conn) onAccept(pkt *proto.Packet, plane int) {
	if !c.initiator {
		c.ep.stats.Malformed++
		return
	}
	h := pkt.Handshake()
	if c.state == Connecting {
		if off, ok := acceptable(h, &c.ep.cfg); !ok {
			c.peerID = h.SrcConnID()
			c.ep.sendClose(plane, netip.AddrPortFrom(c.remote[plane], c.peerPort), h.SrcConnID(), proto.CloseParams, uint32(off), c.session)
			c.fail(&RemoteError{Reason: proto.CloseParams}, StatusFlushed, false)
			return
		}
		c.peerID = h.SrcConnID()
		c.negotiate(h, int(h.Paths()), int(h.Streams()))
		c.handshakeDelay(pkt.Common.Timestamp())
		c.establish()
	}
	c.answerAccept()
}

// answerAccept sends the third message of the handshake on every plane,
// and again for each resent ACCEPT (spec section 8.1). In the
// authenticated mode an initiator that has opened a packet of its peer's
// knows that the peer is established, and a repeat, which anyone who saw
// the ACCEPT could send, draws nothing more.
func (c *Conn) answerAccept() {
	if c.heardProtected {
		return
	}
	for p := range c.remote {
		if c.knows(p) {
			c.rcv.sendAck(p, false)
		}
	}
}

// handshakeDelay takes the one-way delay toward the peer that the
// handshake shows, from the Timestamp of the peer's answer to the one
// CONNECT or ACCEPT this end sent: the initiator's from the ACCEPT, the
// acceptor's from the first packet after its ACCEPT. The peer sent its
// answer after the packet arrived, so the answer's clock less the packet's
// Timestamp is at least that packet's reading. A data packet serializes
// longer at each hop: a full packet's time at the sender's own port is
// added where its rate is known, and the other hops' are left out
// (docs/cc.md, "Where no queue marks"). The delay signal's base may start
// from it (sender.delayBase). None is taken once this end sent twice,
// since which packet was answered is not known; nor from an answer a
// resend's interval late or later, since a silence of seconds would run
// past the readings' serial range; nor by an initiator in the
// authenticated mode, whose ACCEPT's Timestamp nothing authenticates
// (spec section 13.3).
func (c *Conn) handshakeDelay(answered uint32) {
	if c.hsSends != 1 || c.initiator && c.ep.authed() || c.ep.clock.Now().Sub(c.hsSentAt) >= handshakeRetry {
		return
	}
	reading := answered - c.hsStamp
	if rate := c.ep.ports.portRate[c.hsPlane]; !math.IsInf(rate, 1) {
		reading += uint32(float64(c.ep.cfg.MaxPacket) / rate * 1e9)
	}
	c.hsOneWay, c.hsOneWayPlane, c.hsOneWayOK = reading, c.hsPlane, true
}

func (c *Conn) establish() {
	if c.state == Accepting {
		c.ep.accepting--
	}
	c.state = Established
	c.hsTimer.Stop()
	c.heard = c.ep.clock.Now()
	if c.hsSends == 1 {
		// The answer to the one CONNECT, or the first packet after the one
		// ACCEPT, which the initiator sends on the ACCEPT's arrival. Once
		// either went twice, which one was answered is not known (Karn).
		c.hsRTT = c.heard.Sub(c.hsSentAt)
	}
	c.alive.Reset(c.heard.Add(c.ep.cfg.KeepAlive))
	if c.events != nil {
		c.events.State(c, Established, nil)
	}
	c.startMTUSearch() // when the sender was equipped before
	c.snd.takeHandshakeDelay()
	c.snd.openFirstWindow()
	c.timeRoundTrip()
	c.snd.pump()
}

// timeRoundTrip sends a keep-alive PROBE (spec section 8.6) on the
// handshake's plane where the handshake timed no round trip, its CONNECT
// or ACCEPT sent more than once (Karn), and a first window of one
// bandwidth-delay product is still to be sized (firstWindowToSize). The
// reply echoes the PROBE's Timestamp, so it times one whatever else was
// lost (roundTripTimed).
func (c *Conn) timeRoundTrip() {
	if c.hsRTT > 0 || !c.knows(c.hsPlane) || !c.snd.firstWindowToSize() {
		return
	}
	c.rttProbe, c.rttProbing = uint32(c.ep.clock.Now()), true
	c.sendPlaneProbe(c.hsPlane, keepAliveProbe, 0)
}

// roundTripTimed takes the reply to a keep-alive at at: where it echoes
// timeRoundTrip's PROBE, or the newest keep-alive since where that or its
// reply was lost, its round trip is the connection's, less the peer's
// ServiceTime, and sizes the first window if nothing was sent yet.
// A reply as late as a handshake's resend is no measure, as the
// handshake's own reading is not (handshakeDelay).
func (c *Conn) roundTripTimed(r proto.ProbeReplyHeader, at clock.Time) {
	if !c.rttProbing || r.EchoTimestamp() != c.rttProbe {
		return
	}
	c.rttProbing = false
	sample := time.Duration(uint32(at) - r.EchoTimestamp() - r.ServiceTime())
	if sample > 0 && sample < handshakeRetry {
		c.hsRTT = sample
		c.snd.openFirstWindow()
	}
}
