// Teardown. This file sends and answers CLOSE, fails connections and
// flushes their outstanding work (spec section 8.5).

package engine

import (
	"errors"
	"net/netip"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// Close ends the connection. The peer gets a CLOSE, and outstanding work is
// flushed.
func (c *Conn) Close() {
	if c.state == Closed {
		return
	}
	c.fail(ErrClosed, StatusFlushed, true)
	c.ep.flush()
}

// Abort ends the connection at once with an application's code, which the
// peer receives in a CLOSE APPLICATION (spec section 8.5). In-flight data
// is abandoned and outstanding work is flushed.
func (c *Conn) Abort(code uint32) {
	if c.state == Closed {
		return
	}
	c.fail(&AbortError{Code: code}, StatusFlushed, true)
	c.ep.flush()
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
	c.ep.sendClose(plane, netip.AddrPortFrom(c.remote[plane], c.peerPort), c.peerID, proto.CloseClosed, 0, c.session)
	var err error = &RemoteError{Reason: cl.Reason(), Detail: cl.Detail()}
	switch cl.Reason() {
	case proto.CloseNormal:
		err = ErrClosed
	case proto.CloseRefused:
		err = ErrRefused
	case proto.CloseApplication:
		err = &AbortError{Code: cl.Detail(), Remote: true}
	}
	c.fail(err, StatusFlushed, false)
}

// fail ends the connection with err. Every outstanding request completes
// with status st. The peer is told when tell is set.
func (c *Conn) fail(err error, st Status, tell bool) {
	if c.state == Closed {
		return
	}
	reason := proto.CloseNormal
	var detail uint32
	var re *RemoteError
	var pe *ProtocolError
	var ae *AbortError
	switch {
	case errors.Is(err, ErrTimeout):
		reason = proto.CloseTimeout
	case errors.As(err, &re) && re.Nack != 0:
		reason, detail = proto.CloseFatal, uint32(re.Nack)
	case errors.As(err, &pe):
		reason, detail = proto.CloseFatal, uint32(pe.Code)
	case errors.As(err, &ae) && !ae.Remote:
		reason, detail = proto.CloseApplication, ae.Code
	}
	if c.state == Accepting {
		c.ep.accepting--
	}
	c.state = Closed
	c.err = err
	c.hsTimer.Stop()
	c.progress.Stop()
	c.alive.Stop()
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

// flush completes every outstanding message with status st.
func (s *sender) flush(st Status, err error) {
	for i := range s.streams {
		q := &s.streams[i]
		for _, m := range q.queue[q.head:] {
			if m.failed || m.internal {
				continue // reported with its own error, or not the application's
			}
			wc := Completion{ID: m.wr.ID, Op: m.wr.Op, Status: st, Stream: uint16(i), Bytes: m.length, Err: err}
			if m.done {
				// Acknowledged in full and waiting behind an earlier
				// message, it did complete.
				wc.Status, wc.Err = StatusOK, nil
			}
			m.done = true
			if wc.Status != StatusOK || !m.wr.Unsignaled {
				s.c.report(wc)
			}
		}
		q.queue, q.head, q.sendIdx = nil, 0, 0
	}
	s.msgs = 0
	clear(s.reads)
	for _, p := range s.paths {
		p.timer.Stop()
	}
	if s.retry != nil {
		s.retry.Stop()
		s.paceT.Stop()
		s.headT.Stop()
	}
	if s.portT != nil {
		s.portT.Stop()
	}
	if s.planeT != nil {
		s.planeT.Stop()
	}
	if s.homeT != nil {
		s.homeT.Stop()
	}
	if s.c != nil && s.c.mtu != nil {
		s.c.mtu.timer.Stop()
	}
	if s.c != nil { // set once the connection is negotiated
		s.c.tp.stop()
	}
}

// flush completes every posted receive with a flush status. Shared receives
// taken but never filled go back to their queue.
func (r *receiver) flush(err error) {
	for i := range r.streams {
		st := &r.streams[i]
		if r.srq != nil {
			r.srq.giveBack(st.recvs[st.head:])
		} else {
			for _, rw := range st.recvs[st.head:] {
				r.c.report(Completion{ID: rw.id, Op: OpRecv, Status: StatusFlushed, Stream: uint16(i), Err: err})
			}
		}
		st.recvs, st.head = nil, 0
	}
}

// sendClose sends a CLOSE to dst, protected by session when the
// connection has keys (spec section 13.4), with its CRC when not.
func (e *Endpoint) sendClose(plane int, dst netip.AddrPort, peerID uint32, reason proto.CloseReason, detail uint32, session *auth.Session) {
	buf := e.port.Buffer()
	var pkt proto.Packet
	build := proto.Build
	if session != nil {
		build = proto.BuildProtected
	}
	if err := build(&pkt, buf[:cap(buf)], proto.TypeClose, 0, 0); err != nil {
		panic(err)
	}
	pkt.Common.SetDstConnID(peerID)
	pkt.Common.SetTimestamp(uint32(e.clock.Now()))
	pkt.Close().SetReason(reason)
	pkt.Close().SetDetail(detail)
	data := pkt.Bytes()
	if session == nil {
		data = e.seal(&pkt)
	} else if session.Seal(data, e.clock.Now()) != nil {
		e.stats.PhaseSpent++
		return
	}
	e.send(link.Datagram{
		Src:  netip.AddrPortFrom(e.cfg.Planes[plane], e.cfg.SourcePorts[0]),
		Dst:  dst,
		DSCP: proto.DefaultDSCP(proto.TypeClose),
		Data: data,
	})
}

// closedConn is a connection that ended recently. Its id is quarantined for
// 2 MPL, so packets for it are dropped and a CLOSE for it is answered with
// CLOSED. Its own CLOSE is resent until the peer acknowledges it (spec
// section 8.5).
type closedConn struct {
	peerID  uint32
	plane   int
	dst     netip.AddrPort
	reason  proto.CloseReason
	detail  uint32
	tries   int
	done    bool // the peer acknowledged our CLOSE, or we were not to send one
	expires clock.Time
	timer   clock.Timer
	session *auth.Session // the connection's keys, which its CLOSEs in quarantine use; nil without them
}

// forget removes a connection that ended and quarantines its id. When tell
// is set it sends the connection's CLOSE and keeps resending it.
func (e *Endpoint) forget(c *Conn, tell bool, reason proto.CloseReason, detail uint32) {
	delete(e.conns, c.localID)
	if m := c.rcv.share; m != nil {
		m.Leave()
	}
	if m := c.snd.nicShare; m != nil {
		m.Leave()
	}
	now := e.clock.Now()
	if !c.initiator {
		delete(e.accepted, c.acceptKey)
		e.closedKey[c.acceptKey] = now.Add(2 * e.cfg.MPL)
	}
	for id, cc := range e.closed { // sweep what expired
		if now >= cc.expires && (cc.done || cc.tries > closeResends) {
			cc.timer.Stop()
			delete(e.closed, id)
		}
	}
	for k, until := range e.closedKey {
		if now >= until {
			delete(e.closedKey, k)
		}
	}
	p := c.firstPlane()
	to := c.remote[p]
	if !c.knows(p) && !c.initiator {
		p, to = c.hsPlane, c.hsReply // half-open, it knows no plane yet: where its ACCEPTs went
	}
	cc := &closedConn{peerID: c.peerID, plane: p, dst: netip.AddrPortFrom(to, c.peerPort),
		reason: reason, detail: detail, done: !tell || c.peerID == 0, expires: now.Add(2 * e.cfg.MPL),
		session: c.session}
	e.closed[c.localID] = cc
	if !cc.done {
		cc.timer = e.clock.NewTimer(func() { e.resendClose(cc) })
		e.resendClose(cc)
	} else {
		cc.timer = e.clock.NewTimer(func() {})
	}
}

func (e *Endpoint) resendClose(cc *closedConn) {
	if cc.done || cc.tries > closeResends {
		return
	}
	cc.tries++
	e.sendClose(cc.plane, cc.dst, cc.peerID, cc.reason, cc.detail, cc.session)
	cc.timer.Reset(e.clock.Now().Add(closeInterval))
	e.flush()
}

// onClosedConn handles a packet for a quarantined id.
func (e *Endpoint) onClosedConn(cc *closedConn, pkt *proto.Packet, plane int) {
	if cc.session != nil && !pkt.Common.Protected() {
		e.stats.Unprotected++ // its keys are still here, and only they speak for it
		return
	}
	e.stats.Quarantined++
	if pkt.Type() != proto.TypeClose {
		return
	}
	if pkt.Close().Reason() == proto.CloseClosed {
		cc.done = true
		cc.timer.Stop()
		return
	}
	e.sendClose(plane, cc.dst, cc.peerID, proto.CloseClosed, 0, cc.session)
}
