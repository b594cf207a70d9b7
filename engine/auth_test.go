package engine

import (
	"bytes"
	"crypto/ecdh"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// credentialPair returns an initiator's and an acceptor's credentials of
// method m, which admit each other.
func credentialPair(t testing.TB, m auth.Method, suite auth.Suite) (initiator, acceptor *auth.Credentials) {
	if m == auth.MethodPSK {
		psk := bytes.Repeat([]byte{0x5c}, auth.PSKLen)
		return &auth.Credentials{Method: m, PSK: psk, Suite: suite}, &auth.Credentials{Method: m, PSK: psk}
	}
	si, err := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{2}, 32))
	return &auth.Credentials{Method: m, Static: si, Peers: []*ecdh.PublicKey{sa.PublicKey()}, Suite: suite},
		&auth.Credentials{Method: m, Static: sa, Peers: []*ecdh.PublicKey{si.PublicKey()}}
}

// authNet is a two-host fabric whose host 0 has the initiator's
// credentials and host 1 the acceptor's; nil leaves a host without the
// mode.
func authNet(t testing.TB, fc netem.Config, ec Config, initiator, acceptor *auth.Credentials) *testNet {
	t.Helper()
	return newNetWrapped(t, fc, ec, func(h int, p link.Port) link.Port { return p }).withAuth(t, ec, initiator, acceptor)
}

// withAuth remakes the net's two endpoints with the credentials given.
func (n *testNet) withAuth(t testing.TB, ec Config, creds ...*auth.Credentials) *testNet {
	t.Helper()
	for h, cred := range creds {
		cfg := ec
		cfg.Planes = n.hosts[h].ep.cfg.Planes
		cfg.Random = seeded(uint64(1000 + h))
		cfg.Auth = cred
		ep, err := NewEndpoint(cfg, n.sim, n.fab.Host(h))
		if err != nil {
			t.Fatal(err)
		}
		n.fab.Host(h).Attach(ep)
		n.hosts[h].ep = ep
	}
	return n
}

// In the authenticated mode, with either method and either suite, over 4
// planes with loss, a WRITE arrives whole; every packet after the
// handshake crosses the fabric protected, and no byte of the data crosses
// it in the clear.
func TestAuthenticatedTransfer(t *testing.T) {
	for _, m := range []auth.Method{auth.MethodPSK, auth.MethodKeys} {
		for _, suite := range []auth.Suite{auth.AES128GCM, auth.ChaCha20Poly1305} {
			fc := twoHostFabric(4)
			fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.01}
			ic, ac := credentialPair(t, m, suite)
			n := authNet(t, fc, Config{Paths: 8}, ic, ac)
			var clear, protected, handshake int
			var src *memreg.Region
			var leaked bool
			n.fab.AddTap(func(e *netem.TapEvent) {
				if e.Verdict != netem.Queued || e.Link.Kind() != netem.Uplink {
					return
				}
				b := e.Datagram.Data
				switch typ := proto.Type(b[1]); {
				case typ == proto.TypeConnect || typ == proto.TypeAccept:
					handshake++
				case proto.CommonHeader(b).Protected():
					protected++
				default:
					clear++
				}
				if src != nil && len(b) > 200 && bytes.Contains(b, src.Bytes()[1000:1032]) {
					leaked = true
				}
			})
			pr := n.connect(0, 1)
			if pr.a.session == nil || pr.b.session == nil || pr.a.session.Suite() != suite {
				t.Fatalf("%v %v: no keys after the handshake", m, suite)
			}
			const size = 4 << 20
			src = pr.ha.region(t, size, 5, memreg.LocalWrite)
			dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
			if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()}); err != nil {
				t.Fatal(err)
			}
			if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
				t.Fatalf("%v %v: the WRITE did not complete: %+v", m, suite, pr.ra.done)
			}
			if digest(src.Bytes()) != digest(dst.Bytes()) {
				t.Fatalf("%v %v: the WRITE arrived with other bytes", m, suite)
			}
			if clear != 0 || handshake < 2 || protected < size/4096 || leaked {
				t.Errorf("%v %v: %d packets in the clear, %d of the handshake, %d protected; data seen in the clear: %v",
					m, suite, clear, handshake, protected, leaked)
			}
			for h, hst := range n.hosts {
				st := hst.ep.Stats()
				if st.Decode[proto.ErrAuthFailed] != 0 || st.BadHandshakes != 0 || st.Unprotected != 0 || st.Replays != 0 {
					t.Errorf("%v %v: host %d dropped its peer's packets: %+v", m, suite, h, st)
				}
			}
		}
	}
}

// The mode is all or nothing: a peer without it is refused, whichever side
// it is, and credentials that do not match never make a connection.
func TestAuthenticatedModeRefusesOthers(t *testing.T) {
	ic, ac := credentialPair(t, auth.MethodPSK, 0)
	wrong := &auth.Credentials{Method: auth.MethodPSK, PSK: bytes.Repeat([]byte{1}, auth.PSKLen)}
	ki, _ := credentialPair(t, auth.MethodKeys, 0)
	for _, c := range []struct {
		name      string
		initiator *auth.Credentials
		acceptor  *auth.Credentials
		refusal   bool // refused with CLOSE PARAMS, not dropped
		badAtEnd  int  // the host that counts a bad handshake
		detail    uint32
	}{
		{"an initiator with the mode, an acceptor without", ic, nil, true, -1, 28},
		{"an initiator without the mode, an acceptor with", nil, ac, true, -1, 28},
		{"another pre-shared key", wrong, ac, false, 1, 0},
		{"static keys against a pre-shared key", ki, ac, true, -1, auth.DetailMethod},
	} {
		n := authNet(t, twoHostFabric(2), Config{Paths: 2, ConnectTimeout: 50 * time.Millisecond}, c.initiator, c.acceptor)
		accepted := false
		n.hosts[1].ep.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { accepted = true; return &recorder{}, true })
		rec := &recorder{}
		conn, err := n.hosts[0].ep.Connect([]netip.Addr{netem.Addr(0, 1), netem.Addr(1, 1)}, proto.DefaultPort, n.hosts[0].pd, rec)
		if err != nil {
			t.Fatal(err)
		}
		n.run(time.Second, func() bool { return conn.State() == Closed })
		if conn.State() != Closed || accepted {
			t.Errorf("%s: the initiator is %v, accepted %v", c.name, conn.State(), accepted)
			continue
		}
		var remote *RemoteError
		if c.refusal {
			if !errors.As(conn.Err(), &remote) || remote.Reason != proto.CloseParams || remote.Detail != c.detail {
				t.Errorf("%s: ended with %v, want CLOSE PARAMS %d", c.name, conn.Err(), c.detail)
			}
		} else if !errors.Is(conn.Err(), ErrConnectFailed) {
			t.Errorf("%s: ended with %v, want a failed connect", c.name, conn.Err())
		}
		if c.badAtEnd >= 0 && n.hosts[c.badAtEnd].ep.Stats().BadHandshakes == 0 {
			t.Errorf("%s: host %d counted no bad handshake", c.name, c.badAtEnd)
		}
	}
}

// inject hands b to host h's endpoint from src, as a party on the path
// would.
func (n *testNet) inject(h int, src netip.Addr, b []byte) {
	d := link.Datagram{Src: netip.AddrPortFrom(src, 49152), Dst: netip.AddrPortFrom(netem.Addr(0, h), proto.DefaultPort), Data: b}
	n.hosts[h].ep.Receive(&d, n.sim.Now())
}

// In the authenticated mode a party on the path, which sees every packet
// and knows every field, can make nothing happen: a CLOSE, a fatal NACK,
// an ACK and a SEND it makes, in the clear or with a tag of its own; a
// packet of the connection sent again; and one with any byte changed are
// each dropped and counted, and the WRITE under way completes and
// verifies (spec section 13).
func TestAuthenticatedModeDropsForgeries(t *testing.T) {
	ic, ac := credentialPair(t, auth.MethodPSK, 0)
	n := authNet(t, twoHostFabric(1), Config{Paths: 2}, ic, ac)
	var ackToA, dataToB []byte
	n.fab.AddTap(func(e *netem.TapEvent) {
		if e.Verdict != netem.Delivered {
			return
		}
		b := e.Datagram.Data
		switch proto.Type(b[1]) {
		case proto.TypeAck:
			if ackToA == nil && proto.CommonHeader(b).Protected() && e.Datagram.Dst.Addr() == netem.Addr(0, 0) {
				ackToA = bytes.Clone(b)
			}
		case proto.TypeWrite:
			if dataToB == nil {
				dataToB = bytes.Clone(b)
			}
		}
	})
	pr := n.connect(0, 1)
	const size = 16 << 20
	src := pr.ha.region(t, size, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	inbox := pr.hb.region(t, 64, 0, memreg.LocalWrite)
	pr.b.PostRecv(RecvWR{ID: 7, Stream: 0, Local: SGE{inbox, 0, 64}})
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
	n.run(20*time.Microsecond, func() bool { return false })
	if pr.a.snd.inflight() == 0 || ackToA == nil || dataToB == nil {
		t.Fatal("nothing in flight, or no packets seen to replay")
	}
	peerOfA, peerOfB := netem.Addr(0, 1), netem.Addr(0, 0)
	forgery := func(typ proto.Type, dstID uint32, payload int, fill func(*proto.Packet)) *proto.Packet {
		var p proto.Packet
		if err := proto.Build(&p, make([]byte, 2048), typ, 0, payload); err != nil {
			t.Fatal(err)
		}
		p.Common.SetDstConnID(dstID)
		fill(&p)
		return &p
	}
	forged := []struct {
		name string
		to   int
		pkt  *proto.Packet
	}{
		{"CLOSE", 0, forgery(proto.TypeClose, pr.a.ID(), 0, func(p *proto.Packet) { p.Close().SetReason(proto.CloseFatal) })},
		{"fatal NACK", 0, forgery(proto.TypeNack, pr.a.ID(), 0, func(p *proto.Packet) {
			p.Nack().SetCode(proto.NackBadKey)
			p.Nack().SetDSN(pr.a.snd.una)
			p.Nack().SetPSN(pr.a.snd.paths[0].next - 1)
		})},
		{"ACK of everything in flight", 0, forgery(proto.TypeAck, pr.a.ID(), 0, func(p *proto.Packet) { p.Ack().SetCumDSN(pr.a.snd.nextDSN) })},
		{"SEND", 1, forgery(proto.TypeSend, pr.b.ID(), 8, func(p *proto.Packet) {
			p.Send().SetMsgLen(8)
			copy(p.Payload, "HIJACKED")
		})},
	}
	una, inflight := pr.a.snd.una, pr.a.snd.inflight()
	for _, f := range forged {
		st := n.hosts[f.to].ep.Stats()
		raw := bytes.Clone(f.pkt.Seal())
		n.inject(f.to, map[int]netip.Addr{0: peerOfA, 1: peerOfB}[f.to], raw)
		// The same, marked protected, with a tag of the forger's own.
		raw[0] |= 0x08
		raw = append(raw, bytes.Repeat([]byte{0xAB}, proto.TagLen-proto.TrailerLen)...)
		n.inject(f.to, map[int]netip.Addr{0: peerOfA, 1: peerOfB}[f.to], raw)
		now := n.hosts[f.to].ep.Stats()
		if now.Unprotected != st.Unprotected+1 || now.Decode[proto.ErrAuthFailed] != st.Decode[proto.ErrAuthFailed]+1 {
			t.Errorf("a forged %s: %d dropped in the clear, %d failed to open; want one each", f.name,
				now.Unprotected-st.Unprotected, now.Decode[proto.ErrAuthFailed]-st.Decode[proto.ErrAuthFailed])
		}
	}
	if pr.a.State() != Established || pr.b.State() != Established || pr.a.snd.una != una || pr.a.snd.inflight() != inflight || len(pr.rb.done) != 0 {
		t.Fatalf("a forgery was obeyed: %v %v, una %d -> %d, in flight %d -> %d, receives %+v",
			pr.a.State(), pr.b.State(), una, pr.a.snd.una, inflight, pr.a.snd.inflight(), pr.rb.done)
	}
	// A real ACK sent again is a control packet opened before; a real data
	// packet sent again is a duplicate, placed once.
	st := n.hosts[0].ep.Stats()
	n.inject(0, peerOfA, bytes.Clone(ackToA))
	if n.hosts[0].ep.Stats().Replays != st.Replays+1 {
		t.Error("a replayed ACK was not counted as one")
	}
	dups := pr.b.ReceiverStats().Duplicates
	n.inject(1, peerOfB, bytes.Clone(dataToB))
	if pr.b.ReceiverStats().Duplicates != dups+1 {
		t.Error("a replayed data packet was not taken as a duplicate")
	}
	// Any byte of a real packet changed: it does not open.
	failed := n.hosts[1].ep.Stats().Decode[proto.ErrAuthFailed]
	tries := 0
	for i := 0; i < len(dataToB); i += 7 {
		if i == 0 {
			continue // the version byte: refused before any key is tried
		}
		b := bytes.Clone(dataToB)
		b[i] ^= 0x10
		n.inject(1, peerOfB, b)
		tries++
	}
	if got := n.hosts[1].ep.Stats().Decode[proto.ErrAuthFailed] - failed; got != uint64(tries) {
		t.Errorf("%d of %d changed packets failed to open", got, tries)
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
		t.Fatalf("the WRITE did not complete after the forgeries: %+v", pr.ra.done)
	}
	if digest(src.Bytes()) != digest(dst.Bytes()) || len(pr.rb.done) != 0 || bytes.Contains(inbox.Bytes(), []byte("HIJACKED")) {
		t.Fatal("the WRITE arrived with other bytes, or the forged SEND was received")
	}
}

// A key one connection was given is refused on another connection of the
// same listener, in the authenticated mode as outside it: the region is the
// first connection's alone (spec section 5.1).
func TestAuthenticatedKeyOfAnotherConnection(t *testing.T) {
	ic, ac := credentialPair(t, auth.MethodKeys, 0)
	n := authNet(t, twoHostFabric(1), Config{Paths: 2}, ic, ac)
	first := n.connect(0, 1)
	second := n.connect(0, 1)
	own, err := first.b.Scope().Register(make([]byte, 4096), memreg.LocalWrite|memreg.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	src := second.ha.region(t, 4096, 3, memreg.LocalWrite)
	second.a.Post(SendWR{ID: 9, Op: OpWrite, Local: SGE{src, 0, 4096}, RKey: own.Key()})
	n.run(time.Second, func() bool { return len(second.ra.done) == 1 })
	if len(second.ra.done) != 1 || second.ra.done[0].Status == StatusOK || second.b.ReceiverStats().Nacks[proto.NackBadKey] == 0 {
		t.Fatalf("a WRITE with another connection's key: %+v", second.ra.done)
	}
	if !bytes.Equal(own.Bytes(), make([]byte, 4096)) {
		t.Fatal("another connection's WRITE reached the region")
	}
	first.a.Post(SendWR{ID: 10, Op: OpWrite, Local: SGE{first.ha.region(t, 4096, 4, memreg.LocalWrite), 0, 4096}, RKey: own.Key()})
	if !n.run(time.Second, func() bool { return len(first.ra.done) == 1 }) || first.ra.done[0].Status != StatusOK {
		t.Fatalf("the connection's own WRITE: %+v", first.ra.done)
	}
}

// Both directions move through many key phases during a transfer over
// many paths with loss, packets of the phase before still arriving on
// other paths, and the WRITE arrives whole with nothing dropped for its
// keys (spec section 13.5).
func TestAuthenticatedKeyPhasesDuringATransfer(t *testing.T) {
	fc := twoHostFabric(4)
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.01}
	ic, ac := credentialPair(t, auth.MethodPSK, 0)
	n := authNet(t, fc, Config{Paths: 8, MPL: 20 * time.Microsecond}, ic, ac)
	pr := n.connect(0, 1)
	for _, s := range []*auth.Session{pr.a.session, pr.b.session} {
		s.UpdateAfter = 200
	}
	const size = 16 << 20
	src := pr.ha.region(t, size, 9, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
		t.Fatalf("the WRITE did not complete: %+v", pr.ra.done)
	}
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("the WRITE arrived with other bytes")
	}
	if pr.a.session.Phase() < 8 || pr.b.session.Phase() < pr.a.session.Phase()-1 {
		t.Fatalf("phases %d and %d after %d packets, a move due every 200", pr.a.session.Phase(), pr.b.session.Phase(), pr.a.SenderStats().Packets)
	}
	for h, hst := range n.hosts {
		if st := hst.ep.Stats(); st.Decode[proto.ErrAuthFailed] != 0 || st.PhaseSpent != 0 || st.Replays != 0 {
			t.Errorf("host %d: %d failed to open, %d not sent for a spent phase, %d replays", h, st.Decode[proto.ErrAuthFailed], st.PhaseSpent, st.Replays)
		}
	}
}

// What a party on the path can send from the handshake teaches nothing: an
// ACCEPT with a key exchange of its own, to a plane the initiator has not
// learned, neither teaches the plane's address nor counts as hearing from
// the peer; a copy of the real ACCEPT with a field changed is dropped; the
// real one repeated draws no ACKs once the peer has spoken protected; a
// data packet repeated does not keep the connection alive; and the
// initiator's own CONNECT sent back to it is not accepted (spec sections
// 13.3 and 13.6).
func TestAuthenticatedHandshakeLeftovers(t *testing.T) {
	ic, ac := credentialPair(t, auth.MethodPSK, 0)
	fc := twoHostFabric(2)
	fc.Hosts = 3 // host 2 is a peer without the mode
	n := authNet(t, fc, Config{Paths: 2}, ic, ac)
	var accept, connect, data []byte
	n.fab.AddTap(func(e *netem.TapEvent) {
		b := e.Datagram.Data
		if e.Verdict == netem.Queued && proto.Type(b[1]) == proto.TypeConnect {
			connect = bytes.Clone(b) // as it leaves, wherever it goes
		}
		if e.Verdict != netem.Delivered {
			return
		}
		switch proto.Type(b[1]) {
		case proto.TypeAccept:
			accept = bytes.Clone(b)
		case proto.TypeWrite:
			if data == nil {
				data = bytes.Clone(b)
			}
		}
	})
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 64<<10)
	a := pr.a
	peer := netem.Addr(0, 1)
	stranger := netem.Addr(1, 9)

	// A forged ACCEPT to plane 1 from a stranger, once the plane is
	// forgotten as if never learned.
	a.known &^= 1 << 1
	a.remote[1] = netip.Addr{}
	forged := bytes.Clone(accept)
	clear(forged[len(forged)-proto.TrailerLen-proto.AuthAcceptLen : len(forged)-proto.TrailerLen])
	var p proto.Packet
	p.DecodeNoCRC(forged)
	forged = p.Seal()
	n.sim.RunUntil(n.sim.Now().Add(time.Millisecond))
	heard, bad := a.heard, n.hosts[0].ep.Stats().BadHandshakes
	d := link.Datagram{Src: netip.AddrPortFrom(stranger, 49152), Dst: netip.AddrPortFrom(netem.Addr(1, 0), proto.DefaultPort), Data: forged}
	n.hosts[0].ep.Receive(&d, n.sim.Now())
	if a.knows(1) || a.heard != heard || n.hosts[0].ep.Stats().BadHandshakes != bad+1 {
		t.Errorf("a forged ACCEPT: plane 1 learned %v (%v), heard moved %v, bad handshakes %d -> %d",
			a.knows(1), a.remote[1], a.heard != heard, bad, n.hosts[0].ep.Stats().BadHandshakes)
	}
	// The real ACCEPT with Streams changed.
	changed := bytes.Clone(accept)
	p.DecodeNoCRC(changed)
	p.Handshake().SetStreams(p.Handshake().Streams() - 1)
	n.inject(0, peer, p.Seal())
	if n.hosts[0].ep.Stats().BadHandshakes != bad+2 {
		t.Error("an ACCEPT with a field changed was taken as a repeat")
	}
	// The real ACCEPT again: taken, and answered by nothing.
	acks := a.rcv.stats.AcksSent
	n.inject(0, peer, bytes.Clone(accept))
	if n.hosts[0].ep.Stats().BadHandshakes != bad+2 || a.rcv.stats.AcksSent != acks {
		t.Errorf("the real ACCEPT repeated: bad handshakes %d, ACKs %d -> %d", n.hosts[0].ep.Stats().BadHandshakes-bad, acks, a.rcv.stats.AcksSent)
	}
	// An old data packet again, at the acceptor: a duplicate, and no sign
	// of life.
	n.sim.RunUntil(n.sim.Now().Add(time.Millisecond))
	heardB := pr.b.heard
	n.inject(1, netem.Addr(0, 0), bytes.Clone(data))
	if pr.b.heard != heardB {
		t.Error("a repeated data packet counted as hearing from the peer")
	}
	// The initiator's own CONNECT, to another host, sent back to its own
	// listener as it leaves.
	n.hosts[0].ep.Listen(n.hosts[0].pd, func(*Conn) (Events, bool) { t.Error("accepted its own CONNECT"); return nil, false })
	again := n.hosts[0].ep.Stats().BadHandshakes
	first := connect
	if _, err := n.hosts[0].ep.Connect([]netip.Addr{netem.Addr(0, 2), netem.Addr(1, 2)}, proto.DefaultPort, n.hosts[0].pd, &recorder{}); err != nil {
		t.Fatal(err)
	}
	n.run(10*time.Microsecond, func() bool { return !bytes.Equal(connect, first) })
	if bytes.Equal(connect, first) {
		t.Fatal("the new CONNECT was not seen")
	}
	n.inject(0, peer, bytes.Clone(connect))
	if n.hosts[0].ep.Stats().BadHandshakes != again+1 {
		t.Error("its own CONNECT, sent back to it, was not refused")
	}
}

// A closed connection's keys open nothing once its quarantine ends.
func TestAuthenticatedKeysEndWithQuarantine(t *testing.T) {
	ic, ac := credentialPair(t, auth.MethodPSK, 0)
	n := authNet(t, twoHostFabric(1), Config{Paths: 2, MPL: 100 * time.Microsecond}, ic, ac)
	var data []byte
	n.fab.AddTap(func(e *netem.TapEvent) {
		if e.Verdict == netem.Delivered && proto.Type(e.Datagram.Data[1]) == proto.TypeWrite && data == nil {
			data = bytes.Clone(e.Datagram.Data)
		}
	})
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 16<<10)
	pr.b.Close()
	n.sim.RunUntil(n.sim.Now().Add(time.Millisecond)) // 10 MPL: its quarantine of 2 is over
	protected := n.hosts[1].ep.Stats().Decode[proto.ErrProtected]
	n.inject(1, netem.Addr(0, 0), bytes.Clone(data))
	if n.hosts[1].ep.Stats().Decode[proto.ErrProtected] != protected+1 {
		t.Error("a packet for a connection out of quarantine was opened with its keys")
	}
}

// copyFirstConnect hands the acceptor a copy of the first CONNECT its
// host sends, from another address, before the CONNECT itself leaves: a
// party beside the path that saw it.
type copyFirstConnect struct {
	link.Port
	n    *testNet
	from netip.AddrPort
	done bool
}

func (s *copyFirstConnect) Send(batch []link.Datagram) {
	for _, d := range batch {
		var pkt proto.Packet
		if !s.done && pkt.DecodeNoCRC(d.Data) == nil && pkt.Type() == proto.TypeConnect {
			s.done = true
			cp := link.Datagram{Src: s.from, Dst: d.Dst, Data: append([]byte(nil), d.Data...)}
			s.n.hosts[1].ep.Receive(&cp, s.n.sim.Now())
		}
	}
	s.Port.Send(batch)
}

// In the authenticated mode a CONNECT teaches the acceptor no address:
// a copy of it sent from elsewhere, arriving first, does not make that
// address the initiator's. The real CONNECT gets the same ACCEPT, the
// initiator's protected answer teaches its address on each plane, and
// the transfer draws no packet dropped as from a wrong source (spec
// sections 8.1 and 13.3).
func TestCopiedConnectTeachesNoAddress(t *testing.T) {
	ic, ac := credentialPair(t, auth.MethodPSK, 0)
	n := authNet(t, fourPlanes(), Config{Paths: 8}, ic, ac)
	other := netip.AddrPortFrom(netip.MustParseAddr("203.0.113.66"), proto.DefaultPort)
	n.hosts[0].ep.port = &copyFirstConnect{Port: n.hosts[0].ep.port, n: n, from: other}
	pr := n.connect(0, 1)
	src, dst := n.writeWhole(t, pr, 1<<20)
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("data differs")
	}
	for p := range 4 {
		if got := pr.b.RemoteAddr(p); got != netem.Addr(p, 0) {
			t.Errorf("the acceptor knows the initiator on plane %d as %v, want %v", p, got, netem.Addr(p, 0))
		}
	}
	if w := n.hosts[1].ep.Stats().WrongSource; w != 0 {
		t.Errorf("%d packets of the initiator dropped as from a wrong source", w)
	}
}
