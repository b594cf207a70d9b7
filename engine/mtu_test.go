package engine

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TestPacketTooBigForThePathFailsTheConnection checks a data packet that
// the port reports too big for its path, refused by the kernel because DF
// is set. Its connection fails at once with a PathMTUError naming the path
// and the sizes. Its work is flushed and the peer told, rather than the
// packet resent for ever. A report for no connection of ours, or of a
// datagram that is not ours, changes nothing.
func TestPacketTooBigForThePathFailsTheConnection(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 4, Streams: 1})
	pr := n.connect(0, 1)
	other := n.connect(0, 1)
	var refused *link.Datagram
	n.fab.AddTap(func(e *netem.TapEvent) {
		d := e.Datagram
		if refused == nil && e.Verdict == netem.Sent && len(d.Data) > 1 && proto.Type(d.Data[1]) == proto.TypeWrite {
			var p proto.Packet
			if p.Decode(d.Data) == nil && p.Common.DstConnID() == pr.b.ID() {
				c := *d
				c.Data = append([]byte(nil), d.Data...)
				refused = &c
			}
		}
	})
	src := pr.ha.region(t, 1<<20, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 1<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 9, Op: OpWrite, Local: SGE{Region: src, Length: 1 << 20}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	n.run(time.Millisecond, func() bool { return refused != nil })
	if refused == nil {
		t.Fatal("no data packet seen")
	}
	// Reports that are not ours, of garbage and of a packet for a
	// connection id nobody has.
	n.hosts[0].ep.TooBig(&link.Datagram{Src: refused.Src, Dst: refused.Dst, Data: []byte{1, 2, 3}})
	stranger := append([]byte(nil), refused.Data...)
	var pkt proto.Packet
	if err := pkt.Decode(stranger); err != nil {
		t.Fatal(err)
	}
	pkt.Common.SetDstConnID(pkt.Common.DstConnID() + 1)
	pkt.Seal()
	n.hosts[0].ep.TooBig(&link.Datagram{Src: refused.Src, Dst: refused.Dst, Data: stranger})
	if pr.a.State() != Established {
		t.Fatal("garbage, or a refused packet of another connection, failed the connection")
	}
	n.hosts[0].ep.TooBig(refused)
	var mtu *PathMTUError
	if pr.a.State() != Closed || !errors.As(pr.a.Err(), &mtu) || mtu.Size != len(refused.Data) || mtu.Src != refused.Src || mtu.Dst != refused.Dst {
		t.Fatalf("state %v, error %v: want closed with a PathMTUError for %v -> %v, %d bytes", pr.a.State(), pr.a.Err(), refused.Src, refused.Dst, len(refused.Data))
	}
	if len(pr.ra.done) != 1 || pr.ra.done[0].ID != 9 || pr.ra.done[0].Status != StatusFlushed {
		t.Fatalf("completions %+v: want the WRITE flushed", pr.ra.done)
	}
	n.run(time.Millisecond, func() bool { return pr.b.State() == Closed })
	if pr.b.State() != Closed {
		t.Fatalf("the peer was not told: %v", pr.b.State())
	}
	if other.a.State() != Established {
		t.Fatalf("another connection on the same path failed too: %v", other.a.Err())
	}
}

// TestHandshakeTimesOut checks a peer that never answers the handshake. The
// connection fails with ErrConnectFailed once the handshake's retries are
// spent, in either mode.
func TestHandshakeTimesOut(t *testing.T) {
	for _, mode := range []proto.Mode{proto.ModeMultipath, proto.ModeBaseline} {
		n := newNet(t, twoHostFabric(2), Config{Paths: 4, Streams: 1, Mode: mode})
		rec := &recorder{}
		// Host 5 is on no link of this fabric, so everything to it is
		// dropped.
		c, err := n.hosts[0].ep.Connect([]netip.Addr{netem.Addr(0, 5), netem.Addr(1, 5)}, proto.DefaultPort, n.hosts[0].pd, rec)
		if err != nil {
			t.Fatal(err)
		}
		n.run(time.Minute, func() bool { return c.State() == Closed })
		if c.State() != Closed || !errors.Is(c.Err(), ErrConnectFailed) {
			t.Fatalf("mode %v: state %v, error %v", mode, c.State(), c.Err())
		}
	}
}

// TestDSNRingGrowsOnDemand checks that a sender's ring of DSNs in flight
// starts small and grows, up to the window, only when it fills. The data
// arrives either way. The end that only receives never has a ring or paths
// to send on (see equip).
func TestDSNRingGrowsOnDemand(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 4, Streams: 1})
	pr := n.connect(0, 1)
	if got := len(pr.a.snd.ring); got != 0 {
		t.Fatalf("a connection that posted nothing has a ring of %d", got)
	}
	pr.a.snd.equip()
	if got := len(pr.a.snd.ring); got != initialRing {
		t.Fatalf("a new connection's ring holds %d, want %d", got, initialRing)
	}
	const size = 8 << 20
	src := pr.ha.region(t, size, 5, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{Region: src, Length: size}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	n.run(time.Second, func() bool { return len(pr.ra.done) == 1 })
	if len(pr.ra.done) != 1 || pr.ra.done[0].Status != StatusOK || digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatalf("completions %+v", pr.ra.done)
	}
	if got := len(pr.a.snd.ring); got <= initialRing || uint32(got) > 2*pr.a.snd.window {
		t.Fatalf("the ring holds %d after a transfer (window %d)", got, pr.a.snd.window)
	}
	if len(pr.b.snd.ring) != 0 || len(pr.b.snd.paths) != 0 {
		t.Fatalf("the receiving end has a ring of %d and %d paths", len(pr.b.snd.ring), len(pr.b.snd.paths))
	}
}
