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
