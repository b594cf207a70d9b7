// The authenticated mode (spec section 13): the key exchange the handshake
// carries, and the protection of every later packet. Package auth holds
// the cryptography; this file is where the engine meets it.

package engine

import (
	"errors"
	"fmt"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// authed reports whether the endpoint runs the authenticated mode. Every
// connection of such an endpoint runs it, or does not get established.
func (e *Endpoint) authed() bool { return e.cfg.Auth != nil }

// trailerLen is what ends each packet of the connection: the tag of a
// protected packet, or the CRC.
func (c *Conn) trailerLen() int {
	if c.ep.authed() {
		return proto.TagLen
	}
	return proto.TrailerLen
}

// protects reports whether a packet of type t that the connection sends
// is protected: every packet once its keys exist, but its CONNECT and
// ACCEPT (spec section 13.4).
func (c *Conn) protects(t proto.Type) bool {
	return c.session != nil && t != proto.TypeConnect && t != proto.TypeAccept
}

// seal finishes a packet the connection sends: sealed by its keys when
// protected, with its CRC otherwise. A protected packet that may not be
// sealed, its key phase spent and the next not yet allowed, is not sent:
// seal returns nil, and loss recovery sends it again later.
func (c *Conn) seal(pkt *proto.Packet) []byte {
	if !pkt.Common.Protected() {
		return c.ep.seal(pkt)
	}
	if err := c.session.Seal(pkt.Bytes(), c.ep.clock.Now()); err != nil {
		c.ep.stats.PhaseSpent++
		return nil
	}
	return pkt.Bytes()
}

// open opens a protected datagram into the endpoint's buffer and decodes
// it, with the keys of the connection its DstConnID names: a live one, or
// one in quarantine, whose CLOSE it may be. It reports the error to count
// the drop under.
func (e *Endpoint) open(pkt *proto.Packet, d *link.Datagram, at clock.Time) error {
	b := d.Data
	if len(b) < proto.MinProtectedLen {
		return proto.ErrTruncated
	}
	id := proto.CommonHeader(b).DstConnID()
	var s *auth.Session
	var c *Conn
	if c = e.conns[id]; c != nil {
		s = c.session
	} else if cc := e.closed[id]; cc != nil && at < cc.expires {
		s = cc.session // only while the id is quarantined: its keys end with it
	}
	if s == nil {
		return proto.ErrProtected
	}
	if cap(e.opened) < len(b) {
		e.opened = make([]byte, len(b), max(len(b), e.cfg.MaxPacket))
	}
	out := e.opened[:len(b)]
	if err := s.OpenTo(out, b, at); err != nil {
		switch {
		case errors.Is(err, auth.ErrReplay):
			e.stats.Replays++
			return errCounted
		case errors.Is(err, auth.ErrForgeryLimit) && c != nil:
			e.stats.Decode[proto.ErrAuthFailed]++
			c.fail(fmt.Errorf("engine: the connection ends: %w", err), StatusFlushed, true) // a CLOSE NORMAL, still under its keys
			e.flush()
			return errCounted
		case errors.Is(err, auth.ErrForgeryLimit):
			return proto.ErrAuthFailed
		}
		return err
	}
	if c != nil {
		c.heardProtected = true
	}
	return pkt.DecodeOpened(out)
}

// decodeOwn decodes a datagram this endpoint sent and its host handed back.
// A protected one is opened with the sending keys of the connection it was
// for.
func (e *Endpoint) decodeOwn(pkt *proto.Packet, d *link.Datagram) error {
	b := d.Data
	if len(b) < proto.MinProtectedLen || !proto.CommonHeader(b).Protected() {
		return e.decode(pkt, d)
	}
	header := proto.Packet{Common: proto.CommonHeader(b[:proto.CommonHeaderLen])} // all that is clear
	for _, c := range e.conns {
		if c.session == nil || !c.sent(&header, d) {
			continue
		}
		out := append(e.ownOpened[:0], b...) // apart from opened, which a packet being handled may hold
		e.ownOpened = out[:0]
		if err := c.session.OpenOwn(out); err != nil {
			return err
		}
		return pkt.DecodeOpened(out)
	}
	return proto.ErrProtected
}

// errCounted is a drop that open has counted itself.
var errCounted = errors.New("engine: dropped and counted")

// takesClear reports whether a connection in the authenticated mode takes
// an unprotected packet of type t: only the ones of its handshake that
// spec section 13.3 names. Everything else must come protected.
func (c *Conn) takesClear(t proto.Type) bool {
	switch t {
	case proto.TypeAccept:
		return c.initiator
	case proto.TypeRetry, proto.TypeClose:
		return c.initiator && c.state == Connecting // during its handshake only
	}
	return false
}

// fresh reports whether a packet counts as hearing from the peer (spec
// section 8.6). In the authenticated mode a data packet counts only when
// its PSN is after its path's highest: a repeat of an old one, which
// anyone on the path can send, must not keep a connection alive whose
// peer is gone (spec section 13.6). Control packets that opened twice
// were dropped before.
func (c *Conn) fresh(pkt *proto.Packet) bool {
	if !c.ep.authed() || !pkt.Type().IsData() {
		return true
	}
	h := pkt.Common
	if int(h.PathID()) >= len(c.rcv.paths) {
		return false // refused at step 8
	}
	return c.rcv.paths[h.PathID()].advances(h.PSN())
}

// helloFor fills a CONNECT's AuthHello. The first CONNECT of the attempt
// starts the key exchange, and every resend carries the same hello. The
// credentials were checked with the config, so only a failing random
// source makes it fail, and the connection with it.
func (c *Conn) helloFor(pkt *proto.Packet) bool {
	if c.initiation == nil {
		in, err := auth.Initiate(c.ep.cfg.Auth, c.ep.random, pkt.Handshake())
		if err != nil {
			c.fail(fmt.Errorf("engine: starting the key exchange: %w", err), StatusFlushed, false)
			return false
		}
		c.initiation = in
	}
	copy(pkt.Payload, c.initiation.Hello())
	return true
}

// ownHello reports whether a CONNECT's ephemeral key is one of this
// endpoint's own attempts: its CONNECT sent back to it. With a pre-shared
// key nothing else tells the two sides apart (spec section 13.3).
func (e *Endpoint) ownHello(hello proto.AuthHello) bool {
	for _, c := range e.conns {
		if c.initiation != nil && c.state == Connecting && string(c.initiation.Hello()[4:36]) == string(hello[4:36]) {
			return true
		}
	}
	return false
}

// acceptFor fills an ACCEPT's AuthAccept and makes the acceptor's keys. A
// resent CONNECT gets the same ACCEPT, under the same keys.
func (c *Conn) acceptFor(pkt *proto.Packet) {
	acc, secrets := c.response.Answer(pkt.Handshake())
	copy(pkt.Payload, acc)
	if c.session == nil {
		s, err := auth.NewSession(secrets, c.ep.cfg.MPL)
		if err != nil {
			panic("engine: " + err.Error()) // the suite was checked by Respond
		}
		c.session = s
		c.logSecrets(secrets, c.peerID)
	}
}

// checkHello answers a CONNECT's AUTH and its AuthHello at an acceptor
// (spec section 13.3, steps 1 and 2). It returns the checked response, a
// CLOSE PARAMS detail to refuse with, or neither for a CONNECT to drop.
func (e *Endpoint) checkHello(pkt *proto.Packet) (r *auth.Response, refuse uint32, drop bool) {
	h := pkt.Handshake()
	wants := h.Capabilities()&proto.CapAuth != 0
	switch {
	case wants != e.authed():
		return nil, 28, false // the Capabilities field: one side has the mode, the other not
	case !wants:
		return nil, 0, false
	case h.Mode() != proto.ModeMultipath:
		return nil, 40, false
	}
	hello, _ := pkt.AuthHello()
	if e.ownHello(hello) {
		e.stats.BadHandshakes++
		return nil, 0, true
	}
	r, err := auth.Respond(e.cfg.Auth, e.random, h, hello)
	var refused *auth.RefusedError
	switch {
	case errors.As(err, &refused):
		return nil, refused.Detail, false
	case err != nil:
		e.stats.BadHandshakes++
		return nil, 0, true
	}
	return r, 0, false
}

// finishAccept checks an ACCEPT's key exchange at the initiator and makes
// its keys; a repeated ACCEPT must be the one taken, but for its
// Timestamp. It reports whether the ACCEPT may be acted on.
func (c *Conn) finishAccept(pkt *proto.Packet) bool {
	acc, ok := pkt.AuthAccept()
	if !ok {
		c.ep.stats.BadHandshakes++ // an ACCEPT without the mode: no peer of ours
		return false
	}
	if c.session != nil {
		if acceptImage(pkt) != c.accepted {
			c.ep.stats.BadHandshakes++
			return false
		}
		return true
	}
	secrets, err := c.initiation.Finish(pkt.Handshake(), acc)
	if err != nil {
		c.ep.stats.BadHandshakes++
		return false
	}
	if c.session, err = auth.NewSession(secrets, c.ep.cfg.MPL); err != nil {
		c.ep.stats.BadHandshakes++
		return false
	}
	c.accepted = acceptImage(pkt)
	c.logSecrets(secrets, pkt.Handshake().SrcConnID())
	return true
}

// acceptImageLen is an ACCEPT with AUTH without its trailer.
const acceptImageLen = proto.CommonHeaderLen + proto.HandshakeHeaderLen + proto.AuthAcceptLen

// acceptImage is an ACCEPT with AUTH as a repeat of it must be: every
// byte before the trailer but the Timestamp, which each send sets anew.
func acceptImage(pkt *proto.Packet) (img [acceptImageLen]byte) {
	copy(img[:], pkt.Bytes())
	proto.CommonHeader(img[:proto.CommonHeaderLen]).SetTimestamp(0)
	return img
}

// logSecrets writes the connection's two secrets to the key log, each
// under the DstConnID its packets carry (spec section 13.7): the peer's id
// on what this side sends.
func (c *Conn) logSecrets(s auth.Secrets, peerID uint32) {
	w := c.ep.cfg.KeyLog
	if w == nil {
		return
	}
	fmt.Fprintf(w, "MROCE_SECRET %08x %d %x\n", peerID, s.Suite, s.Send)
	fmt.Fprintf(w, "MROCE_SECRET %08x %d %x\n", c.localID, s.Suite, s.Recv)
}
