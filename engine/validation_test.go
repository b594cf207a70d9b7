package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// Address validation under CONNECT pressure: the RETRY of spec section
// 8.1.

// sentDatagram is one datagram an endpoint sent, its bytes copied.
type sentDatagram struct {
	dst netip.AddrPort
	b   []byte
	pkt proto.Packet
}

// capturePort records every datagram an endpoint sends and passes it on.
// It does not check CRCs.
type capturePort struct {
	link.Port
	sent []sentDatagram
}

func (p *capturePort) Send(batch []link.Datagram) {
	for _, d := range batch {
		s := sentDatagram{dst: d.Dst, b: append([]byte(nil), d.Data...)}
		err := s.pkt.DecodeNoCRC(s.b) // a simulation's packets may carry no CRC, nor their payload
		if d.Pad != 0 {
			err = s.pkt.DecodePlaceholder(s.b, int(d.Pad))
		}
		if err == nil {
			p.sent = append(p.sent, s)
		}
	}
	p.Port.Send(batch)
}

// of lists the packets of type t sent so far.
func (p *capturePort) of(t proto.Type) []sentDatagram {
	var out []sentDatagram
	for _, s := range p.sent {
		if s.pkt.Type() == t {
			out = append(out, s)
		}
	}
	return out
}

// capture puts a capturePort in front of host h's endpoint.
func (n *testNet) capture(h int) *capturePort {
	cp := &capturePort{Port: n.hosts[h].ep.port}
	n.hosts[h].ep.port = cp
	return cp
}

// connectFrom hands host h's endpoint a CONNECT with SrcConnID id from
// src, to the default port, with token as its payload when it is not nil.
// It returns the CONNECT's length.
func connectFrom(n *testNet, h int, src netip.AddrPort, id uint32, token *[proto.TokenLen]byte) int {
	data := connectBytes(n, src, id, token)
	d := link.Datagram{Src: src, Dst: netip.AddrPortFrom(netem.Addr(0, h), proto.DefaultPort), Data: data}
	n.hosts[h].ep.Receive(&d, n.sim.Now())
	return len(data)
}

// connectBytes is connectFrom's CONNECT. Its initial PSN and DSN are
// src's address and port, so that CONNECTs from two sources are two
// attempts, as their random values would make them, and one sent again
// from the same source is a resend.
func connectBytes(n *testNet, src netip.AddrPort, id uint32, token *[proto.TokenLen]byte) []byte {
	payload := 0
	if token != nil {
		payload = proto.TokenLen
	}
	var pkt proto.Packet
	if err := proto.Build(&pkt, make([]byte, 512), proto.TypeConnect, 0, payload); err != nil {
		n.t.Fatal(err)
	}
	hs := pkt.Handshake()
	hs.SetSrcConnID(id)
	hs.SetInitialPSN(binary.BigEndian.Uint32(src.Addr().AsSlice()[len(src.Addr().AsSlice())-4:]))
	hs.SetInitialDSN(uint32(src.Port()))
	hs.SetDSNWindow(64)
	hs.SetMaxPacket(4160)
	hs.SetPaths(1)
	hs.SetStreams(1)
	hs.SetReplyPort(src.Port())
	hs.SetInboundCapacity(proto.CapacityUnknown)
	if token != nil {
		copy(pkt.Payload, token[:])
	}
	return pkt.Seal()
}

// forgedSource is the i-th of many addresses no host of the fabric has.
func forgedSource(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}), 4797)
}

// fillHalfOpen makes k handshakes half-open at host h from forged
// sources, as a flood below the threshold would.
func fillHalfOpen(n *testNet, h, k int) {
	n.t.Helper()
	e := n.hosts[h].ep
	for i := 0; i < k; i++ {
		connectFrom(n, h, forgedSource(i), uint32(5000+i), nil)
	}
	if e.accepting != k {
		n.t.Fatalf("%d handshakes half-open after %d forged CONNECTs, want %d", e.accepting, k, k)
	}
}

// (1) Under pressure, a CONNECT from a forged source makes no state and
// draws exactly one RETRY, to its source address and ReplyPort, no larger
// than the CONNECT; nothing follows on a timer.
func TestRetryUnderPressureMakesNoState(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{MaxAccepting: 8, RetryAt: 4})
	e := n.hosts[1].ep
	e.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	fillHalfOpen(n, 1, 4)
	cp := n.capture(1)
	victim := netip.AddrPortFrom(netip.MustParseAddr("203.0.113.9"), 7777)
	conns, accepted := len(e.conns), len(e.accepted)
	size := connectFrom(n, 1, victim, 0xC0FFEE, nil)
	if e.accepting != 4 || len(e.conns) != conns || len(e.accepted) != accepted {
		t.Fatalf("the CONNECT made state: %d half-open, %d connections, %d accepted; want 4, %d, %d",
			e.accepting, len(e.conns), len(e.accepted), conns, accepted)
	}
	n.sim.RunFor(3 * time.Second) // past every timer: the forged handshakes time out, and nothing is resent
	if len(cp.sent) != 1 {
		t.Fatalf("%d packets sent for the CONNECT, want one RETRY", len(cp.sent))
	}
	r := cp.sent[0]
	if r.pkt.Type() != proto.TypeRetry || r.dst != victim || r.pkt.Common.DstConnID() != 0xC0FFEE {
		t.Fatalf("sent %v to %v for %#x; want a RETRY to %v for 0xc0ffee", r.pkt.Type(), r.dst, r.pkt.Common.DstConnID(), victim)
	}
	if len(r.b) > size {
		t.Fatalf("the RETRY is %d bytes, the CONNECT %d: an amplifier", len(r.b), size)
	}
	if st := e.Stats(); st.RetriesSent != 1 || st.Refused != 0 {
		t.Fatalf("RetriesSent %d, Refused %d; want 1, 0", st.RetriesSent, st.Refused)
	}
}

// A flood of CONNECTs from forged sources holds at most RetryAt
// handshakes half-open, by default half of MaxAccepting; every CONNECT
// beyond draws one RETRY and makes nothing.
func TestConnectFloodIsValidated(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{MaxAccepting: 16})
	e := n.hosts[1].ep
	e.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	cp := n.capture(1)
	for i := 0; i < 500; i++ {
		connectFrom(n, 1, forgedSource(i), uint32(1000+i), nil)
	}
	if e.Config().RetryAt != 8 || e.accepting != 8 || len(e.conns) != 8 {
		t.Fatalf("RetryAt %d: %d half-open, %d connections; want 8 and 8", e.Config().RetryAt, e.accepting, len(e.conns))
	}
	if st := e.Stats(); st.RetriesSent != 492 || len(cp.of(proto.TypeRetry)) != 492 || len(cp.of(proto.TypeAccept)) != 8 {
		t.Fatalf("RetriesSent %d, %d RETRYs and %d ACCEPTs sent; want 492, 492, 8",
			st.RetriesSent, len(cp.of(proto.TypeRetry)), len(cp.of(proto.TypeAccept)))
	}
}

// (2) A real initiator to an acceptor under pressure completes its
// handshake through a RETRY and transfers data, in both modes, and with
// the simulator's placeholder payloads, which must not leave the token
// out.
func TestInitiatorCompletesThroughRetry(t *testing.T) {
	for _, c := range []struct {
		name        string
		mode        proto.Mode
		placeholder bool
	}{
		{"multipath", proto.ModeMultipath, false},
		{"baseline", proto.ModeBaseline, false},
		{"placeholder payloads", proto.ModeMultipath, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mode := c.mode
			n := newNet(t, twoHostFabric(2), Config{MaxAccepting: 8, RetryAt: 4, Mode: mode, PlaceholderPayloads: c.placeholder})
			b := n.hosts[1].ep
			b.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
			fillHalfOpen(n, 1, 4)
			ca, cb := n.capture(0), n.capture(1)
			pr := n.connect(0, 1)
			if st := b.Stats(); st.RetriesSent != 1 || st.BadTokens != 0 || st.ExpiredTokens != 0 {
				t.Fatalf("acceptor: %+v; want one RETRY sent", st)
			}
			if st := n.hosts[0].ep.Stats(); st.RetriesTaken != 1 || st.RetriesIgnored != 0 {
				t.Fatalf("initiator: %+v; want one RETRY taken", st)
			}
			connects, retries := ca.of(proto.TypeConnect), cb.of(proto.TypeRetry)
			if len(connects) != 2 || len(retries) != 1 {
				t.Fatalf("%d CONNECTs and %d RETRYs; want 2 and 1", len(connects), len(retries))
			}
			if _, ok := connects[0].pkt.Token(); ok {
				t.Fatal("the first CONNECT carries a token")
			}
			tok, ok := connects[1].pkt.Token()
			if !ok || tok != retries[0].pkt.Retry().Token() {
				t.Fatal("the second CONNECT does not carry the RETRY's token")
			}
			if pr.b.mode != mode {
				t.Fatalf("accepted in mode %v, want %v", pr.b.mode, mode)
			}
			src, dst := n.writeWhole(t, pr, 1<<20)
			if !c.placeholder && digest(src.Bytes()) != digest(dst.Bytes()) {
				t.Fatal("the data arrived changed")
			}
		})
	}
}

// retryToken sends a CONNECT without a token from src to host h, under
// pressure, and returns the token of the RETRY that answers it.
func retryToken(t *testing.T, n *testNet, cp *capturePort, h int, src netip.AddrPort, id uint32) [proto.TokenLen]byte {
	t.Helper()
	before := len(cp.of(proto.TypeRetry))
	connectFrom(n, h, src, id, nil)
	retries := cp.of(proto.TypeRetry)
	if len(retries) != before+1 {
		t.Fatalf("no RETRY for the CONNECT from %v", src)
	}
	return retries[len(retries)-1].pkt.Retry().Token()
}

// (3) A token that was not made for the CONNECT's source address,
// SrcConnID and ReplyPort, or that was forged, is refused: dropped,
// unanswered, counted, no state. An expired one is counted and answered
// with a new RETRY. A valid one is accepted under pressure, up to
// MaxAccepting.
func TestBadTokensAreRefused(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{MaxAccepting: 8, RetryAt: 4, ConnectTimeout: 10 * time.Second})
	e := n.hosts[1].ep
	e.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	fillHalfOpen(n, 1, 4)
	cp := n.capture(1)
	home := netip.AddrPortFrom(netip.MustParseAddr("203.0.113.1"), 4797)
	tok := retryToken(t, n, cp, 1, home, 42)

	forged := tok
	forged[15] ^= 1
	var zeros [proto.TokenLen]byte
	for _, c := range []struct {
		name  string
		src   netip.AddrPort
		id    uint32
		token [proto.TokenLen]byte
	}{
		{"a forged token", home, 42, forged},
		{"a token of zeros", home, 42, zeros},
		{"another address's token", netip.AddrPortFrom(netip.MustParseAddr("203.0.113.2"), 4797), 42, tok},
		{"another id's token", home, 43, tok},
		{"another reply port's token", netip.AddrPortFrom(home.Addr(), 4798), 42, tok},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent, bad := len(cp.sent), e.Stats().BadTokens
			connectFrom(n, 1, c.src, c.id, &c.token)
			if e.Stats().BadTokens != bad+1 || len(cp.sent) != sent || e.accepting != 4 {
				t.Fatalf("BadTokens %d -> %d, %d packets sent, %d half-open; want counted, none sent, 4",
					bad, e.Stats().BadTokens, len(cp.sent)-sent, e.accepting)
			}
		})
	}

	t.Run("an expired token", func(t *testing.T) {
		old := retryToken(t, n, cp, 1, home, 44)
		n.sim.RunFor(tokenLifetime + time.Millisecond)
		if e.accepting != 4 { // the forged handshakes are still half-open: the pressure holds
			t.Fatalf("%d half-open", e.accepting)
		}
		retries := len(cp.of(proto.TypeRetry))
		connectFrom(n, 1, home, 44, &old)
		if st := e.Stats(); st.ExpiredTokens != 1 || len(cp.of(proto.TypeRetry)) != retries+1 || e.accepting != 4 {
			t.Fatalf("ExpiredTokens %d, %d new RETRYs, %d half-open; want 1, 1, 4",
				st.ExpiredTokens, len(cp.of(proto.TypeRetry))-retries, e.accepting)
		}
	})

	t.Run("a valid token", func(t *testing.T) {
		fresh := retryToken(t, n, cp, 1, home, 45)
		accepts := len(cp.of(proto.TypeAccept))
		connectFrom(n, 1, home, 45, &fresh)
		if e.accepting != 5 || len(cp.of(proto.TypeAccept)) != accepts+1 {
			t.Fatalf("%d half-open, %d ACCEPTs; want 5 and 1", e.accepting, len(cp.of(proto.TypeAccept))-accepts)
		}
		// Its resent copy, with the same token, gets the same ACCEPT.
		connectFrom(n, 1, home, 45, &fresh)
		if e.accepting != 5 || len(cp.of(proto.TypeAccept)) != accepts+2 {
			t.Fatalf("the resent CONNECT: %d half-open, %d ACCEPTs; want 5 and 2", e.accepting, len(cp.of(proto.TypeAccept))-accepts)
		}
	})

	t.Run("valid tokens at the cap", func(t *testing.T) {
		for i := 0; i < 4; i++ {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + i)}), 4797)
			tok := retryToken(t, n, cp, 1, src, 100)
			connectFrom(n, 1, src, 100, &tok)
		}
		closes := cp.of(proto.TypeClose)
		if e.accepting != 8 || len(closes) != 1 || closes[0].pkt.Close().Reason() != proto.CloseResource {
			t.Fatalf("%d half-open, %d CLOSEs; want 8 and one CLOSE RESOURCE", e.accepting, len(closes))
		}
	})
}

// (4) Below the threshold nothing changes: a CONNECT is accepted at once,
// no RETRY is sent, and a handshake is the three packets of spec section
// 8.1.
func TestNoRetryBelowThreshold(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{MaxAccepting: 8, RetryAt: 4})
	ca, cb := n.capture(0), n.capture(1)
	n.hosts[1].ep.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	fillHalfOpen(n, 1, 3)
	n.connect(0, 1)
	if len(cb.of(proto.TypeRetry)) != 0 || n.hosts[1].ep.Stats().RetriesSent != 0 {
		t.Fatalf("%d RETRYs below the threshold", len(cb.of(proto.TypeRetry)))
	}
	if len(ca.of(proto.TypeConnect)) != 1 || len(cb.of(proto.TypeAccept)) != 4 {
		t.Fatalf("%d CONNECTs from the initiator, %d ACCEPTs in all; want 1 and 4 (3 forged)",
			len(ca.of(proto.TypeConnect)), len(cb.of(proto.TypeAccept)))
	}
	// RetryNever turns validation off whatever the pressure.
	m := newNet(t, twoHostFabric(1), Config{MaxAccepting: 8, RetryAt: RetryNever})
	m.hosts[1].ep.Listen(m.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	fillHalfOpen(m, 1, 8)
	if st := m.hosts[1].ep.Stats(); st.RetriesSent != 0 {
		t.Fatalf("RetryNever sent %d RETRYs", st.RetriesSent)
	}
}

// RetryAlways validates every CONNECT, the first one too: a real
// initiator still connects, through one RETRY.
func TestRetryAlways(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{RetryAt: RetryAlways})
	n.connect(0, 1)
	if a, b := n.hosts[0].ep.Stats(), n.hosts[1].ep.Stats(); b.RetriesSent != 1 || a.RetriesTaken != 1 {
		t.Fatalf("RetriesSent %d, RetriesTaken %d; want 1 and 1", b.RetriesSent, a.RetriesTaken)
	}
	for _, bad := range []int{-3, -100} {
		if _, err := NewEndpoint(Config{Planes: []netip.Addr{netem.Addr(0, 0)}, RetryAt: bad}, clock.NewSim(), nil); err == nil {
			t.Errorf("RetryAt %d was taken", bad)
		}
	}
}

// retryingAcceptor answers every CONNECT that reaches host h with a RETRY
// whose token is new each time, as a broken or hostile acceptor would.
func retryingAcceptor(n *testNet, h int, connects *[]proto.Packet) {
	host := n.fab.Host(h)
	k := byte(0)
	host.Attach(link.ReceiverFunc(func(d *link.Datagram, _ clock.Time) {
		var in proto.Packet
		b := append([]byte(nil), d.Data...)
		if in.Decode(b) != nil || in.Type() != proto.TypeConnect {
			return
		}
		*connects = append(*connects, in)
		var out proto.Packet
		buf := host.Buffer()
		proto.Build(&out, buf[:cap(buf)], proto.TypeRetry, 0, 0)
		out.Common.SetDstConnID(in.Handshake().SrcConnID())
		k++
		out.Retry().SetToken([proto.TokenLen]byte{k})
		host.Send([]link.Datagram{{Src: d.Dst, Dst: netip.AddrPortFrom(d.Src.Addr(), in.Handshake().ReplyPort()), Data: out.Seal()}})
	}))
}

// An initiator takes at most maxRetries RETRYs per connect attempt; its
// CONNECTs carry the latest token taken; its attempt ends at its connect
// timeout all the same.
func TestInitiatorBoundsRetries(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{ConnectTimeout: time.Second})
	var connects []proto.Packet
	retryingAcceptor(n, 1, &connects)
	rec := &recorder{}
	conn, err := n.hosts[0].ep.Connect([]netip.Addr{netem.Addr(0, 1)}, proto.DefaultPort, n.hosts[0].pd, rec)
	if err != nil {
		t.Fatal(err)
	}
	n.run(2*time.Second, func() bool { return conn.State() == Closed })
	if conn.State() != Closed || conn.Err() != ErrConnectFailed {
		t.Fatalf("connection %v (%v); want failed at its connect timeout", conn.State(), conn.Err())
	}
	st := n.hosts[0].ep.Stats()
	// The first CONNECT, one at once for each RETRY taken, then the timer's
	// resends at 100, 300 and 700 ms, each drawing a RETRY ignored.
	if st.RetriesTaken != maxRetries || len(connects) != 1+maxRetries+3 || st.RetriesIgnored != uint64(len(connects)-maxRetries) {
		t.Fatalf("%d RETRYs taken, %d ignored, %d CONNECTs; want %d, %d, %d",
			st.RetriesTaken, st.RetriesIgnored, len(connects), maxRetries, 1+3, 1+maxRetries+3) // the fourth RETRY and the timer's three
	}
	for i, c := range connects {
		tok, ok := c.Token()
		want := byte(min(i, maxRetries))
		if (i == 0) == ok || ok && tok[0] != want {
			t.Errorf("CONNECT %d: token %x (%v); want the token of RETRY %d", i, tok, ok, want)
		}
	}
}

// A RETRY from an address that is not the acceptor's is dropped as from
// the wrong source, and one for an established connection is ignored.
func TestStrayRetriesAreIgnored(t *testing.T) {
	n, pr := busyPair(t)
	forge(n, 0, pr.a, proto.TypeRetry, 0, netem.Addr(0, 9), func(*proto.Packet) {})
	forge(n, 0, pr.a, proto.TypeRetry, 0, netem.Addr(0, 1), func(*proto.Packet) {})
	st := n.hosts[0].ep.Stats()
	if st.WrongSource != 1 || st.RetriesIgnored != 1 || st.RetriesTaken != 0 || pr.a.State() != Established {
		t.Fatalf("%+v, %v; want one from the wrong source, one ignored, the connection up", st, pr.a.State())
	}
}

// A token expired while the handshake's packets were lost draws a new
// RETRY, and the initiator, whose connect timeout is longer than a
// token's life, connects with the new token.
func TestExpiredTokenDrawsANewRetry(t *testing.T) {
	// Host 0's CONNECTs with a token are lost for 2.5 s of resends.
	drop := &dropPort{limit: 1 << 30}
	n := newNetWithDrop(t, twoHostFabric(1), Config{RetryAt: RetryAlways, ConnectTimeout: 10 * time.Second}, drop)
	drop.match = func(p *proto.Packet) bool {
		_, ok := p.Token()
		return ok && n.sim.Now() < clock.Time(2500*time.Millisecond)
	}
	n.connect(0, 1)
	a, b := n.hosts[0].ep.Stats(), n.hosts[1].ep.Stats()
	if b.ExpiredTokens != 1 || b.RetriesSent != 2 || a.RetriesTaken != 2 || drop.dropped == 0 {
		t.Fatalf("ExpiredTokens %d, RetriesSent %d, RetriesTaken %d, %d dropped; want 1, 2, 2, some",
			b.ExpiredTokens, b.RetriesSent, a.RetriesTaken, drop.dropped)
	}
}

// mroce's token is the one spec section 8.1 describes, byte for byte: the
// golden RETRY testdata/golden/14-retry.hex was made from that text
// alone.
func TestTokenKnownAnswer(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{})
	e := n.hosts[1].ep
	key := make([]byte, tokenKeyLen)
	for i := range key {
		key[i] = byte(i)
	}
	e.mac = hmac.New(sha256.New, key)
	n.sim.RunFor(123456 * time.Millisecond)
	var pkt proto.Packet
	proto.Build(&pkt, make([]byte, 128), proto.TypeConnect, 0, 0)
	h := pkt.Handshake()
	h.SetSrcConnID(0x9e3779b9)
	h.SetReplyPort(4797)
	got := e.makeToken(netip.MustParseAddr("192.0.2.1"), h)
	want := [proto.TokenLen]byte{0x00, 0x01, 0xe2, 0x40, 0xd4, 0x14, 0xb8, 0x1a, 0x6a, 0x3b, 0xaf, 0x95, 0x55, 0xda, 0xa0, 0x40}
	if got != want {
		t.Fatalf("token % x, want % x", got, want)
	}
	// The same address written as IPv4-mapped IPv6 is the same source.
	if e.checkToken(want, netip.MustParseAddr("::ffff:192.0.2.1"), h) != tokenValid {
		t.Fatal("the token is not valid for its own source")
	}
}

// A token's issue time is milliseconds modulo 2^32, so it comes round
// every 49.7 days; the secret it was made under does not last that long.
// A token seen on its way and replayed 2^32 ms later is no token of the
// acceptor's. One made just before the secret is renewed stays valid for
// its life after it, and is told expired after that.
func TestTokenComesRoundUnderANewSecret(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{})
	e := n.hosts[1].ep
	var pkt proto.Packet
	proto.Build(&pkt, make([]byte, 128), proto.TypeConnect, 0, 0)
	h := pkt.Handshake()
	h.SetSrcConnID(0x9e3779b9)
	h.SetReplyPort(4797)
	src := netip.MustParseAddr("192.0.2.1")
	made := n.sim.Now()
	tok := e.makeToken(src, h)
	if got := e.checkToken(tok, src, h); got != tokenValid {
		t.Fatalf("a new token checks %v, want valid", got)
	}
	n.sim.RunFor(tokenKeyLife - time.Second)
	late := e.makeToken(src, h)
	n.sim.RunFor(1500 * time.Millisecond)
	if got := e.checkToken(late, src, h); got != tokenValid {
		t.Errorf("a token made 1 s before its secret was renewed checks %v 0.5 s after; want valid", got)
	}
	n.sim.RunFor(10 * time.Second)
	if got := e.checkToken(late, src, h); got != tokenExpired {
		t.Errorf("the same token 10 s later checks %v; want expired, which draws a new RETRY", got)
	}
	// The next renewal, after a day without tokens, finds the secret before
	// more than a day old, and still tells its tokens expired.
	n.sim.RunFor(tokenKeyLife + time.Minute)
	e.makeToken(src, h)
	late2 := e.makeToken(src, h)
	n.sim.RunFor(tokenKeyLife + 10*time.Second)
	if got := e.checkToken(late2, src, h); got != tokenExpired {
		t.Errorf("a token checked a day and 10 s after it was made, across a renewal, checks %v; want expired", got)
	}
	n.sim.RunUntil(made.Add(1<<32*time.Millisecond + 500*time.Millisecond))
	if got := e.checkToken(tok, src, h); got != tokenBad {
		t.Errorf("the first token, replayed 2^32 + 500 ms later, checks %v; want bad", got)
	}
}

// FuzzConnectTokens hands an acceptor under pressure a program of CONNECTs
// from a few sources, ids and reply ports, without a token, with the
// token a RETRY gave that source or another, or with a token altered,
// with time passing between them. Each CONNECT draws at most one packet,
// no larger than itself, to its source address (a RETRY to its ReplyPort
// too); no more than MaxAccepting handshakes are ever half-open; and once
// RetryAt are, a CONNECT makes state only with a token that a RETRY to its
// own source address, id and port carried less than tokenLifetime ago.
func FuzzConnectTokens(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 3, 1, 0, 0, 3, 2, 0, 0, 7, 1, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 4, 1, 110, 0, 4, 3, 0, 9, 8, 1, 0, 0})
	f.Fuzz(fuzzConnectTokens)
}

// fuzzConnectTokens is FuzzConnectTokens's body, for one program.
func fuzzConnectTokens(t *testing.T, program []byte) {
	const maxAccepting, retryAt = 6, 2
	n := newNet(t, twoHostFabric(1), Config{MaxAccepting: maxAccepting, RetryAt: retryAt, ConnectTimeout: 3 * time.Second})
	e := n.hosts[1].ep
	e.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	cp := n.capture(1)
	type issue struct {
		src netip.AddrPort
		id  uint32
		at  clock.Time
	}
	issued := map[[proto.TokenLen]byte]issue{}
	lastFor := map[netip.AddrPort]map[uint32][proto.TokenLen]byte{}
	var last [proto.TokenLen]byte
	for len(program) >= 4 {
		step := program[:4]
		program = program[4:]
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, step[0] & 3}), 4797+uint16(step[0]>>3&1))
		id := 7 + uint32(step[0]>>2&1)
		var token *[proto.TokenLen]byte
		switch step[1] & 3 {
		case 1:
			if tok, ok := lastFor[src][id]; ok {
				token = &tok
			}
		case 2:
			tok := last
			token = &tok
		case 3:
			tok := last
			tok[step[3]%proto.TokenLen] ^= step[1] | 1
			token = &tok
		}
		n.sim.RunFor(time.Duration(step[2]) * 20 * time.Millisecond)
		before, sent, now := e.accepting, len(cp.sent), n.sim.Now()
		size := connectFrom(n, 1, src, id, token)
		if e.accepting > maxAccepting {
			t.Fatalf("%d handshakes half-open, more than %d", e.accepting, maxAccepting)
		}
		if len(cp.sent) > sent+1 {
			t.Fatalf("one CONNECT drew %d packets", len(cp.sent)-sent)
		}
		if len(cp.sent) == sent+1 {
			r := cp.sent[sent]
			// A resent CONNECT, known by its source address and id, gets
			// the ACCEPT its handshake has, to the ReplyPort it had.
			if len(r.b) > size || r.dst.Addr() != src.Addr() || r.pkt.Common.DstConnID() != id ||
				r.pkt.Type() == proto.TypeRetry && r.dst != src {
				t.Fatalf("a %d-byte %v to %v for %d answered a %d-byte CONNECT from %v for %d",
					len(r.b), r.pkt.Type(), r.dst, r.pkt.Common.DstConnID(), size, src, id)
			}
			if r.pkt.Type() == proto.TypeRetry {
				tok := r.pkt.Retry().Token()
				issued[tok] = issue{src, id, now}
				if lastFor[src] == nil {
					lastFor[src] = map[uint32][proto.TokenLen]byte{}
				}
				lastFor[src][id], last = tok, tok
				if e.accepting != before {
					t.Fatal("a CONNECT answered with a RETRY made state")
				}
			}
		}
		if e.accepting > before && before >= retryAt {
			is, ok := issue{}, false
			if token != nil {
				is, ok = issued[*token]
			}
			if !ok || is.src != src || is.id != id || now.Sub(is.at) > tokenLifetime {
				t.Fatalf("under pressure (%d half-open) a CONNECT from %v for %d made state with token %v (%+v, %v)",
					before, src, id, token, is, ok)
			}
		}
	}
}

// After a RETRY the CONNECT's next resend stays on the RETRY's plane,
// which carried both ways and where its token holds; the one after goes
// on the next plane, without the token, which holds for the other
// address alone (spec section 8.1). The first CONNECT, on plane 0, is
// lost; the one on plane 1 draws a RETRY; the ACCEPTs of the two CONNECTs
// with its token are lost; the one on plane 2 draws a RETRY of its own,
// and its token's CONNECT is answered with the same ACCEPT.
func TestResendsStayOnTheRetrysPlane(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{MaxAccepting: 8, RetryAt: 4, ConnectTimeout: 5 * time.Second})
	b := n.hosts[1].ep
	b.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	fillHalfOpen(n, 1, 4)
	b.port = &dropPort{Port: b.port, match: func(p *proto.Packet) bool { return p.Type() == proto.TypeAccept }, limit: 2}
	n.hosts[0].ep.port = &dropPort{Port: n.hosts[0].ep.port, match: func(p *proto.Packet) bool { return p.Type() == proto.TypeConnect }, limit: 1}
	ca := n.capture(0)
	pr := n.connect(0, 1)
	if st := b.Stats(); st.RetriesSent != 2 || st.BadTokens != 0 {
		t.Fatalf("acceptor: %d RETRYs sent, %d bad tokens; want 2 and none", st.RetriesSent, st.BadTokens)
	}
	type connect struct {
		plane int
		token bool
	}
	want := []connect{{0, false}, {1, false}, {1, true}, {1, true}, {2, false}, {2, true}}
	var got []connect
	for _, c := range ca.of(proto.TypeConnect) {
		got = append(got, connect{int(c.dst.Addr().As4()[1]), len(c.pkt.Payload) == proto.TokenLen}) // netem.Addr's plane byte
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CONNECTs (plane, with a token) %v, want %v", got, want)
	}
	if len(b.conns) != 5 || pr.b.acceptedOn != 1 {
		t.Fatalf("%d connections at the acceptor (4 forged), accepted on plane %d; want 5, plane 1", len(b.conns), pr.b.acceptedOn)
	}
}

// A copy of a CONNECT already accepted, sent from elsewhere, is no new
// attempt and no free ACCEPT: while the connection is half-open and the
// acceptor under pressure, each copy from an address that is not the
// first CONNECT's draws one RETRY, as a new CONNECT would, and no state;
// once it is established, a copy from an address it did not learn draws
// nothing, counted (spec section 8.1).
func TestCopiedConnectDrawsNoAccept(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{MaxAccepting: 8, RetryAt: 4})
	e := n.hosts[1].ep
	e.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	home := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), 4797)
	connectFrom(n, 1, home, 777, nil)
	for i := range 3 {
		connectFrom(n, 1, forgedSource(i), uint32(5000+i), nil)
	}
	c := e.accepted[acceptKey{777, binary.BigEndian.Uint32(home.Addr().AsSlice()), uint32(home.Port())}] // connectBytes's key
	if c == nil {
		t.Fatal("the first CONNECT was not accepted")
	}
	copyFrom := func(i int) { // the initiator's CONNECT, sent from 203.0.113.i
		d := link.Datagram{Src: netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), 4797),
			Dst: netip.AddrPortFrom(netem.Addr(1, 1), proto.DefaultPort), Data: connectBytes(n, home, 777, nil)}
		e.Receive(&d, n.sim.Now())
	}
	cp := n.capture(1)
	for i := range 20 {
		copyFrom(i)
	}
	if accepts, retries := len(cp.of(proto.TypeAccept)), len(cp.of(proto.TypeRetry)); accepts != 0 || retries != 20 || e.accepting != 4 || len(e.conns) != 4 {
		t.Fatalf("20 copies half-open: %d ACCEPTs, %d RETRYs, %d half-open, %d connections; want 0, 20, 4, 4", accepts, retries, e.accepting, len(e.conns))
	}
	connectFrom(n, 1, home, 777, nil) // the initiator's own resend, before any token is looked at
	if accepts := len(cp.of(proto.TypeAccept)); accepts != 1 {
		t.Fatalf("the resend from the first CONNECT's address: %d ACCEPTs, want 1", accepts)
	}
	c.establish()
	wrong := e.Stats().WrongSource
	copyFrom(99)
	if accepts, retries := len(cp.of(proto.TypeAccept)), len(cp.of(proto.TypeRetry)); accepts != 1 || retries != 20 || e.Stats().WrongSource != wrong+1 {
		t.Fatalf("a copy once established: %d ACCEPTs, %d RETRYs, WrongSource %d -> %d; want none more, counted", accepts, retries, wrong, e.Stats().WrongSource)
	}
}
