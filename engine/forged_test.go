package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// forge builds a control packet of type t for host h's connection c, lets
// fill set its fields, and hands it to host h's endpoint from src.
func forge(n *testNet, h int, c *Conn, t proto.Type, records int, src netip.Addr, fill func(*proto.Packet)) {
	var pkt proto.Packet
	if err := proto.Build(&pkt, make([]byte, 2048), t, records, 0); err != nil {
		n.t.Fatal(err)
	}
	pkt.Common.SetDstConnID(c.ID())
	fill(&pkt)
	d := link.Datagram{Src: netip.AddrPortFrom(src, 49152), Dst: netip.AddrPortFrom(netem.Addr(0, h), proto.DefaultPort),
		Data: pkt.Seal()}
	n.hosts[h].ep.Receive(&d, n.sim.Now())
}

// busyPair is an established pair whose initiator has a WRITE in flight.
func busyPair(t *testing.T) (*testNet, *pair) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 2})
	pr := n.connect(0, 1)
	const size = 64 << 20
	src := pr.ha.region(t, size, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
	n.run(20*time.Microsecond, func() bool { return false })
	if pr.a.snd.inflight() == 0 {
		t.Fatal("nothing in flight")
	}
	return n, pr
}

// Control packets that a party knowing only the connection id could forge
// change nothing: a CLOSE or a fatal NACK from an address the peer does
// not use, a fatal NACK naming no transmission in flight, and an ACK of
// DSNs never sent (spec sections 7.1 and 9).
func TestForgedControlPacketsAreNotObeyed(t *testing.T) {
	skipUnderRace(t)
	stranger := netem.Addr(0, 9)
	peer := netem.Addr(0, 1)
	for _, c := range []struct {
		name  string
		src   netip.Addr
		typ   proto.Type
		fill  func(pr *pair) func(*proto.Packet)
		count func(pr *pair) uint64
	}{
		{"a CLOSE from a stranger", stranger, proto.TypeClose,
			func(*pair) func(*proto.Packet) {
				return func(p *proto.Packet) { p.Close().SetReason(proto.CloseFatal) }
			},
			func(pr *pair) uint64 { return pr.a.ep.Stats().WrongSource }},
		{"a fatal NACK from a stranger", stranger, proto.TypeNack,
			func(pr *pair) func(*proto.Packet) {
				return func(p *proto.Packet) {
					p.Nack().SetCode(proto.NackBadKey)
					p.Nack().SetDSN(pr.a.snd.una)
				}
			},
			func(pr *pair) uint64 { return pr.a.ep.Stats().WrongSource }},
		{"a fatal NACK for no transmission", peer, proto.TypeNack,
			func(pr *pair) func(*proto.Packet) {
				return func(p *proto.Packet) {
					p.Nack().SetCode(proto.NackBadKey)
					p.Nack().SetDSN(pr.a.snd.una)
					p.Nack().SetPSN(pr.a.snd.paths[0].next + 1000) // never sent
				}
			},
			func(pr *pair) uint64 { return pr.a.SenderStats().BadNacks }},
		{"an ACK of DSNs never sent", peer, proto.TypeAck,
			func(pr *pair) func(*proto.Packet) {
				return func(p *proto.Packet) { p.Ack().SetCumDSN(pr.a.snd.nextDSN + 100) }
			},
			func(pr *pair) uint64 { return pr.a.SenderStats().BadAcks }},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, pr := busyPair(t)
			una, inflight := pr.a.snd.una, pr.a.snd.inflight()
			forge(n, 0, pr.a, c.typ, 0, c.src, c.fill(pr))
			if pr.a.State() != Established || pr.a.snd.una != una || pr.a.snd.inflight() != inflight {
				t.Fatalf("obeyed: %v (%v), una %d -> %d, in flight %d -> %d", pr.a.State(), pr.a.Err(),
					una, pr.a.snd.una, inflight, pr.a.snd.inflight())
			}
			if c.count(pr) != 1 {
				t.Fatalf("counted %d, want 1", c.count(pr))
			}
			if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
				t.Fatalf("the transfer did not complete after the forgery: %+v", pr.ra.done)
			}
		})
	}
}
