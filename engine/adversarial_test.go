package engine

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// tapPort records what an endpoint sends, and forwards it.
type tapPort struct {
	link.Port
	sent []proto.Packet
}

func (p *tapPort) Send(batch []link.Datagram) {
	for _, d := range batch {
		b := append([]byte(nil), d.Data...)
		var pkt proto.Packet
		if pkt.Decode(b) == nil {
			p.sent = append(p.sent, pkt)
		}
	}
	p.Port.Send(batch)
}

func (p *tapPort) nacks() []proto.NackCode {
	var out []proto.NackCode
	for i := range p.sent {
		if p.sent[i].Type() == proto.TypeNack {
			out = append(out, p.sent[i].Nack().Code())
		}
	}
	return out
}

// prober crafts packets as the initiator of an established pair would, and
// hands them to the acceptor's endpoint directly. It is a peer that speaks
// the wire format but means harm.
type prober struct {
	t   *testing.T
	n   *testNet
	pr  *pair
	tap *tapPort
	dsn uint32
	psn uint32
}

func newProber(t *testing.T, ec Config) *prober {
	n := newNet(t, twoHostFabric(1), ec)
	tap := &tapPort{Port: n.fab.Host(1)}
	n.hosts[1].ep.port = tap
	pr := n.connect(0, 1)
	pr.a.snd.equip() // make its paths as a first WRITE would, since the packets below pose as its own
	return &prober{t: t, n: n, pr: pr, tap: tap, dsn: pr.a.snd.nextDSN, psn: pr.a.snd.paths[0].next + 1000}
}

// data builds a data packet of type ty with payload and fills the common
// header with the next DSN and PSN on path 0. It lets fill set the rest,
// and delivers the packet to the acceptor.
func (p *prober) data(ty proto.Type, payload []byte, fill func(*proto.Packet)) []byte {
	var pkt proto.Packet
	if err := proto.Build(&pkt, make([]byte, 9000), ty, 0, len(payload)); err != nil {
		p.t.Fatal(err)
	}
	pkt.Common.SetDstConnID(p.pr.a.peerID)
	pkt.Common.SetPSN(p.psn)
	pkt.Common.SetDSN(p.dsn)
	p.psn++
	p.dsn++
	copy(pkt.Payload, payload)
	if fill != nil {
		fill(&pkt)
	}
	wire := pkt.Seal()
	p.deliver(wire)
	return wire
}

func (p *prober) deliver(wire []byte) {
	d := link.Datagram{Src: netip.AddrPortFrom(netem.Addr(0, 0), 49152), Dst: netip.AddrPortFrom(netem.Addr(0, 1), 4797),
		ECN: link.ECT0, Data: append([]byte(nil), wire...)}
	p.n.hosts[1].ep.Receive(&d, p.n.sim.Now())
}

func (p *prober) expectNack(code proto.NackCode) {
	p.t.Helper()
	got := p.tap.nacks()
	if len(got) != 1 || got[0] != code {
		p.t.Fatalf("NACKs sent %v, want [%v]", got, code)
	}
}

func writeTo(g *memreg.Region, off uint64, length uint32) func(*proto.Packet) {
	return func(pkt *proto.Packet) {
		w := pkt.Write()
		w.SetRKey(g.Key())
		w.SetRemoteOffset(off)
		w.SetMsgLen(length)
	}
}

// guarded registers a region with a guard region on each side, in one
// buffer, so that a write outside the region but inside the buffer shows.
func guarded(t *testing.T, h *host, size int, access memreg.Access) (all []byte, g *memreg.Region) {
	all = make([]byte, 3*size)
	for i := range all {
		all[i] = 0xA5
	}
	g, err := h.pd.Register(all[size:2*size], access)
	if err != nil {
		t.Fatal(err)
	}
	return all, g
}

func untouched(t *testing.T, all []byte) {
	t.Helper()
	for i, b := range all {
		if b != 0xA5 {
			t.Fatalf("byte %d of the guarded buffer changed", i)
		}
	}
}

// TestHostileWritesAreRefused sends hostile WRITEs. Each is refused with
// its NACK code, and no byte of memory changes, inside the region or around
// it.
func TestHostileWritesAreRefused(t *testing.T) {
	payload := bytes.Repeat([]byte{0x5A}, 64)
	cases := []struct {
		name string
		code proto.NackCode
		run  func(p *prober, g *memreg.Region)
	}{
		{"wrong rkey", proto.NackBadKey, func(p *prober, g *memreg.Region) {
			p.data(proto.TypeWrite, payload, func(pkt *proto.Packet) { writeTo(g, 0, 64)(pkt); pkt.Write().SetRKey(g.Key() ^ 0x40) })
		}},
		{"revoked rkey", proto.NackBadKey, func(p *prober, g *memreg.Region) {
			g.Deregister()
			p.data(proto.TypeWrite, payload, writeTo(g, 0, 64))
		}},
		{"key of another domain", proto.NackBadKey, func(p *prober, g *memreg.Region) {
			other, _ := p.pr.hb.reg.NewDomain().Register(make([]byte, 100), memreg.LocalWrite|memreg.RemoteWrite)
			p.data(proto.TypeWrite, payload, writeTo(other, 0, 64))
		}},
		{"past the end", proto.NackBounds, func(p *prober, g *memreg.Region) {
			p.data(proto.TypeWrite, payload, writeTo(g, 4096-32, 64))
		}},
		{"offset overflow", proto.NackBounds, func(p *prober, g *memreg.Region) {
			p.data(proto.TypeWrite, payload, writeTo(g, ^uint64(0)-10, 64))
		}},
		{"message longer than the region", proto.NackBounds, func(p *prober, g *memreg.Region) {
			p.data(proto.TypeWrite, payload, writeTo(g, 0, 8192))
		}},
		{"bad stream", proto.NackBadStream, func(p *prober, g *memreg.Region) {
			p.data(proto.TypeWrite, payload, func(pkt *proto.Packet) { writeTo(g, 0, 64)(pkt); pkt.Write().SetStream(4000) })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newProber(t, Config{})
			all, g := guarded(t, p.pr.hb, 4096, memreg.LocalWrite|memreg.RemoteWrite)
			c.run(p, g)
			p.expectNack(c.code)
			untouched(t, all)
		})
	}
	t.Run("read-only region", func(t *testing.T) {
		p := newProber(t, Config{})
		all, g := guarded(t, p.pr.hb, 4096, memreg.RemoteRead)
		p.data(proto.TypeWrite, payload, writeTo(g, 0, 64))
		p.expectNack(proto.NackAccess)
		untouched(t, all)
	})
}

// TestHostileSendsAndReadsAreRefused sends hostile SENDs and READs. It
// sends a SEND with no receive posted (RNR), one longer than the receive
// (BOUNDS), a READ beyond the negotiated limit (READ_LIMIT), a READ of a
// write-only region (ACCESS) and a READ_RESP nobody asked for (BAD_TAG).
func TestHostileSendsAndReadsAreRefused(t *testing.T) {
	t.Run("no receive posted", func(t *testing.T) {
		p := newProber(t, Config{})
		p.data(proto.TypeSend, []byte("hi"), func(pkt *proto.Packet) { pkt.Send().SetMsgLen(2) })
		p.expectNack(proto.NackRNR)
	})
	t.Run("longer than the receive", func(t *testing.T) {
		p := newProber(t, Config{})
		all, g := guarded(t, p.pr.hb, 16, memreg.LocalWrite)
		p.pr.b.PostRecv(RecvWR{ID: 1, Local: SGE{g, 0, 16}})
		p.data(proto.TypeSend, make([]byte, 32), func(pkt *proto.Packet) { pkt.Send().SetMsgLen(32) })
		p.expectNack(proto.NackBounds)
		untouched(t, all)
	})
	t.Run("READ beyond the limit", func(t *testing.T) {
		p := newProber(t, Config{MaxReadsIn: 2, PathWindow: 1})
		src := p.pr.hb.region(t, 1<<20, 1, memreg.RemoteRead)
		for i := 0; i < 3; i++ {
			p.data(proto.TypeReadReq, nil, func(pkt *proto.Packet) {
				rq := pkt.ReadReq()
				rq.SetRKey(src.Key())
				rq.SetMsgLen(1 << 20)
				rq.SetMSN(uint32(i))
				rq.SetReadTag(uint32(i))
			})
		}
		p.expectNack(proto.NackReadLimit)
	})
	t.Run("READ of a region without remote read", func(t *testing.T) {
		p := newProber(t, Config{})
		g := p.pr.hb.region(t, 100, 1, memreg.LocalWrite|memreg.RemoteWrite)
		p.data(proto.TypeReadReq, nil, func(pkt *proto.Packet) { pkt.ReadReq().SetRKey(g.Key()); pkt.ReadReq().SetMsgLen(10) })
		p.expectNack(proto.NackAccess)
	})
	t.Run("READ_RESP for no READ", func(t *testing.T) {
		p := newProber(t, Config{})
		p.data(proto.TypeReadResp, []byte{1, 2, 3}, func(pkt *proto.Packet) { pkt.ReadResp().SetMsgLen(3); pkt.ReadResp().SetReadTag(77) })
		p.expectNack(proto.NackBadTag)
	})
}

// TestHostilePacketsAreDroppedAndCounted checks that packets that cannot be
// trusted or do not belong are dropped and counted, with no NACK and no
// change to memory.
func TestHostilePacketsAreDroppedAndCounted(t *testing.T) {
	p := newProber(t, Config{})
	all, g := guarded(t, p.pr.hb, 4096, memreg.LocalWrite|memreg.RemoteWrite)
	ep := p.n.hosts[1].ep
	good := p.data(proto.TypeWrite, bytes.Repeat([]byte{1}, 64), writeTo(g, 0, 64))
	copy(all[4096:4096+64], bytes.Repeat([]byte{0xA5}, 64)) // restore the guard pattern where the good packet wrote
	if !bytes.Equal(g.Bytes()[:64], bytes.Repeat([]byte{0xA5}, 64)) {
		t.Fatal("setup")
	}

	// Truncated packets and bad CRCs are counted by cause.
	p.deliver(good[:20])
	bad := append([]byte(nil), good...)
	bad[40] ^= 1
	p.deliver(bad)
	if st := ep.Stats(); st.Decode[proto.ErrTruncated] != 1 || st.Decode[proto.ErrBadCRC] != 1 {
		t.Fatalf("decode drops %v", st.Decode)
	}
	// Unknown connection id.
	unknown := append([]byte(nil), good...)
	unknown[8] ^= 0xFF
	resealed := reseal(unknown)
	p.deliver(resealed)
	if ep.Stats().UnknownConn != 1 {
		t.Fatalf("unknown connection: %+v", ep.Stats())
	}
	// A replay of the accepted packet, with other bytes in it, is a
	// duplicate by DSN. It is acknowledged and never placed again.
	replay := append([]byte(nil), good...)
	for i := 60; i < 124; i++ {
		replay[i] = 0xEE
	}
	p.deliver(reseal(replay))
	// The same content replayed with a stale epoch and an old PSN.
	stale := append([]byte(nil), replay...)
	stale[6] = 3 << 6
	p.deliver(reseal(stale))
	rs := p.pr.b.ReceiverStats()
	if rs.Duplicates != 2 {
		t.Fatalf("replays counted as %d duplicates", rs.Duplicates)
	}
	// A DSN beyond the window, and a path id beyond the negotiated count.
	p.dsn += 1 << 20
	p.data(proto.TypeWrite, make([]byte, 8), writeTo(g, 0, 8))
	p.dsn -= 1<<20 + 1
	p.data(proto.TypeWrite, make([]byte, 8), func(pkt *proto.Packet) { writeTo(g, 0, 8)(pkt); pkt.Common.SetPathID(200) })
	rs = p.pr.b.ReceiverStats()
	if rs.OutOfWindow != 1 || rs.BadPath != 1 {
		t.Fatalf("receiver drops %+v", rs)
	}
	// Two packets of one message that disagree on its length.
	p.data(proto.TypeWrite, make([]byte, 8), func(pkt *proto.Packet) { writeTo(g, 0, 16)(pkt); pkt.Write().SetMSN(5) })
	p.data(proto.TypeWrite, make([]byte, 8), func(pkt *proto.Packet) {
		writeTo(g, 0, 24)(pkt)
		pkt.Write().SetMSN(5)
		pkt.Write().SetMsgOffset(8)
	})
	if p.pr.b.ReceiverStats().Inconsistent != 1 {
		t.Fatalf("inconsistent message: %+v", p.pr.b.ReceiverStats())
	}
	if n := p.tap.nacks(); len(n) != 0 {
		t.Fatalf("NACKs for dropped packets: %v", n)
	}
	// Only the first 8 bytes were written, by the consistent packet. The
	// replays changed nothing, and the guards hold.
	copy(all[4096:4096+8], bytes.Repeat([]byte{0xA5}, 8))
	untouched(t, all)
}

// reseal recomputes a crafted packet's CRC.
func reseal(b []byte) []byte {
	n := len(b) - proto.TrailerLen
	c := proto.Checksum(b[:n])
	b[n], b[n+1], b[n+2], b[n+3] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
	return b
}

// TestConnectRefusesMixedFamilies checks that Connect refuses a remote
// address of another IP family than the local plane it would be reached
// from.
func TestConnectRefusesMixedFamilies(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{})
	h := n.hosts[0]
	if _, err := h.ep.Connect([]netip.Addr{netip.MustParseAddr("2001:db8::1")}, proto.DefaultPort, h.pd, &recorder{}); err == nil {
		t.Fatal("an IPv6 remote for an IPv4 plane was accepted")
	}
}

// TestRegionReleasedOnEveryWayOut checks that a packet that reaches a
// region holds it until its placement, and lets it go on every way out. The
// packet may be placed, refused for its bounds, or, as a WRITE_IMM, refused
// for want of a receive. A hold left behind would make the region's
// Deregister wait for ever.
func TestRegionReleasedOnEveryWayOut(t *testing.T) {
	payload := bytes.Repeat([]byte{0x5A}, 64)
	cases := []struct {
		name string
		ty   proto.Type
		off  uint64
		nack []proto.NackCode
	}{
		{"placed", proto.TypeWrite, 0, nil},
		{"past the end", proto.TypeWrite, 4096 - 32, []proto.NackCode{proto.NackBounds}},
		{"no receive for its immediate", proto.TypeWriteImm, 0, []proto.NackCode{proto.NackRNR}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newProber(t, Config{})
			_, g := guarded(t, p.pr.hb, 4096, memreg.LocalWrite|memreg.RemoteWrite)
			p.data(c.ty, payload, writeTo(g, c.off, 64))
			if got := p.tap.nacks(); !slices.Equal(got, c.nack) {
				t.Fatalf("NACKs sent %v, want %v", got, c.nack)
			}
			done := make(chan error, 1)
			go func() { done <- g.Deregister() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Deregister still waits for the packet's hold on the region")
			}
		})
	}
}
