package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// searching reports whether some plane's path MTU search is not over.
func searching(c *Conn) bool {
	for _, p := range c.PathMTU() {
		if !p.Done {
			return true
		}
	}
	return false
}

// narrowInto schedules, at time at, the links into host 1 of planes 0 up
// to planes-1 to carry datagrams of at most mtu bytes, dropping larger
// ones silently.
func narrowInto(t *testing.T, n *testNet, planes, mtu int, at time.Duration) {
	t.Helper()
	into := &netem.LinkMatch{Kind: netem.Downlink, Host: 1, Leaf: -1, Spine: -1}
	for plane := range planes {
		if err := n.fab.ScheduleFault(at, netem.Fault{Kind: netem.LinkMTU, Plane: plane, Link: into, MTU: mtu}); err != nil {
			t.Fatal(err)
		}
	}
}

// uplinkOf matches the uplinks of one host on a plane.
func uplinkOf(host int) *netem.LinkMatch {
	return &netem.LinkMatch{Kind: netem.Uplink, Host: host, Leaf: -1, Spine: -1}
}

// refuseLocally makes a datagram that an uplink of host drops as too big
// come back to the host's endpoint at once, as the kernel's EMSGSIZE does
// when DF is set and the route's MTU is smaller. It returns the count of
// data packets so refused.
func refuseLocally(n *testNet, host int) *int {
	refused := new(int)
	n.fab.AddTap(func(e *netem.TapEvent) {
		if e.Verdict != netem.Dropped || e.Cause != netem.DropTooBig || e.Link.Kind() != netem.Uplink || e.Link.From() != host {
			return
		}
		if _, isProbe := mtuProbe(e.Datagram); !isProbe {
			*refused++
		}
		d := *e.Datagram
		d.Data = append([]byte(nil), d.Data...)
		n.sim.After(0, clock.Func(func() { n.hosts[host].ep.TooBig(&d) }))
	})
	return refused
}

// TestPathMTUFallsMidTransfer checks a path MTU that falls while a WRITE
// is under way (spec section 6.7): one plane's route comes to carry 1,472
// bytes, and the host refuses larger packets on it. The connection does
// not fail. A packet already cut at 9,000 bytes is resent cut smaller
// under new DSNs (RECUT), new packets fit, the plane's search finds its
// new size, and the data arrives intact.
func TestPathMTUFallsMidTransfer(t *testing.T) {
	skipUnderRace(t)
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, Paths: 8})
	refused := refuseLocally(n, 0)
	pr := n.connect(0, 1)
	if !pr.a.recut || !pr.b.recut {
		t.Fatal("RECUT not negotiated")
	}
	at := time.Duration(n.sim.Now()) + 100*time.Microsecond
	if err := n.fab.ScheduleFault(at, netem.Fault{Kind: netem.LinkMTU, Plane: 2, Link: uplinkOf(0), MTU: 1472}); err != nil {
		t.Fatal(err)
	}
	src, dst := n.writeWhole(t, pr, 32<<20)
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("the data differs")
	}
	s := &pr.a.snd.stats
	if *refused == 0 || s.MTUFalls == 0 || s.Recuts == 0 {
		t.Fatalf("%d data packets refused, %d falls, %d recuts: the MTU fell during no packet in flight", *refused, s.MTUFalls, s.Recuts)
	}
	t.Logf("%d data packets refused, %d recut", *refused, s.Recuts)
	if !n.run(time.Second, func() bool { return !searching(pr.a) }) {
		t.Fatalf("not searched after a second: %+v", pr.a.PathMTU())
	}
	want := [4]int{9000, 9000, 1472, 9000}
	for plane, p := range pr.a.PathMTU() {
		if !p.Done || p.Size > want[plane] || p.Size < want[plane]-mtuGranularity {
			t.Errorf("plane %d: %+v, want %d (less at most %d)", plane, p, want[plane], mtuGranularity)
		}
	}
	if pr.a.sendMax != pr.a.PathMTU()[2].Size {
		t.Errorf("packets cut to %d bytes, want plane 2's %d", pr.a.sendMax, pr.a.PathMTU()[2].Size)
	}
	// Later transfers send nothing the host refuses.
	before := *refused
	pr.ra.done = nil
	n.writeWhole(t, pr, 4<<20)
	if *refused != before {
		t.Errorf("%d more data packets refused after the search", *refused-before)
	}
	if pr.b.rcv.stats.Overlaps != 0 || pr.a.State() != Established {
		t.Fatalf("%d overlaps; connection %v (%v)", pr.b.rcv.stats.Overlaps, pr.a.State(), pr.a.Err())
	}
}

// TestPathMTUFallWithoutRecutFails checks a peer that does not offer
// RECUT: packets already cut could never be resent, so the connection
// fails with a PathMTUError at the first refusal, as spec section 6.7
// says.
func TestPathMTUFallWithoutRecutFails(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, Paths: 8, NoRecut: true})
	refuseLocally(n, 0)
	pr := n.connect(0, 1)
	if pr.a.recut || pr.b.recut {
		t.Fatal("RECUT negotiated though neither side offered it")
	}
	if err := n.fab.ScheduleFault(time.Duration(n.sim.Now())+50*time.Microsecond,
		netem.Fault{Kind: netem.LinkMTU, Plane: 1, Link: uplinkOf(0), MTU: 1472}); err != nil {
		t.Fatal(err)
	}
	src := pr.ha.region(t, 8<<20, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 8<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{Region: src, Length: 8 << 20}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	n.run(time.Second, func() bool { return pr.a.State() == Closed })
	var mtu *PathMTUError
	if pr.a.State() != Closed || !errors.As(pr.a.Err(), &mtu) || mtu.Size <= 1472 {
		t.Fatalf("connection %v (%v): want closed with a PathMTUError", pr.a.State(), pr.a.Err())
	}
}

// falseRefusals reports, for count data packets of type typ that host
// sends from time at on, that the host refused them as too big, once they
// were delivered: the resends cut smaller then meet packets that arrived
// whole. (Reported earlier, a piece on a shorter queue could overtake its
// packet, which then places some bytes twice and is dropped, spec section
// 6.5.) It returns the count reported.
func falseRefusals(n *testNet, host int, typ proto.Type, at clock.Time, count int) *int {
	reported := new(int)
	n.fab.AddTap(func(e *netem.TapEvent) {
		d := e.Datagram
		var p proto.Packet
		if *reported >= count || n.sim.Now() < at || e.Verdict != netem.Delivered || e.Link.To() == host ||
			p.Decode(d.Data) != nil || p.Type() != typ || d.Size() < 4000 {
			return
		}
		*reported++
		c := *d
		c.Data = append([]byte(nil), d.Data...)
		n.sim.After(0, clock.Func(func() { n.hosts[host].ep.TooBig(&c) }))
	})
	return reported
}

// TestRecutPiecesOfPacketsThatArrived checks the receiver's side of RECUT
// (spec section 6.5). The sender takes packets as refused that in fact
// arrived whole, and resends them cut smaller, under new DSNs. Each piece
// then finds its bytes placed, in a message under way or one already
// complete: it is acknowledged and not placed, nothing counts as an
// overlap, and every message completes with the right bytes.
func TestRecutPiecesOfPacketsThatArrived(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, Paths: 8})
	pr := n.connect(0, 1)
	reported := falseRefusals(n, 0, proto.TypeWrite, n.sim.Now().Add(20*time.Microsecond), 48)
	const msgs, size = 32, 256 << 10
	src := pr.ha.region(t, msgs*size, 3, memreg.LocalWrite)
	dst := pr.hb.region(t, msgs*size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	for i := range msgs {
		off := uint64(i * size)
		if err := pr.a.Post(SendWR{ID: uint64(i), Op: OpWrite, Stream: uint16(i % 4), Local: SGE{src, off, size},
			RKey: dst.Key(), RemoteOffset: off}); err != nil {
			t.Fatal(err)
		}
	}
	completeAll(t, n, pr.ra, msgs)
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("the data differs")
	}
	rs := &pr.b.rcv.stats
	if *reported == 0 || pr.a.snd.stats.Recuts == 0 || rs.Covered == 0 || rs.Overlaps != 0 || rs.Inconsistent != 0 {
		t.Fatalf("%d refusals reported, %d recuts, %d covered, %d overlaps, %d inconsistent",
			*reported, pr.a.snd.stats.Recuts, rs.Covered, rs.Overlaps, rs.Inconsistent)
	}
	t.Logf("%d refusals reported, %d recuts, %d pieces covered", *reported, pr.a.snd.stats.Recuts, rs.Covered)
}

// completeAll runs until rec has count completions, and fails the test
// unless they come within a second, every one ok.
func completeAll(t *testing.T, n *testNet, rec *recorder, count int) {
	t.Helper()
	if !n.run(time.Second, func() bool { return len(rec.done) == count }) {
		t.Fatalf("%d of %d completed", len(rec.done), count)
	}
	for _, wc := range rec.done {
		if wc.Status != StatusOK {
			t.Fatalf("completion %+v", wc)
		}
	}
}

// TestRecutReadResponses checks RECUT for READ responses, which the
// responder cuts and sends in its own DSNs: a piece whose bytes arrived,
// or whose READ has completed, is acknowledged at the requester rather
// than refused with BAD_TAG.
func TestRecutReadResponses(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, Paths: 8})
	pr := n.connect(0, 1)
	reported := falseRefusals(n, 1, proto.TypeReadResp, n.sim.Now().Add(20*time.Microsecond), 24)
	const reads, size = 8, 1 << 20
	remote := pr.hb.region(t, reads*size, 4, memreg.LocalWrite|memreg.RemoteRead)
	local := pr.ha.region(t, reads*size, 0, memreg.LocalWrite)
	for i := range reads {
		off := uint64(i * size)
		if err := pr.a.Post(SendWR{ID: uint64(i), Op: OpRead, Local: SGE{local, off, size}, RKey: remote.Key(), RemoteOffset: off}); err != nil {
			t.Fatal(err)
		}
	}
	completeAll(t, n, pr.ra, reads)
	if digest(local.Bytes()) != digest(remote.Bytes()) {
		t.Fatal("the data differs")
	}
	rs := &pr.a.rcv.stats
	if *reported == 0 || pr.b.snd.stats.Recuts == 0 || rs.Covered == 0 || rs.Overlaps != 0 || rs.Nacks[proto.NackBadTag&15] != 0 {
		t.Fatalf("%d refusals reported, %d recuts, %d covered, %d overlaps, %d BAD_TAG",
			*reported, pr.b.snd.stats.Recuts, rs.Covered, rs.Overlaps, rs.Nacks[proto.NackBadTag&15])
	}
	if pr.a.State() != Established || pr.b.State() != Established {
		t.Fatalf("connection %v (%v), %v (%v)", pr.a.State(), pr.a.Err(), pr.b.State(), pr.b.Err())
	}
}

// TestRecutPieceOfACompletedRead checks the requester's rule for a READ
// response whose tag names no READ outstanding (spec section 9, step 13).
// With RECUT, a tag this side gave to a READ that has since completed is a
// piece of a response that arrived whole: recorded, not refused. Any other
// tag, and every unknown tag without RECUT, is refused with BAD_TAG.
func TestRecutPieceOfACompletedRead(t *testing.T) {
	c := &Conn{recut: true}
	c.snd.c = c
	c.snd.reads = map[uint32]*message{}
	c.snd.nextTag = 10
	for _, tc := range []struct {
		recut bool
		tag   uint32
		want  proto.NackCode
	}{
		{true, 9, covering},
		{true, 0, covering},
		{true, 10, proto.NackBadTag}, // never given
		{true, 1 << 31, proto.NackBadTag},
		{false, 9, proto.NackBadTag},
	} {
		c.recut = tc.recut
		if got := c.snd.onReadData(tc.tag, 0, 100, make([]byte, 100)); got != tc.want {
			t.Errorf("RECUT %v, tag %d: %v, want %v", tc.recut, tc.tag, got, tc.want)
		}
	}
}

// TestPathMTUBlackHole checks a path MTU that falls with no error sent
// back, the usual case (RFC 8899 section 4.3): the links into the
// receiver come to drop every datagram over 1,472 bytes, on every plane,
// while a WRITE of 9,000-byte packets is under way. Paths time out, yet
// answer their unpadded PROBEs; PROBEs padded to the packets' size then go
// unanswered while their companions are answered, so each plane's size is
// searched again. The connection lives, its packets are resent cut
// smaller, and the data arrives intact, for few and for many paths.
func TestPathMTUBlackHole(t *testing.T) {
	skipUnderRace(t)
	for _, paths := range []int{4, 32} {
		n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, Paths: paths})
		pr := n.connect(0, 1)
		narrowInto(t, n, 4, 1472, time.Duration(n.sim.Now())+100*time.Microsecond)
		src, dst := n.writeWhole(t, pr, 32<<20)
		if digest(src.Bytes()) != digest(dst.Bytes()) {
			t.Fatalf("%d paths: the data differs", paths)
		}
		s := pr.a.snd.stats
		if s.MTUFalls < 4 || s.Recuts == 0 {
			t.Fatalf("%d paths: %d falls, %d checks, %d recuts: want a fall on each plane", paths, s.MTUFalls, s.MTUChecks, s.Recuts)
		}
		if !n.run(time.Second, func() bool { return !searching(pr.a) }) {
			t.Fatalf("%d paths: not searched after a second: %+v", paths, pr.a.PathMTU())
		}
		for plane, p := range pr.a.PathMTU() {
			if p.Size > 1472 || p.Size < 1472-mtuGranularity {
				t.Errorf("%d paths: plane %d: %+v, want 1,472 (less at most %d)", paths, plane, p, mtuGranularity)
			}
		}
		t.Logf("%d paths: %d checks, %d falls, %d recuts, %d timeouts", paths, s.MTUChecks, s.MTUFalls, s.Recuts, s.Timeouts)
		// Once searched, nothing more times out.
		timeouts := pr.a.snd.stats.Timeouts
		pr.ra.done = nil
		n.writeWhole(t, pr, 8<<20)
		if d := pr.a.snd.stats.Timeouts - timeouts; d != 0 {
			t.Errorf("%d paths: %d timeouts after the search", paths, d)
		}
	}
}

// TestRandomLossIsNoMTUFall checks that heavy random loss, 30% on every
// link from when the connection is up, which takes padded and unpadded
// PROBEs alike, does not pass for a fallen path MTU: the checks that its
// timeouts set off find the size still carried, and packets keep their
// size.
func TestRandomLossIsNoMTUFall(t *testing.T) {
	skipUnderRace(t)
	checks := 0
	for seed := uint64(1); seed <= 4; seed++ {
		fc := mtuFabric([4]int{})
		fc.Seed = seed
		n := newNet(t, fc, Config{MaxPacket: 9000, Paths: 8})
		pr := n.connect(0, 1)
		for plane := range 4 {
			if err := n.fab.ScheduleFault(0, netem.Fault{Kind: netem.LinkLoss, Plane: plane, Loss: &netem.RandomLoss{P: 0.3}}); err != nil {
				t.Fatal(err)
			}
		}
		src, dst := n.writeWhole(t, pr, 16<<20)
		if digest(src.Bytes()) != digest(dst.Bytes()) {
			t.Fatal("the data differs")
		}
		s := pr.a.snd.stats
		if s.MTUFalls != 0 || pr.a.sendMax != 9000 {
			t.Errorf("seed %d: %d checks, %d falls, packets of %d bytes: want no fall, 9,000", seed, s.MTUChecks, s.MTUFalls, pr.a.sendMax)
		}
		checks += int(s.MTUChecks)
	}
	if checks == 0 {
		t.Fatal("no check made: the loss tested nothing")
	}
	t.Logf("%d checks", checks)
}

// TestPathMTURaisedAfterRepair checks the search again for a path that
// came to carry more (RFC 8899's raise timer, Config.PathMTURaise): every
// plane falls silently to 1,472 bytes, is found at that size, and is
// repaired; once the raise timer runs out each plane's search finds 9,000
// bytes again, and packets grow back to it.
func TestPathMTURaisedAfterRepair(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, Paths: 8, PathMTURaise: 5 * time.Millisecond})
	pr := n.connect(0, 1)
	narrowInto(t, n, 4, 1472, time.Duration(n.sim.Now())+100*time.Microsecond)
	n.writeWhole(t, pr, 8<<20)
	if !n.run(time.Second, func() bool { return !searching(pr.a) }) || pr.a.sendMax > 1472 {
		t.Fatalf("packets of %d bytes, %+v: want the fall found", pr.a.sendMax, pr.a.PathMTU())
	}
	fell := n.sim.Now()
	into := &netem.LinkMatch{Kind: netem.Downlink, Host: 1, Leaf: -1, Spine: -1}
	for plane := range 4 {
		if err := n.fab.ScheduleFault(0, netem.Fault{Kind: netem.Repair, Plane: plane, Link: into}); err != nil {
			t.Fatal(err)
		}
	}
	if !n.run(100*time.Millisecond, func() bool { return pr.a.sendMax == 9000 }) {
		t.Fatalf("packets of %d bytes 100 ms after the repair: %+v", pr.a.sendMax, pr.a.PathMTU())
	}
	if d := n.sim.Now().Sub(fell); d < 5*time.Millisecond {
		t.Errorf("raised %v after the search, before the raise timer of 5 ms", d)
	}
	pr.ra.done = nil
	src, dst := n.writeWhole(t, pr, 8<<20)
	if digest(src.Bytes()) != digest(dst.Bytes()) || pr.a.State() != Established {
		t.Fatalf("after the raise: data equal %v, connection %v", digest(src.Bytes()) == digest(dst.Bytes()), pr.a.State())
	}
}

// TestPathMTUFallOfALastPlane checks planes that fall at different times:
// three fall silently to 1,472 bytes and are found, with their raise
// timers set; then the fourth falls to 1,300, and its own search ends
// within milliseconds at that size.
func TestPathMTUFallOfALastPlane(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, Paths: 8})
	pr := n.connect(0, 1)
	narrowInto(t, n, 3, 1472, time.Duration(n.sim.Now())+100*time.Microsecond)
	n.writeWhole(t, pr, 8<<20)
	if !n.run(time.Second, func() bool { return !searching(pr.a) }) {
		t.Fatalf("three planes not searched: %+v", pr.a.PathMTU())
	}
	into := &netem.LinkMatch{Kind: netem.Downlink, Host: 1, Leaf: -1, Spine: -1}
	if err := n.fab.ScheduleFault(0, netem.Fault{Kind: netem.LinkMTU, Plane: 3, Link: into, MTU: 1300}); err != nil {
		t.Fatal(err)
	}
	pr.ra.done = nil
	n.writeWhole(t, pr, 8<<20)
	start := n.sim.Now()
	if !n.run(50*time.Millisecond, func() bool { return !searching(pr.a) }) {
		t.Fatalf("plane 3 not searched 50 ms after the WRITE: %+v", pr.a.PathMTU())
	}
	if got := pr.a.PathMTU()[3].Size; got > 1300 || got < 1300-mtuGranularity || pr.a.sendMax != got {
		t.Fatalf("plane 3 at %d bytes, packets of %d: want 1,300 or at most %d less", got, pr.a.sendMax, mtuGranularity)
	}
	t.Logf("plane 3 searched %v after the WRITE", n.sim.Now().Sub(start))
}

// TestPathMTUSearchWaitsForAPathNoLongerThanBadProbeMax checks a plane
// whose search must wait for a path in service, while the other planes'
// searches are over and wait only for their raise timers: the search
// timer comes again within BadProbeMax, not at the next raise, and once a
// path serves again the probe goes.
func TestPathMTUSearchWaitsForAPathNoLongerThanBadProbeMax(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, BasePacket: 1200, Paths: 4})
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 1<<20)
	if !n.run(time.Second, func() bool { return !searching(pr.a) }) {
		t.Fatalf("not searched: %+v", pr.a.PathMTU())
	}
	c := pr.a
	now := n.sim.Now()
	for plane := range c.mtu.planes {
		c.mtu.planes[plane].raiseAt = now.Add(10 * time.Minute)
	}
	p := &c.mtu.planes[3]
	p.trying, p.limit, p.raiseAt = 4000, 8999, 0
	var path *sendPath
	for _, q := range c.snd.paths {
		if q.Plane() == 3 {
			path = q
			q.TimedOut() // no path of plane 3 in service
		}
	}
	c.probeMTUs()
	if p.due != 0 {
		t.Fatal("a probe went on a plane with no path in service")
	}
	if d := c.mtu.timer.Deadline(); d == clock.Never || d.Sub(now) > c.ep.cfg.BadProbeMax {
		t.Fatalf("the search timer is due in %v, want at most BadProbeMax (%v)", d.Sub(now), c.ep.cfg.BadProbeMax)
	}
	path.Delivered() // back in service
	n.run(c.ep.cfg.BadProbeMax+time.Microsecond, func() bool { return p.pairs > 0 })
	if p.pairs == 0 {
		t.Fatal("no probe of plane 3 after its path came back")
	}
}

// TestFullSizedDeliveryIsSeen checks what keeps a timeout from setting off
// a check of the path MTU (verifyMTU): the sender notes when a packet of
// full size that an ACK reported received was sent on each plane, also on
// one path whose ACKs advance CumDSN past what they report.
func TestFullSizedDeliveryIsSeen(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 1})
	pr := n.connect(0, 1)
	before := n.sim.Now()
	n.writeWhole(t, pr, 1<<20)
	if got := pr.a.snd.fullAcked[0]; got <= before {
		t.Fatalf("the newest full-sized packet acknowledged was sent at %v, before the WRITE (%v)", got, before)
	}
}

// TestPathMTUBlackHoleWithoutRecut runs TestPathMTUBlackHole's fault on a
// connection without RECUT: packets already cut could not be resent
// smaller, so nothing checks the size, and the WRITE ends at the
// no-progress timeout, as every connection's did before RECUT.
func TestPathMTUBlackHoleWithoutRecut(t *testing.T) {
	n := newNet(t, mtuFabric([4]int{}), Config{MaxPacket: 9000, Paths: 4, NoRecut: true})
	pr := n.connect(0, 1)
	narrowInto(t, n, 4, 1472, time.Duration(n.sim.Now())+100*time.Microsecond)
	src := pr.ha.region(t, 32<<20, 5, memreg.LocalWrite)
	dst := pr.hb.region(t, 32<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 32 << 20}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	n.run(2*time.Second, func() bool { return len(pr.ra.done) == 1 })
	s := pr.a.snd.stats
	if len(pr.ra.done) != 1 || pr.ra.done[0].Status == StatusOK || pr.a.State() != Closed || s.MTUChecks != 0 {
		t.Fatalf("completions %+v, connection %v, %d checks: want the WRITE failed by the timeout, no check", pr.ra.done, pr.a.State(), s.MTUChecks)
	}
	t.Logf("closed after %v: %v; %d timeouts", n.sim.Now(), pr.a.Err(), s.Timeouts)
}
