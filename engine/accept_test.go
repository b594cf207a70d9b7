package engine

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// An initiator refuses an ACCEPT that grants more than it offered, or
// another mode, with CLOSE PARAMS whose Detail is the offset of the field
// refused (spec sections 5.9 and 8.2), and its connection fails.
func TestInitiatorRefusesABadAccept(t *testing.T) {
	for _, c := range []struct {
		name   string
		set    func(h proto.HandshakeHeader)
		detail uint32
	}{
		{"more paths", func(h proto.HandshakeHeader) { h.SetPaths(9) }, 18},
		{"more streams", func(h proto.HandshakeHeader) { h.SetStreams(9) }, 20},
		{"another mode", func(h proto.HandshakeHeader) { h.SetMode(proto.ModeBaseline) }, 40},
		{"no reply port", func(h proto.HandshakeHeader) { h.SetReplyPort(0) }, 22},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newNet(t, twoHostFabric(1), Config{Paths: 8, Streams: 8})
			acceptor := n.fab.Host(1)
			var closes []proto.CloseHeader
			acceptor.Attach(link.ReceiverFunc(func(d *link.Datagram, _ clock.Time) {
				var in proto.Packet
				if in.Decode(d.Data) != nil {
					return
				}
				switch in.Type() {
				case proto.TypeConnect:
					var out proto.Packet
					buf := acceptor.Buffer()
					proto.Build(&out, buf[:cap(buf)], proto.TypeAccept, 0, 0)
					out.Common.SetDstConnID(in.Handshake().SrcConnID())
					h := out.Handshake()
					h.SetSrcConnID(77)
					h.SetDSNWindow(64)
					h.SetMaxPacket(4160)
					h.SetPaths(8)
					h.SetStreams(8)
					h.SetReplyPort(proto.DefaultPort)
					h.SetInboundCapacity(proto.CapacityUnknown)
					c.set(h)
					acceptor.Send([]link.Datagram{{Src: d.Dst, Dst: d.Src, Data: out.Seal()}})
				case proto.TypeClose:
					closes = append(closes, append(proto.CloseHeader(nil), in.Close()...))
				}
			}))
			rec := &recorder{}
			conn, err := n.hosts[0].ep.Connect([]netip.Addr{netem.Addr(0, 1)}, proto.DefaultPort, n.hosts[0].pd, rec)
			if err != nil {
				t.Fatal(err)
			}
			n.run(50*time.Millisecond, func() bool { return conn.State() == Closed && len(closes) > 0 })
			var re *RemoteError
			if conn.State() != Closed || !errors.As(conn.Err(), &re) || re.Reason != proto.CloseParams {
				t.Fatalf("connection %v, %v; want closed with a PARAMS error", conn.State(), conn.Err())
			}
			if len(closes) == 0 || closes[0].Reason() != proto.CloseParams || closes[0].Detail() != c.detail {
				t.Fatalf("CLOSEs sent %v; want PARAMS with Detail %d", closes, c.detail)
			}
		})
	}
}

// A CONNECT that never completes draws one ACCEPT and no more, so a
// forged source address cannot be made the target of a stream of them;
// the half-open connection is freed at its connect timeout (spec section
// 8.1). A resent CONNECT draws one more.
func TestOneAcceptPerConnect(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{ConnectTimeout: time.Second})
	tap := &tapPort{Port: n.fab.Host(1)}
	n.hosts[1].ep.port = tap
	n.hosts[1].ep.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	connect := func() {
		var pkt proto.Packet
		proto.Build(&pkt, make([]byte, 512), proto.TypeConnect, 0, 0)
		h := pkt.Handshake()
		h.SetSrcConnID(99)
		h.SetDSNWindow(64)
		h.SetMaxPacket(4160)
		h.SetPaths(1)
		h.SetStreams(1)
		h.SetReplyPort(proto.DefaultPort)
		h.SetInboundCapacity(proto.CapacityUnknown)
		d := link.Datagram{Src: netip.AddrPortFrom(netem.Addr(0, 7), 49152), Dst: netip.AddrPortFrom(netem.Addr(0, 1), proto.DefaultPort),
			Data: pkt.Seal()}
		n.hosts[1].ep.Receive(&d, n.sim.Now())
	}
	accepts := func() int {
		k := 0
		for i := range tap.sent {
			if tap.sent[i].Type() == proto.TypeAccept {
				k++
			}
		}
		return k
	}
	connect()
	n.sim.RunFor(900 * time.Millisecond)
	if got := accepts(); got != 1 {
		t.Fatalf("%d ACCEPTs for one CONNECT, want 1", got)
	}
	connect() // resent
	n.sim.RunFor(200 * time.Millisecond)
	if got := accepts(); got != 2 {
		t.Fatalf("%d ACCEPTs for a CONNECT and its copy, want 2", got)
	}
	if e := n.hosts[1].ep; e.accepting != 0 || len(e.conns) != 0 {
		t.Fatalf("after the connect timeout: %d accepting, %d connections; want none", e.accepting, len(e.conns))
	}
}
