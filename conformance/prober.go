package conformance

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/proto"
)

// Target is the responder under test. It gives where the responder
// listens and a region it grants remote write on.
type Target struct {
	Addr    netip.AddrPort
	RKey    uint64
	Len     uint64 // the region's length
	Streams int    // streams to ask for, of which the responder may grant fewer
	// Auth, when set, are the credentials of a responder in the
	// authenticated mode (docs/spec.md section 13). The prober then speaks
	// the mode on every connection: its handshake carries the key
	// exchange, and every packet after it is protected.
	Auth *auth.Credentials
}

// Prober is one connection to the responder, driven packet by packet.
type Prober struct {
	conn    *net.UDPConn
	target  Target
	start   time.Time
	myID    uint32 // our SrcConnID, the DstConnID of what the responder sends us
	peerID  uint32 // the responder's SrcConnID, the DstConnID of what we send
	accept  proto.HandshakeHeader
	psn     [4]uint32 // the next PSN of each of our paths
	epoch   [4]uint8  // each path's epoch
	dsn     uint32    // the next DSN
	msn     uint32    // the next MSN on stream 0
	buf     []byte
	offer   proto.Capabilities // what the CONNECT offers
	Window  uint32             // the DSN window we announce as a receiver
	Timeout time.Duration
	// The authenticated mode, when the target has credentials: the
	// handshake's half of ours, and the keys it made.
	initiation *auth.Initiation
	session    *auth.Session
}

// Paths is how many paths the prober asks for.
const Paths = 4

func random32() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// Dial opens a connection to target from local, running the handshake of
// spec section 8.1. local is an address on the responder's first plane,
// and port 0 takes any. initialPSN is the first PSN of our paths. A test
// of sequence wrap picks one near 2^32.
func Dial(target Target, local netip.Addr, initialPSN uint32) (*Prober, error) {
	return DialOffering(target, local, initialPSN, 0)
}

// DialOffering is Dial with a CONNECT that offers the capabilities offer
// (spec section 8.3), and AUTH beside them when the target has
// credentials. The ACCEPT says which the responder grants.
func DialOffering(target Target, local netip.Addr, initialPSN uint32, offer proto.Capabilities) (*Prober, error) {
	p, got, err := answer(target, local, initialPSN, offer)
	if err != nil {
		return nil, fmt.Errorf("conformance: no ACCEPT: %w", err)
	}
	c := p.conn
	if got.Type() == proto.TypeClose {
		c.Close()
		return nil, fmt.Errorf("conformance: the responder refused with CLOSE %v (detail %d)", got.Close().Reason(), got.Close().Detail())
	}
	if err := p.establish(got); err != nil {
		c.Close()
		return nil, err
	}
	return p, nil
}

// establish takes the ACCEPT got: the keys of the authenticated mode when
// it is on, the responder's id, and the third message, an ACK with no
// records, which establishes the responder's side.
func (p *Prober) establish(got *proto.Packet) error {
	if err := p.finishAuth(got); err != nil {
		return err
	}
	p.accept = append(proto.HandshakeHeader(nil), got.Handshake()...)
	p.peerID = p.accept.SrcConnID()
	return p.SendAck(p.accept.InitialDSN())
}

// answer sends a CONNECT that offers offer, and AUTH with the target's
// credentials when it has them, and returns the prober and the ACCEPT or
// CLOSE that answers it, RETRYs taken. On an error the prober is closed.
func answer(target Target, local netip.Addr, initialPSN uint32, offer proto.Capabilities) (*Prober, *proto.Packet, error) {
	p, err := newProber(target, local, initialPSN, offer)
	if err != nil {
		return nil, nil, err
	}
	c := p.conn
	got, err := p.connect(initialPSN, nil)
	// A responder under pressure asks for its token back (spec section
	// 8.1). The prober takes at most 3 RETRYs, as the spec bounds them.
	for retries := 0; err == nil && got.Type() == proto.TypeRetry; retries++ {
		if retries == 3 {
			err = errors.New("a fourth RETRY")
			break
		}
		tok := got.Retry().Token()
		got, err = p.connect(initialPSN, &tok)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return p, got, nil
}

// newProber opens the prober's socket on local and draws its connection
// id and first DSN. Its CONNECT offers offer, and AUTH when the target has
// credentials. It sends nothing.
func newProber(target Target, local netip.Addr, initialPSN uint32, offer proto.Capabilities) (*Prober, error) {
	if target.Auth != nil {
		offer |= proto.CapAuth
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	p := &Prober{conn: c, target: target, start: time.Now(), myID: random32() | 1, buf: make([]byte, 65536),
		Window: 1024, Timeout: 2 * time.Second, dsn: random32(), offer: offer}
	for i := range p.psn {
		p.psn[i] = initialPSN
	}
	return p, nil
}

// connect sends the CONNECT, with token as its payload unless it is nil,
// and returns the ACCEPT, CLOSE or RETRY that answers it.
func (p *Prober) connect(initialPSN uint32, token *[proto.TokenLen]byte) (*proto.Packet, error) {
	b, err := p.connectPacket(initialPSN, token)
	if err != nil {
		return nil, err
	}
	if err := p.send(b); err != nil {
		return nil, err
	}
	return p.Expect(func(q *proto.Packet) bool {
		return q.Type() == proto.TypeAccept || q.Type() == proto.TypeClose || q.Type() == proto.TypeRetry && q.Common.DstConnID() == p.myID
	})
}

// connectPacket is the prober's CONNECT, whose ReplyPort is its socket's.
func (p *Prober) connectPacket(initialPSN uint32, token *[proto.TokenLen]byte) ([]byte, error) {
	var pkt proto.Packet
	b := make([]byte, 256)
	hello := 0
	if p.target.Auth != nil {
		hello = proto.AuthHelloLen
	}
	payload := hello
	if token != nil {
		payload += proto.TokenLen
	}
	if err := proto.Build(&pkt, b, proto.TypeConnect, 0, payload); err != nil {
		return nil, err
	}
	if token != nil {
		copy(pkt.Payload[hello:], token[:])
	}
	h := pkt.Handshake()
	h.SetSrcConnID(p.myID)
	h.SetInitialPSN(initialPSN)
	h.SetInitialDSN(p.dsn)
	h.SetDSNWindow(p.Window)
	h.SetMaxPacket(4160)
	h.SetPaths(Paths)
	h.SetStreams(uint16(max(1, p.target.Streams)))
	h.SetReplyPort(p.conn.LocalAddr().(*net.UDPAddr).AddrPort().Port())
	h.SetMaxReadsOut(4)
	h.SetMaxReadsIn(4)
	h.SetInboundCapacity(proto.RateNoLimit)
	h.SetCapabilities(p.offer)
	pkt.Common.SetTimestamp(p.now())
	if p.target.Auth != nil { // the key exchange binds the header, so it comes last (spec section 13.3)
		if p.initiation == nil {
			in, err := auth.Initiate(p.target.Auth, rand.Reader, h)
			if err != nil {
				return nil, err
			}
			p.initiation = in
		}
		copy(pkt.Payload, p.initiation.Hello())
	}
	return pkt.Seal(), nil
}

// finishAuth checks the ACCEPT's key exchange when the prober speaks the
// authenticated mode, and makes its keys.
func (p *Prober) finishAuth(accept *proto.Packet) error {
	if p.initiation == nil {
		return nil
	}
	acc, ok := accept.AuthAccept()
	if !ok {
		return errors.New("conformance: the ACCEPT has no AuthAccept, so the responder is not in the authenticated mode")
	}
	secrets, err := p.initiation.Finish(accept.Handshake(), acc)
	if err != nil {
		return fmt.Errorf("conformance: the ACCEPT's key exchange does not confirm (spec section 13.3): %w", err)
	}
	s, err := auth.NewSession(secrets, 100*time.Millisecond)
	if err != nil {
		return err
	}
	p.session = s
	return nil
}

// Authenticated reports whether the prober speaks the authenticated mode
// on its connection.
func (p *Prober) Authenticated() bool { return p.session != nil }

// build lays out a packet the prober sends on its connection: protected
// once it has keys.
func (p *Prober) build(pkt *proto.Packet, t proto.Type, records, payload int) error {
	if p.session != nil {
		return proto.BuildProtected(pkt, p.buf, t, records, payload)
	}
	return proto.Build(pkt, p.buf, t, records, payload)
}

// seal finishes a packet laid out by build: sealed by the keys, or with
// its CRC.
func (p *Prober) seal(pkt *proto.Packet) ([]byte, error) {
	if p.session != nil {
		return pkt.Bytes(), p.session.Seal(pkt.Bytes(), 0)
	}
	return pkt.Seal(), nil
}

// Close closes the prober's socket. The responder is not told, and its
// connection times out.
func (p *Prober) Close() error { return p.conn.Close() }

// Accept is the responder's ACCEPT.
func (p *Prober) Accept() proto.HandshakeHeader { return p.accept }

// ConnID is the prober's connection id.
func (p *Prober) ConnID() uint32 { return p.myID }

func (p *Prober) now() uint32 { return uint32(time.Since(p.start).Nanoseconds()) }

func (p *Prober) send(b []byte) error {
	_, err := p.conn.WriteToUDPAddrPort(b, p.target.Addr)
	return err
}

// SendAck sends an ACK with no records.
func (p *Prober) SendAck(cumDSN uint32) error {
	var pkt proto.Packet
	if err := p.build(&pkt, proto.TypeAck, 0, 0); err != nil {
		return err
	}
	pkt.Common.SetDstConnID(p.peerID)
	pkt.Common.SetTimestamp(p.now())
	pkt.Ack().SetCumDSN(cumDSN)
	pkt.Ack().SetRateHint(proto.RateNoLimit)
	b, err := p.seal(&pkt)
	if err != nil {
		return err
	}
	return p.send(b)
}

// Write describes one crafted WRITE packet. Zero fields take the prober's
// defaults, which are the next PSN of the path, the next DSN and the
// target's key.
type Write struct {
	Path, Epoch   uint8
	ExplicitEpoch bool // use Epoch rather than the path's current one
	PSN, DSN      uint32
	ExplicitPSN   bool // use PSN rather than the path's next, which advances
	ExplicitDSN   bool // use DSN rather than the next, which advances
	RKey          uint64
	RemoteOffset  uint64
	MsgLen        uint32 // 0 takes the payload's length, a one-packet message
	MsgOffset     uint32
	Stream        uint16
	MSN           uint32
	ExplicitMSN   bool
	Payload       []byte
	Flags         proto.Flags
	Version       uint8
	CorruptCRC    bool // the trailer's last byte changed: the CRC, or a protected packet's tag
	Clear         bool // sent unprotected, with a CRC, on a connection in the authenticated mode
}

// Sent is what a crafted packet carried.
type Sent struct {
	Path, Epoch uint8
	PSN, DSN    uint32
}

// SendWrite sends a crafted WRITE and returns its path, PSN and DSN.
func (p *Prober) SendWrite(w Write) (Sent, error) {
	var pkt proto.Packet
	build := p.build
	if w.Clear {
		build = func(pkt *proto.Packet, t proto.Type, records, payload int) error {
			return proto.Build(pkt, p.buf, t, records, payload)
		}
	}
	if err := build(&pkt, proto.TypeWrite, 0, len(w.Payload)); err != nil {
		return Sent{}, err
	}
	copy(pkt.Payload, w.Payload)
	if !w.ExplicitEpoch {
		w.Epoch = p.epoch[w.Path%Paths]
	}
	s := p.number(&pkt, w.Path, w.Epoch, w.ExplicitPSN, w.PSN, w.ExplicitDSN, w.DSN, w.Flags)
	if !w.ExplicitMSN {
		w.MSN = p.msn
		p.msn++
	}
	if w.RKey == 0 {
		w.RKey = p.target.RKey
	}
	if w.MsgLen == 0 {
		w.MsgLen = uint32(len(w.Payload))
	}
	wh := pkt.Write()
	wh.SetRKey(w.RKey)
	wh.SetRemoteOffset(w.RemoteOffset)
	wh.SetMsgLen(w.MsgLen)
	wh.SetMsgOffset(w.MsgOffset)
	wh.SetStream(w.Stream)
	wh.SetMSN(w.MSN)
	pkt.Common.SetVersion(w.Version)
	var b []byte
	var err error
	if w.Clear {
		b = pkt.Seal()
	} else if b, err = p.seal(&pkt); err != nil {
		return s, err
	}
	if w.CorruptCRC {
		b[len(b)-1] ^= 0xFF
	}
	return s, p.send(b)
}

// number fills a data packet's common header: its path and epoch, the
// path's next PSN and the next DSN unless explicit, and its flags.
func (p *Prober) number(pkt *proto.Packet, path, epoch uint8, explicitPSN bool, psn uint32, explicitDSN bool, dsn uint32, flags proto.Flags) Sent {
	s := Sent{Path: path, Epoch: epoch, PSN: psn, DSN: dsn}
	if !explicitPSN {
		s.PSN = p.psn[path%Paths]
		p.psn[path%Paths]++
	}
	if !explicitDSN {
		s.DSN = p.dsn
		p.dsn++
	}
	h := pkt.Common
	h.SetDstConnID(p.peerID)
	h.SetPathID(path)
	h.SetEpoch(epoch)
	h.SetPSN(s.PSN)
	h.SetDSN(s.DSN)
	h.SetFlags(flags)
	h.SetTimestamp(p.now())
	return s
}

// Atomic describes one crafted FETCH_ADD or CMP_SWAP on stream 0 of the
// target's region (spec section 5.12). It takes the path's next PSN, and
// the next DSN and MSN unless Again is set: then it repeats the request
// sent as Sent, under its DSN and MSN, as a retransmission.
type Atomic struct {
	Type         proto.Type
	Path         uint8
	RemoteOffset uint64
	Operand      uint64
	Compare      uint64
	Tag          uint32
	Again        bool
	Sent         Sent
	MSN          uint32
}

// SendAtomic sends a crafted atomic request with AR and returns its path,
// PSN and DSN, and the MSN it took.
func (p *Prober) SendAtomic(a Atomic) (Sent, uint32, error) {
	var pkt proto.Packet
	if err := p.build(&pkt, a.Type, 0, 0); err != nil {
		return Sent{}, 0, err
	}
	flags := proto.FlagAckRequest
	if a.Again {
		flags |= proto.FlagRetransmit
	} else {
		a.MSN = p.msn
		p.msn++
	}
	s := p.number(&pkt, a.Path, p.epoch[a.Path%Paths], false, 0, a.Again, a.Sent.DSN, flags)
	ah := pkt.Atomic()
	ah.SetMSN(a.MSN)
	ah.SetRKey(p.target.RKey)
	ah.SetRemoteOffset(a.RemoteOffset)
	ah.SetOperand(a.Operand)
	ah.SetCompare(a.Compare)
	ah.SetAtomicTag(a.Tag)
	b, err := p.seal(&pkt)
	if err != nil {
		return s, a.MSN, err
	}
	return s, a.MSN, p.send(b)
}

// Repath moves path to its next epoch, as a new source port would.
func (p *Prober) Repath(path uint8) { p.epoch[path%Paths] = (p.epoch[path%Paths] + 1) & 3 }

// NextDSN is the DSN the next default WRITE takes.
func (p *Prober) NextDSN() uint32 { return p.dsn }

// NextPSN is the PSN the next default WRITE on path takes.
func (p *Prober) NextPSN(path uint8) uint32 { return p.psn[path%Paths] }

// ErrTimeout is Expect's error when nothing matching arrived in time.
var ErrTimeout = errors.New("conformance: nothing arrived in time")

// Expect returns the first packet for this connection that want accepts,
// decoded and CRC-checked, or ErrTimeout after p.Timeout. Packets it
// does not want are dropped.
func (p *Prober) Expect(want func(*proto.Packet) bool) (*proto.Packet, error) {
	return p.ExpectWithin(p.Timeout, want)
}

// ExpectWithin is Expect with its own timeout.
func (p *Prober) ExpectWithin(d time.Duration, want func(*proto.Packet) bool) (*proto.Packet, error) {
	deadline := time.Now().Add(d)
	for {
		p.conn.SetReadDeadline(deadline)
		n, _, err := p.conn.ReadFromUDPAddrPort(p.buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, ErrTimeout
			}
			return nil, err
		}
		b := append([]byte(nil), p.buf[:n]...)
		var pkt proto.Packet
		switch {
		case len(b) >= proto.MinPacketLen && proto.CommonHeader(b).Protected():
			if p.session == nil || p.session.Open(b, 0) != nil || pkt.DecodeOpened(b) != nil {
				continue
			}
		case pkt.Decode(b) != nil:
			continue
		}
		if pkt.Type() != proto.TypeConnect && pkt.Type() != proto.TypeAccept && pkt.Type() != proto.TypeClose && pkt.Common.DstConnID() != p.myID {
			continue
		}
		if pkt.Type() == proto.TypeAccept && p.peerID != 0 {
			p.SendAck(p.accept.InitialDSN()) // a resent ACCEPT is answered again, by spec section 8.1
			if !want(&pkt) {
				continue
			}
		}
		if want(&pkt) {
			return &pkt, nil
		}
	}
}

// Record returns pkt's ACK record for path; a packet that is not an ACK
// has none.
func Record(pkt *proto.Packet, path uint8) (proto.AckRecord, bool) {
	if pkt.Type() != proto.TypeAck {
		return nil, false
	}
	for i := 0; i < int(pkt.Ack().RecordCount()); i++ {
		if r := pkt.AckRecord(i); r.PathID() == path {
			return r, true
		}
	}
	return nil, false
}

// Received reports whether record r says PSN psn arrived. By spec section
// 5.5 it did when it is the highest or its bit is set.
func Received(r proto.AckRecord, psn uint32) bool {
	h := r.HighestPSN()
	if psn == h {
		return true
	}
	k := h - 1 - psn // bit k is PSN HighestPSN - 1 - k
	if k >= 256 {
		return false
	}
	return r.Received(int(k))
}
