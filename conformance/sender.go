package conformance

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mroce/mroce/proto"
)

// SenderProbe tests a requester, a sender of data, from the wire. It is
// the acceptor of one connection, written directly against package proto.
// It answers the requester's CONNECT and keeps what a receiver keeps,
// which is the DSNs received and each path's highest PSN and bitvector.
// It sends the ACKs and NACKs a case crafts, and reads how the sender
// reacts.
type SenderProbe struct {
	conn    *net.UDPConn
	start   time.Time
	myID    uint32
	peerID  uint32
	connect proto.HandshakeHeader
	peer    netip.AddrPort // the requester's first address and its ReplyPort
	buf     []byte
	cum     uint32          // the oldest DSN not received
	got     map[uint32]bool // DSNs received at or after cum
	paths   map[uint8]*probePath
	hint    uint64         // RateHint of the ACKs sent
	marking map[uint8]bool // paths whose data packets count as arrived with CE
	Timeout time.Duration
	// AcceptEdit, when set, changes the ACCEPT before it is sent, for a
	// case of an ACCEPT the requester must refuse.
	AcceptEdit func(accept, connect proto.HandshakeHeader)
}

type probePath struct {
	epoch   uint8
	highest uint32
	has     bool
	psns    map[uint32]bool // received, within 256 below highest
	lastTS  uint32
	ce      uint32 // CECount, the data packets counted as arrived with CE
}

// ListenSender opens a SenderProbe on local. Port 0 takes any.
func ListenSender(local netip.AddrPort) (*SenderProbe, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(local))
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	// The requester sends at full speed while the probe answers packet
	// by packet. A large buffer keeps the kernel from dropping what the
	// probe has not read yet, which the probe would never see.
	c.SetReadBuffer(8 << 20)
	return &SenderProbe{conn: c, start: time.Now(), myID: random32() | 1, buf: make([]byte, 65536),
		got: map[uint32]bool{}, paths: map[uint8]*probePath{}, hint: proto.RateNoLimit, Timeout: 5 * time.Second}, nil
}

// Addr is where the probe listens.
func (s *SenderProbe) Addr() netip.AddrPort { return s.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// Close closes the probe's socket.
func (s *SenderProbe) Close() error { return s.conn.Close() }

func (s *SenderProbe) now() uint32 { return uint32(time.Since(s.start).Nanoseconds()) }

// read returns the next packet for the probe's connection, decoded and
// CRC-checked, or ErrTimeout. Before there is a connection it returns a
// CONNECT.
func (s *SenderProbe) read(deadline time.Time) (*proto.Packet, netip.AddrPort, error) {
	for {
		s.conn.SetReadDeadline(deadline)
		n, from, err := s.conn.ReadFromUDPAddrPort(s.buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, from, ErrTimeout
			}
			return nil, from, err
		}
		var pkt proto.Packet
		if pkt.Decode(append([]byte(nil), s.buf[:n]...)) != nil {
			continue
		}
		if pkt.Type() == proto.TypeProbe && s.peerID != 0 && pkt.Common.DstConnID() == s.myID {
			s.answerProbe(&pkt, from)
			continue
		}
		if pkt.Type() == proto.TypeConnect || pkt.Common.DstConnID() == s.myID {
			return &pkt, from, nil
		}
	}
}

// answerProbe sends a PROBE_REPLY back over the probe's own 5-tuple, as
// spec section 5.10 asks. A receiver answers its sender's probes, or a
// path the sender suspects would never come back into use.
func (s *SenderProbe) answerProbe(pkt *proto.Packet, from netip.AddrPort) {
	var out proto.Packet
	if proto.Build(&out, make([]byte, 256), proto.TypeProbeReply, 0, 0) != nil {
		return
	}
	out.Common.SetDstConnID(s.peerID)
	out.Common.SetPathID(pkt.Common.PathID())
	out.Common.SetEpoch(pkt.Common.Epoch())
	out.Common.SetTimestamp(s.now())
	r := out.ProbeReply()
	r.SetProbeID(pkt.Probe().ProbeID())
	r.SetEchoTimestamp(pkt.Common.Timestamp())
	s.conn.WriteToUDPAddrPort(out.Seal(), from)
}

// Accept waits for the requester's CONNECT and answers it with an ACCEPT.
// It grants what the requester asks but at most 4 paths, so that a case's
// arithmetic stays small, with a window of 4,096 DSNs and no rate limit.
func (s *SenderProbe) Accept() error {
	deadline := time.Now().Add(s.Timeout)
	for {
		pkt, from, err := s.read(deadline)
		if err != nil {
			return fmt.Errorf("conformance: no CONNECT: %w", err)
		}
		if pkt.Type() != proto.TypeConnect {
			continue
		}
		h := pkt.Handshake()
		if reason := checkConnect(h); reason != "" {
			return fmt.Errorf("conformance: a malformed CONNECT: %s (paths %d, streams %d, MaxPacket %d, reply port %d, mode %d)",
				reason, h.Paths(), h.Streams(), h.MaxPacket(), h.ReplyPort(), h.Mode())
		}
		s.connect = append(proto.HandshakeHeader(nil), h...)
		s.peerID = h.SrcConnID()
		s.peer = netip.AddrPortFrom(from.Addr(), h.ReplyPort())
		s.cum = h.InitialDSN()
		var out proto.Packet
		if err := proto.Build(&out, make([]byte, 256), proto.TypeAccept, 0, 0); err != nil {
			return err
		}
		a := out.Handshake()
		a.SetSrcConnID(s.myID)
		a.SetInitialPSN(random32())
		a.SetInitialDSN(random32())
		a.SetDSNWindow(4096)
		a.SetMaxPacket(h.MaxPacket())
		a.SetPaths(min(h.Paths(), 4))
		a.SetStreams(h.Streams())
		a.SetReplyPort(s.Addr().Port())
		a.SetMaxReadsOut(h.MaxReadsIn())
		a.SetMaxReadsIn(h.MaxReadsOut())
		a.SetInboundCapacity(proto.RateNoLimit)
		if s.AcceptEdit != nil {
			s.AcceptEdit(a, h)
		}
		out.Common.SetDstConnID(s.peerID)
		out.Common.SetTimestamp(s.now())
		_, err = s.conn.WriteToUDPAddrPort(out.Seal(), s.peer)
		return err
	}
}

// checkConnect applies the handshake's rules of spec section 8.1 to a
// CONNECT. It returns what breaks them, or "".
func checkConnect(h proto.HandshakeHeader) string {
	switch {
	case h.SrcConnID() == 0:
		return "SrcConnID 0"
	case h.Paths() < 1 || h.Streams() < 1:
		return "no paths or streams"
	case h.MaxPacket() < 256:
		return "MaxPacket under 256"
	case h.ReplyPort() == 0:
		return "reply port 0"
	case h.Mode() != proto.ModeMultipath:
		return "not multipath mode"
	}
	return ""
}

// Arrival is a data packet the probe received.
type Arrival struct {
	At                time.Time
	Type              proto.Type
	Path, Epoch       uint8
	PSN, DSN          uint32
	Flags             proto.Flags
	Timestamp, Length uint32
}

// NextData returns the next data packet within d, without recording it.
// The case decides whether to Record it, refuse it with Nack, or treat it
// as lost. Other packets of the connection are dropped, except CLOSE,
// which ends it with ErrPeerClosed.
func (s *SenderProbe) NextData(d time.Duration) (Arrival, *proto.Packet, error) {
	deadline := time.Now().Add(d)
	for {
		pkt, _, err := s.read(deadline)
		if err != nil {
			return Arrival{}, nil, err
		}
		switch t := pkt.Type(); {
		case t == proto.TypeClose:
			return Arrival{}, pkt, ErrPeerClosed
		case t.IsData():
			h := pkt.Common
			return Arrival{At: time.Now(), Type: t, Path: h.PathID(), Epoch: h.Epoch(), PSN: h.PSN(), DSN: h.DSN(),
				Flags: h.Flags(), Timestamp: h.Timestamp(), Length: uint32(len(pkt.Payload))}, pkt, nil
		}
	}
}

// ErrPeerClosed reports that the requester sent CLOSE.
var ErrPeerClosed = errors.New("conformance: the requester closed the connection")

// Record notes a data packet as received, its DSN and its PSN on its
// path.
func (s *SenderProbe) Record(a Arrival) {
	if proto.SeqLessEq(s.cum, a.DSN) {
		s.got[a.DSN] = true
		for s.got[s.cum] {
			delete(s.got, s.cum)
			s.cum++
		}
	}
	p := s.paths[a.Path]
	if p == nil {
		p = &probePath{psns: map[uint32]bool{}}
		s.paths[a.Path] = p
	}
	if !p.has || proto.SeqLess(p.highest, a.PSN) {
		p.highest, p.epoch, p.has = a.PSN, a.Epoch, true
	}
	p.psns[a.PSN] = true
	p.lastTS = a.Timestamp
	if s.marking[a.Path] {
		p.ce++
	}
}

// MarkCE makes every data packet recorded on path from now on count as
// having arrived with CE. The ACKs' CECount for the path rises with each,
// as if a queue on its route were past its marking threshold.
func (s *SenderProbe) MarkCE(path uint8) {
	if s.marking == nil {
		s.marking = map[uint8]bool{}
	}
	s.marking[path] = true
}

// SetHint sets the RateHint of the ACKs from now on, in bytes/s. A hint
// of 0 stops new data, and proto.RateNoLimit sets no limit.
func (s *SenderProbe) SetHint(h uint64) { s.hint = h }

// Ack sends an ACK with CumDSN and a record for every path that has
// received something.
func (s *SenderProbe) Ack() error {
	var pkt proto.Packet
	n := len(s.paths)
	if err := proto.Build(&pkt, make([]byte, 2048), proto.TypeAck, n, 0); err != nil {
		return err
	}
	pkt.Common.SetDstConnID(s.peerID)
	pkt.Common.SetTimestamp(s.now())
	pkt.Ack().SetCumDSN(s.cum)
	pkt.Ack().SetRateHint(s.hint)
	i := 0
	for id, p := range s.paths {
		rec := pkt.AckRecord(i)
		i++
		rec.SetPathID(id)
		rec.SetEpoch(p.epoch)
		rec.SetHighestPSN(p.highest)
		rec.SetEchoTimestamp(p.lastTS)
		rec.SetCECount(p.ce)
		for psn := range p.psns {
			if k := p.highest - 1 - psn; psn != p.highest && k < 256 {
				rec.MarkReceived(int(k))
			}
		}
	}
	_, err := s.conn.WriteToUDPAddrPort(pkt.Seal(), s.peer)
	return err
}

// Nack refuses data packet a with code, so that it is neither placed nor
// recorded. retryAfter, in µs, serves the retryable codes.
func (s *SenderProbe) Nack(a Arrival, pkt *proto.Packet, code proto.NackCode, retryAfter uint16) error {
	var out proto.Packet
	if err := proto.Build(&out, make([]byte, 256), proto.TypeNack, 0, 0); err != nil {
		return err
	}
	out.Common.SetDstConnID(s.peerID)
	out.Common.SetTimestamp(s.now())
	n := out.Nack()
	n.SetCode(code)
	n.SetPathID(a.Path)
	n.SetEpoch(a.Epoch)
	n.SetPSN(a.PSN)
	n.SetDSN(a.DSN)
	n.SetRetryAfter(retryAfter)
	switch {
	case a.Type == proto.TypeSend:
		n.SetStream(pkt.Send().Stream())
		n.SetMSN(pkt.Send().MSN())
	case a.Type == proto.TypeWrite || a.Type == proto.TypeWriteImm:
		n.SetStream(pkt.Write().Stream())
		n.SetMSN(pkt.Write().MSN())
	}
	_, err := s.conn.WriteToUDPAddrPort(out.Seal(), s.peer)
	return err
}
