package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TestWindowsRegrowOnceTheRouteClears runs two WRITEs over one leaf-spine
// plane of 400 Gb/s links of 2 µs, whose single spine link from the
// senders' leaf both cross and which marks from 64 KiB: 16 MiB from host 0
// to host 2 and 2 MiB from host 1 to host 3. While both run, the marks cut
// the long WRITE's windows; once the short one ends, its route queues
// nothing and its receiver still grants its whole line. Its windows then
// regrow by grant (routeClear), and it ends sooner than with additive
// increase alone, a packet a round trip.
func TestWindowsRegrowOnceTheRouteClears(t *testing.T) {
	run := func(off bool) (took, shortTook time.Duration, marks uint64) {
		routeClearOff = off
		defer func() { routeClearOff = false }()
		l := netem.LinkConfig{Rate: 400e9, Delay: 2 * time.Microsecond}
		l.Queue.ECNThreshold = 64 << 10
		fc := netem.Config{Seed: 1, Hosts: 4, Planes: 1, HostsPerLeaf: 2, Spines: 1,
			Uplink: l, Downlink: l, FabricUp: l, FabricDown: l}
		n := newNet(t, fc, Config{Paths: 8, InboundCapacity: 49e9})
		long, short := n.connect(0, 2), n.connect(1, 3)
		start := n.sim.Now()
		long.postWrite(t, 4096)
		short.postWrite(t, 512)
		if !n.runUntilSent([]*pair{short}, time.Second) {
			t.Fatalf("routeClear off %v: the short WRITE did not end", off)
		}
		shortTook = n.sim.Now().Sub(start)
		if !n.runUntilSent([]*pair{long}, time.Second) {
			t.Fatalf("routeClear off %v: the long WRITE did not end", off)
		}
		for _, p := range long.a.snd.paths {
			marks += p.Counters.CEMarks
		}
		return n.sim.Now().Sub(start), shortTook, marks
	}
	on, shortOn, marksOn := run(false)
	off, shortOff, marksOff := run(true)
	t.Logf("with routeClear: %v (the short WRITE %v, %d marks); without: %v (%v, %d marks)", on, shortOn, marksOn, off, shortOff, marksOff)
	if marksOn == 0 || marksOff == 0 {
		t.Fatalf("the long WRITE saw %d and %d marks: want the shared link to mark it", marksOn, marksOff)
	}
	if on >= off {
		t.Errorf("the long WRITE took %v with routeClear, %v without: want sooner", on, off)
	}
	if shortOn > shortOff+shortOff/20 {
		t.Errorf("the short WRITE took %v with routeClear, %v without: the long one took the shared link from it", shortOn, shortOff)
	}
}

// TestRouteClearReadsTheQueueAtTheMark checks routeClear's reading of one
// path. A sample that queues under an eighth of the least round trip
// grants, and one above it does not; after a mark, a sample must also
// queue under half of what the mark came with, so that a DCTCP queue that
// stands at a short threshold grants nothing. Within the least round trip
// after a mark, on a record without a sample, and on a path whose least
// round trip is more than a quarter longer than its connection's
// shortest, nothing grants. A path that moved to a new route forgets the
// old route's mark. The host's scheduling delay, which the room also
// subtracts, is 0 in virtual time.
func TestRouteClearReadsTheQueueAtTheMark(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 2, InboundCapacity: 1e11}) // a hint above what the windows carry
	pr := n.connect(0, 1)
	pr.postWrite(t, 64)
	if !n.runUntilSent([]*pair{pr}, time.Second) {
		t.Fatal("the WRITE did not end")
	}
	p, sibling := pr.a.snd.paths[0], pr.a.snd.paths[1]
	if p.RTT.Min > sibling.RTT.Min {
		p, sibling = sibling, p
	}
	if !pr.a.snd.underHint() || p.RTT.Samples == 0 || sibling.RTT.Samples == 0 {
		t.Fatalf("hint %v, windows' rate %v, least RTT %v: want a hint above the windows' rate and a sample", pr.a.snd.hint, pr.a.snd.windowsRate(), p.RTT.Min)
	}
	at := n.sim.Now()
	least := p.RTT.Min
	for _, c := range []struct {
		name             string
		markedAt         clock.Time
		queue, markQueue time.Duration
		sampled          bool
		want             bool
	}{
		{"never marked, an empty route", 0, least / 16, 0, true, true},
		{"never marked, a queue", 0, least / 4, 0, true, false},
		{"marked, an empty route", at.Add(-2 * least), least / 16, 4 * least, true, true},
		{"marked, a queue under half the mark's but over an eighth of the RTT", at.Add(-2 * least), least / 4, 4 * least, true, false},
		{"marked, a short threshold's standing queue", at.Add(-2 * least), 3 * least / 32, least / 8, true, false},
		{"marked within the least RTT", at.Add(-least / 2), least / 16, 4 * least, true, false},
		{"no sample", at.Add(-2 * least), least / 16, 4 * least, false, false},
	} {
		p.markedAt, p.queue, p.markQueue = c.markedAt, c.queue, c.markQueue
		if got := p.routeClear(c.sampled, at); got != c.want {
			t.Errorf("%s: routeClear %v, want %v", c.name, got, c.want)
		}
	}
	sibling.markedAt, sibling.markQueue = 0, 0
	for _, c := range []struct {
		min  time.Duration
		want bool
	}{{2 * least, false}, {least + least/5, true}} {
		sibling.RTT.Min = c.min
		sibling.queue = c.min / 16
		if got := sibling.routeClear(true, at); got != c.want {
			t.Errorf("a path whose least RTT is %v against its connection's shortest %v: routeClear %v, want %v", c.min, least, got, c.want)
		}
	}
	p.markedAt, p.markQueue = at.Add(-2*least), least/8
	if !p.repath(at) {
		t.Fatal("the path could not move to a new source port")
	}
	p.queue = 3 * least / 32
	if !p.routeClear(true, at) {
		t.Errorf("after a move, a queue under an eighth of the least RTT: no routeClear, want one (the old route's mark forgotten)")
	}
}

// TestLateRecordOfTheOldRouteReadsNoQueue checks that after a path's move
// to a new source port a late record of the old route gives the new route
// neither a queue reading nor a mark's (spec section 6.3): relief, the
// regrowth by grant and the copies read those of the route the path is
// on. Nor does a record of the new epoch whose echo is a late packet of
// the old route's (section 5.5). A record of the new route does.
func TestLateRecordOfTheOldRouteReadsNoQueue(t *testing.T) {
	n, pr, p := writtenPath(t, 1)
	old, last := p.Epoch(), p.next-1
	at := n.sim.Now()
	before := uint32(at) - 20000 // an echo sent before the move
	if !p.repath(at) {
		t.Fatal("the path could not move to a new source port")
	}
	if p.queued || p.markQueue != 0 {
		t.Fatalf("after the move: queued %v, mark's queue %v, want none", p.queued, p.markQueue)
	}
	marks := p.Counters.CEMarks
	p.onRecord(ackRecord(p, old, last, p.ce+1, before), uint32(at)-10000, at) // with a mark, of the old route
	if p.Counters.CEMarks == marks {
		t.Fatal("the record was not taken: its mark was not counted")
	}
	if p.queued || p.markQueue != 0 {
		t.Errorf("a late record of the old epoch: queued %v (queue %v), mark's queue %v, want no reading of the new route", p.queued, p.queue, p.markQueue)
	}
	// Packets of the new epoch, then a record of them whose echo is a late
	// packet of the old route.
	pr.postWrite(t, 16)
	if !n.runUntilSent([]*pair{pr}, time.Second) {
		t.Fatal("the second WRITE did not end")
	}
	if !proto.SeqLess(p.EpochStart(p.Epoch()), p.next) {
		t.Fatal("the path sent nothing on its new route")
	}
	later := n.sim.Now()
	p.queued = false
	p.onRecord(ackRecord(p, p.Epoch(), p.next-1, p.ce, before), uint32(later)-1000, later)
	if p.queued {
		t.Errorf("a record of the new epoch echoing the old route: queued %v (queue %v), want no reading", p.queued, p.queue)
	}
	p.onRecord(ackRecord(p, p.Epoch(), p.next-1, p.ce, uint32(later)-5000), uint32(later)-1000, later)
	if !p.queued {
		t.Error("a record of the new route: no queue reading, want one")
	}
}

// TestLateRecordOfTheOldPlaneMeasuresNothing checks that after a path's
// move to another plane a late record of the plane it left gives it no RTT
// sample, whose estimate starts afresh there, and marks the new plane as
// marking nothing.
func TestLateRecordOfTheOldPlaneMeasuresNothing(t *testing.T) {
	n, _, p := writtenPath(t, 2)
	old, last := p.Epoch(), p.next-1
	at := n.sim.Now()
	to := 1 - p.Plane()
	n.hosts[0].ep.marking[to] = false
	if !p.moveTo(to, at) {
		t.Fatal("the path could not move to the other plane")
	}
	if p.RTT.Samples != 0 {
		t.Fatalf("after the move: %d RTT samples, want none", p.RTT.Samples)
	}
	p.onRecord(ackRecord(p, old, last, p.ce+1, uint32(at)-20000), uint32(at)-10000, at)
	if p.RTT.Samples != 0 || n.hosts[0].ep.marking[to] {
		t.Errorf("a late record of the plane left: %d RTT samples, the new plane marking %v; want none and false", p.RTT.Samples, n.hosts[0].ep.marking[to])
	}
}

// writtenPath returns a connection's first path after a WRITE over a
// fabric of the given planes, two paths a plane.
func writtenPath(t *testing.T, planes int) (*testNet, *pair, *sendPath) {
	t.Helper()
	n := newNet(t, twoHostFabric(planes), Config{Paths: 2 * planes})
	pr := n.connect(0, 1)
	pr.postWrite(t, 64)
	if !n.runUntilSent([]*pair{pr}, time.Second) {
		t.Fatal("the WRITE did not end")
	}
	return n, pr, pr.a.snd.paths[0]
}

// ackRecord builds an ACK record for path p of epoch e, newest PSN h, CE
// count ce and echo timestamp echo, its ServiceTime 0.
func ackRecord(p *sendPath, e uint8, h, ce, echo uint32) proto.AckRecord {
	var pkt proto.Packet
	if err := proto.Build(&pkt, make([]byte, proto.MaxPacketLen), proto.TypeAck, 1, 0); err != nil {
		panic(err)
	}
	rec := pkt.AckRecord(0)
	rec.SetPathID(uint8(p.ID()))
	rec.SetEpoch(e)
	rec.SetHighestPSN(h)
	rec.SetCECount(ce)
	rec.SetEchoTimestamp(echo)
	return rec
}
