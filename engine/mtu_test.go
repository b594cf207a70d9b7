package engine

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TestPacketTooBigForThePathFailsTheConnection checks a data packet that
// the port reports too big for its path, refused by the kernel because DF
// is set, on a connection without RECUT (spec section 6.7). Its connection fails at once with a PathMTUError naming the path
// and the sizes. Its work is flushed and the peer told, rather than the
// packet resent for ever. A report for no connection of ours, or of a
// datagram that is not ours, changes nothing.
func TestPacketTooBigForThePathFailsTheConnection(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 4, Streams: 1, NoRecut: true})
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

// mtuFabric is two hosts on four planes whose downlinks carry, by plane,
// the largest datagrams in mtus (0: the fabric's 9,000).
func mtuFabric(mtus [4]int) netem.Config {
	fc := twoHostFabric(4)
	fc.MaxDatagram = 9000
	for plane, mtu := range mtus {
		l := link100()
		l.MTU = mtu
		fc.Overrides = append(fc.Overrides, netem.Override{Plane: plane,
			Match: netem.LinkMatch{Kind: netem.Downlink, Host: -1, Leaf: -1, Spine: -1}, Link: l})
	}
	return fc
}

// mtuProbe reports whether a datagram is a PROBE of the path MTU search,
// and its size.
func mtuProbe(d *link.Datagram) (int, bool) {
	var p proto.Packet
	if p.Decode(d.Data) != nil || p.Type() != proto.TypeProbe {
		return 0, false
	}
	return d.Size(), isMTUProbe(p.Probe().ProbeID())
}

// TestPathMTUSearch checks the search of spec section 6.7 on planes whose
// links carry less than the interfaces claim: 9,000 bytes on two planes,
// 1,472 (an Ethernet MTU of 1,500) on one, and 4,000, no common MTU, on
// another. A connection that starts at 1,200 bytes learns each plane's
// size to within the search's granularity and never sends a data packet
// that a plane cannot carry. New packets grow to the smallest plane's size
// as soon as every plane has shown it, and the data arrives intact.
func TestPathMTUSearch(t *testing.T) {
	skipUnderRace(t)
	want := [4]int{9000, 4000, 1472, 9000}
	n := newNet(t, mtuFabric([4]int{0, 4000, 1472, 0}), Config{MaxPacket: 9000, BasePacket: 1200, Paths: 8})
	var dataTooBig, probesTooBig int
	sizes := map[int]bool{}
	n.fab.AddTap(func(e *netem.TapEvent) {
		_, isProbe := mtuProbe(e.Datagram)
		switch {
		case e.Verdict == netem.Dropped && e.Cause == netem.DropTooBig && isProbe:
			probesTooBig++
		case e.Verdict == netem.Dropped && e.Cause == netem.DropTooBig:
			dataTooBig++
		case e.Verdict == netem.Sent && e.Link.Kind() == netem.Uplink && !isProbe && e.Link.From() == 0:
			sizes[e.Datagram.Size()] = true
		}
	})
	pr := n.connect(0, 1)
	start := n.sim.Now()
	src, dst := n.writeWhole(t, pr, 32<<20)
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("the data differs")
	}
	searched := func() bool {
		for _, p := range pr.a.PathMTU() {
			if !p.Done {
				return false
			}
		}
		return true
	}
	if !n.run(time.Second, searched) {
		t.Fatalf("not searched after a second: %+v", pr.a.PathMTU())
	}
	t.Logf("searched in %v", n.sim.Now().Sub(start))
	pr.ra.done = nil
	n.writeWhole(t, pr, 4<<20)
	got := pr.a.PathMTU()
	for plane, p := range got {
		if !p.Done || p.Size > want[plane] || p.Size < want[plane]-mtuGranularity {
			t.Errorf("plane %d: learned %+v, want %d (less at most %d), done", plane, p, want[plane], mtuGranularity)
		}
	}
	if dataTooBig != 0 || probesTooBig == 0 {
		t.Errorf("%d data packets and %d probes dropped as too big: want none and some", dataTooBig, probesTooBig)
	}
	if !sizes[1472] || !sizes[1200] {
		t.Errorf("data packet sizes %v: want 1,200 at first and 1,472 later", sizes)
	}
	if pr.a.sendMax != 1472 {
		t.Errorf("packets cut to %d bytes, want 1,472", pr.a.sendMax)
	}
	if probes := pr.a.snd.stats.MTUProbes; probes > 80 {
		t.Errorf("%d MTU probes", probes)
	}
	if pr.a.State() != Established {
		t.Fatalf("connection %v: %v", pr.a.State(), pr.a.Err())
	}
}

// TestPathMTUSearchCarriesTheCeilingAtOnce checks that where every plane
// carries what was negotiated, one probe a plane settles the search, and
// the packets reach full size after about a round trip.
func TestPathMTUSearchCarriesTheCeilingAtOnce(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, BasePacket: 1200, Paths: 8})
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 8<<20)
	if probes := pr.a.snd.stats.MTUProbes; probes != 4 || pr.a.sendMax != 9000 {
		t.Errorf("%d MTU probes, packets of %d bytes: want 4 and 9,000", probes, pr.a.sendMax)
	}
	for plane, p := range pr.a.PathMTU() {
		if p != (PlaneMTU{Size: 9000, Done: true}) {
			t.Errorf("plane %d: %+v", plane, p)
		}
	}
}

// TestPathMTUProbeRefusedLocally checks a PROBE the local host refuses as
// too big for its route (the port's TooBig): the size is out at once, no
// probe of it is sent again, and the connection carries on, where a data
// packet refused the same way fails it.
func TestPathMTUProbeRefusedLocally(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{0, 0, 0, 2000}), Config{MaxPacket: 9000, BasePacket: 1200, Paths: 4})
	refused := map[int]int{} // probes the "kernel" refused, by size
	n.fab.AddTap(func(e *netem.TapEvent) {
		if size, isProbe := mtuProbe(e.Datagram); isProbe && e.Verdict == netem.Dropped && e.Cause == netem.DropTooBig {
			// As if the host's route said so: the report comes back at once.
			refused[size]++
			d := *e.Datagram
			d.Data = append([]byte(nil), d.Data...)
			n.sim.After(0, clock.Func(func() { n.hosts[0].ep.TooBig(&d) }))
		}
	})
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 8<<20)
	if p := pr.a.PathMTU()[3]; !p.Done || p.Size > 2000 || p.Size < 2000-mtuGranularity {
		t.Errorf("plane 3: %+v", p)
	}
	for size, k := range refused {
		if k != 1 {
			t.Errorf("a probe of %d bytes sent %d times after the host refused it", size, k)
		}
	}
	if len(refused) == 0 || pr.a.State() != Established {
		t.Fatalf("%d sizes refused, connection %v (%v)", len(refused), pr.a.State(), pr.a.Err())
	}
}

// A sender equipped before its connection is up, as an acceptor whose
// paths are asked about while it accepts, still searches once it is.
func TestPathMTUSearchOfASenderEquippedEarly(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, BasePacket: 1200, Paths: 4})
	pr := &pair{ra: &recorder{}, rb: &recorder{}, ha: n.hosts[0], hb: n.hosts[1]}
	n.hosts[1].ep.Listen(n.hosts[1].pd, func(c *Conn) (Events, bool) {
		pr.accepted = c
		return pr.rb, true
	})
	var remote []netip.Addr
	for p := range 4 {
		remote = append(remote, netem.Addr(p, 1))
	}
	c, err := n.hosts[0].ep.Connect(remote, proto.DefaultPort, n.hosts[0].pd, pr.ra)
	if err != nil {
		t.Fatal(err)
	}
	pr.a = c
	n.run(time.Millisecond, func() bool { return pr.accepted != nil })
	if pr.accepted.State() != Accepting {
		t.Fatalf("acceptor %v", pr.accepted.State())
	}
	pr.accepted.Telemetry() // equips its sender while it accepts
	n.run(time.Millisecond, func() bool { return pr.accepted.State() == Established })
	// The acceptor WRITEs to the initiator.
	back := &pair{a: pr.accepted, b: c, ra: pr.rb, rb: pr.ra, ha: pr.hb, hb: pr.ha}
	n.writeWhole(t, back, 1<<20)
	n.run(time.Second, func() bool { return pr.accepted.PathMTU()[0].Done })
	for plane, p := range pr.accepted.PathMTU() {
		if p != (PlaneMTU{Size: 9000, Done: true}) {
			t.Errorf("plane %d: %+v", plane, p)
		}
	}
}

// smallPort hands out buffers of room bytes.
type smallPort struct{ room int }

func (p smallPort) Buffer() []byte         { return make([]byte, 0, p.room) }
func (p smallPort) Send(_ []link.Datagram) {}

// TestMaxPacketBeyondThePortIsRefused checks that an endpoint whose
// MaxPacket its port's buffers cannot hold is refused with an error that
// names both sizes, rather than failing when it builds its first packet
// that large. One whose packets fit is made.
func TestMaxPacketBeyondThePortIsRefused(t *testing.T) {
	clk := clock.NewSim()
	planes := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	_, err := NewEndpoint(Config{Planes: planes, Port: 4791, MaxPacket: 16448}, clk, smallPort{room: 9000})
	if err == nil || !strings.Contains(err.Error(), "16448") || !strings.Contains(err.Error(), "9000") {
		t.Fatalf("MaxPacket 16448 over buffers of 9000: got %v, want an error naming both", err)
	}
	if _, err := NewEndpoint(Config{Planes: planes, Port: 4791, MaxPacket: 9000}, clk, smallPort{room: 9000}); err != nil {
		t.Fatalf("MaxPacket 9000 over buffers of 9000: %v", err)
	}
}

// TestHandshakeResendsAtLeastEverySecond checks that the CONNECT's resend
// interval stops doubling at handshakeMaxGap: with its first seven CONNECTs
// lost, a connection whose connect timeout is 8 s is established. Doubling
// on, the eighth would go at 12.7 s.
func TestHandshakeResendsAtLeastEverySecond(t *testing.T) {
	drop := &dropPort{match: func(p *proto.Packet) bool { return p.Type() == proto.TypeConnect }, limit: 7}
	n := newNetWithDrop(t, twoHostFabric(1), Config{ConnectTimeout: 8 * time.Second}, drop)
	pr := n.connect(0, 1)
	if drop.dropped != 7 {
		t.Fatalf("%d CONNECTs dropped, want 7", drop.dropped)
	}
	if at := n.sim.Now(); at > clock.Time(5*time.Second) {
		t.Fatalf("established at %v, want by 5 s (CONNECTs at 0, 0.1, 0.3, 0.7, 1.5, 2.5, 3.5 and 4.5 s)", time.Duration(at))
	}
	if pr.b.State() != Established {
		t.Fatalf("acceptor %v", pr.b.State())
	}
}
