package engine

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// pathLog is Events that also records path events.
type pathLog struct {
	recorder
	events []PathEvent
}

func (l *pathLog) PathChanged(_ *Conn, ev PathEvent) { l.events = append(l.events, ev) }

func (l *pathLog) of(path int) string {
	var s []string
	for _, ev := range l.events {
		if ev.Path == path {
			if ev.Repath {
				s = append(s, "repath")
			} else {
				s = append(s, ev.To.String())
			}
		}
	}
	return strings.Join(s, " ")
}

// TestPlaneFailureIsSurvived fails a plane mid-transfer and brings it back.
// The application sees path events but no error, and the transfer completes
// byte for byte. The plane's paths go DOWN, are probed back, and carry data
// again.
func TestPlaneFailureIsSurvived(t *testing.T) {
	skipUnderRace(t)
	for _, kind := range []netem.FaultKind{netem.PlaneDown, netem.PlaneBlackhole} {
		t.Run(fmt.Sprint(kind), func(t *testing.T) {
			fc := fourPlanes()
			fc.Faults = []netem.Fault{{At: 100 * time.Microsecond, Kind: kind, Plane: 1},
				{At: time.Millisecond, Kind: netem.Repair, Plane: 1}}
			n := newNet(t, fc, Config{Paths: 8, MPL: time.Millisecond})
			log := &pathLog{}
			pr := n.connect(0, 1)
			pr.a.events = log
			const size = 128 << 20 // about 4 ms, so the fault and the repair happen mid-transfer
			src := pr.ha.region(t, size, 5, memreg.LocalWrite)
			dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
			pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
			if !n.run(time.Second, func() bool { return len(log.done) == 1 || pr.a.State() == Closed }) {
				t.Fatal("not complete")
			}
			if pr.a.State() != Established || log.done[0].Status != StatusOK {
				t.Fatalf("the application noticed: %v %+v", pr.a.Err(), log.done)
			}
			if digest(src.Bytes()) != digest(dst.Bytes()) {
				t.Fatal("data differs")
			}
			for _, path := range []int{1, 5} { // the paths on plane 1
				got := log.of(path)
				want := "DOWN ASSUMED_BAD GOOD"
				if kind == netem.PlaneBlackhole {
					want = "ASSUMED_BAD" // then it repaths, and is GOOD once repaired
				}
				if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "GOOD") {
					t.Errorf("path %d events %q, want %q ... GOOD", path, got, want)
				}
				if tel := pr.a.Telemetry()[path]; tel.State != pathmgr.Good {
					t.Errorf("path %d ended %v", path, tel.State)
				}
			}
			for _, path := range []int{0, 2, 3, 4, 6, 7} {
				if got := log.of(path); got != "" {
					t.Errorf("path %d on a healthy plane had events %q", path, got)
				}
			}
			if moves := pr.a.SenderStats().PlaneMoves; moves != 0 {
				t.Errorf("%d paths moved to another plane, with paths in service on three", moves)
			}
			t.Logf("%v: %v of virtual time; %+v", kind, n.sim.Now(), pr.a.SenderStats())
		})
	}
}

// TestFewerPathsThanPlanesSurvivePlaneFailure fails, mid-transfer, every
// plane a connection with fewer paths than planes has its paths on: one
// path on four planes, and two. Its paths move to the planes left (spec
// section 6.3), where a plane's failure would otherwise end the transfer
// however well the others work; the application sees no error and the
// data arrives intact. A blackhole costs at most 600 µs more than a plane
// the host sees down: the planes are probed from the first probe of the
// stranded paths that goes unanswered.
func TestFewerPathsThanPlanesSurvivePlaneFailure(t *testing.T) {
	downAt := map[int]time.Duration{} // paths: when the transfer over planes seen down completed
	for _, kind := range []netem.FaultKind{netem.PlaneDown, netem.PlaneBlackhole} {
		for _, paths := range []int{1, 2} {
			fc := fourPlanes()
			for plane := range paths {
				fc.Faults = append(fc.Faults, netem.Fault{At: 100 * time.Microsecond, Kind: kind, Plane: plane})
			}
			n := newNet(t, fc, Config{Paths: paths, MPL: time.Millisecond})
			pr := n.connect(0, 1)
			for _, p := range pr.a.snd.paths {
				if p.Plane() >= paths {
					t.Fatalf("path %d on plane %d: the test fails planes 0 to %d", p.ID(), p.Plane(), paths-1)
				}
			}
			const size = 16 << 20
			src := pr.ha.region(t, size, 5, memreg.LocalWrite)
			dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
			pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
			if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 || pr.a.State() == Closed }) {
				t.Fatalf("%v, %d paths: not complete", kind, paths)
			}
			if pr.a.State() != Established || pr.ra.done[0].Status != StatusOK || digest(src.Bytes()) != digest(dst.Bytes()) {
				t.Fatalf("%v, %d paths: connection %v (%v), completion %+v", kind, paths, pr.a.State(), pr.a.Err(), pr.ra.done)
			}
			for _, p := range pr.a.snd.paths {
				if p.Plane() < paths || p.State() != pathmgr.Good {
					t.Errorf("%v, %d paths: path %d ended %v on plane %d", kind, paths, p.ID(), p.State(), p.Plane())
				}
			}
			if moves := pr.a.SenderStats().PlaneMoves; moves < uint64(paths) {
				t.Errorf("%v, %d paths: %d moves", kind, paths, moves)
			}
			took := time.Duration(n.sim.Now())
			if kind == netem.PlaneDown {
				downAt[paths] = took
			} else if took > downAt[paths]+600*time.Microsecond {
				t.Errorf("%v, %d paths: complete at %v, %v after the plane seen down", kind, paths, took, took-downAt[paths])
			}
			t.Logf("%v, %d paths: complete at %v, %d moves", kind, paths, n.sim.Now(), pr.a.SenderStats().PlaneMoves)
		}
	}
}

// TestPathLeavesAFailedPlaneWhileOthersCarry fails, for good, one of the
// two planes a connection of two paths on four planes has its paths on.
// The path on it moves to a plane the connection has no path on, once a
// probe shows that plane works (spec section 6.3), while the other path
// carries on where it is. So the transfer keeps two planes' rate: with the
// plane seen down it ends within a tenth of the time it takes with no
// fault, where one plane alone would take about twice as long. A blackhole
// costs at most 600 µs more: a path alone on its plane cannot tell a
// failed plane from loss until soloProbes of its probes go unanswered.
func TestPathLeavesAFailedPlaneWhileOthersCarry(t *testing.T) {
	skipUnderRace(t)
	const size = 32 << 20
	transfer := func(faults []netem.Fault) (time.Duration, *pair) {
		n, pr, src, dst := writeOverFourPlanes(t, faults, Config{Paths: 2, MPL: time.Millisecond}, size)
		began := n.sim.Now() // the connection is set up when the WRITE is posted
		if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 || pr.a.State() == Closed }) {
			t.Fatal("not complete")
		}
		if pr.a.State() != Established || pr.ra.done[0].Status != StatusOK || digest(src.Bytes()) != digest(dst.Bytes()) {
			t.Fatalf("connection %v (%v), completion %+v", pr.a.State(), pr.a.Err(), pr.ra.done)
		}
		return n.sim.Now().Sub(began), pr
	}
	clean, _ := transfer(nil)
	var down time.Duration
	for _, kind := range []netem.FaultKind{netem.PlaneDown, netem.PlaneBlackhole} {
		took, pr := transfer([]netem.Fault{{At: 100 * time.Microsecond, Kind: kind, Plane: 0}})
		planes := map[int]int{}
		for _, p := range pr.a.snd.paths {
			planes[p.Plane()]++
			if p.State() != pathmgr.Good {
				t.Errorf("%v: path %d ended %v", kind, p.ID(), p.State())
			}
		}
		if moves := pr.a.SenderStats().PlaneMoves; moves != 1 || planes[0] != 0 || planes[1] != 1 {
			t.Errorf("%v: %d moves, paths by plane %v: want the path on plane 0 moved, the one on plane 1 left", kind, moves, planes)
		}
		if kind == netem.PlaneDown {
			down = took
			if took > clean*11/10 {
				t.Errorf("%v: %v, against %v with no fault", kind, took, clean)
			}
		} else if took > down+600*time.Microsecond {
			t.Errorf("%v: %v, against %v with the plane seen down", kind, took, down)
		}
		t.Logf("%v: %v, against %v with no fault; %d moves", kind, took, clean, pr.a.SenderStats().PlaneMoves)
	}
}

// TestPathReturnsToItsRepairedPlane fails, then repairs, the plane one of
// a two-path connection's paths is on, of four. The path moves off it, and
// once the plane works again and an MPL has passed since the move (spec
// section 6.3) it goes back: a plane repaired would otherwise stay without
// the paths that left it for their connections' lives. It drains before
// it moves, so nothing it sent on the other plane goes unrecorded, and the
// transfer completes intact.
func TestPathReturnsToItsRepairedPlane(t *testing.T) {
	skipUnderRace(t)
	for _, kind := range []netem.FaultKind{netem.PlaneDown, netem.PlaneBlackhole} {
		t.Run(fmt.Sprint(kind), func(t *testing.T) {
			n, pr, src, dst := writeOverFourPlanes(t, []netem.Fault{{At: 100 * time.Microsecond, Kind: kind, Plane: 0},
				{At: 2 * time.Millisecond, Kind: netem.Repair, Plane: 0}}, Config{Paths: 2, MPL: time.Millisecond}, 160<<20)
			log := &pathLog{}
			pr.a.events = log
			drained := false // path 0 was seen returning with packets in flight, taking none
			if !n.run(time.Second, func() bool {
				if p := pr.a.snd.paths; p != nil && p[0].returning && p[0].inflight > 0 {
					drained = true
					if pr.a.snd.usable(p[0], true) {
						t.Fatal("a draining path takes data")
					}
				}
				return len(log.done) == 1 || pr.a.State() == Closed
			}) {
				t.Fatal("not complete")
			}
			if pr.a.State() != Established || log.done[0].Status != StatusOK || digest(src.Bytes()) != digest(dst.Bytes()) {
				t.Fatalf("connection %v (%v), completion %+v", pr.a.State(), pr.a.Err(), log.done)
			}
			var moves []PathEvent // path 0's moves to another plane
			plane := 0
			for _, ev := range log.events {
				if ev.Path == 0 && ev.Repath && ev.Plane != plane {
					moves, plane = append(moves, ev), ev.Plane
				}
			}
			p := pr.a.snd.paths[0]
			if len(moves) != 2 || moves[1].Plane != 0 || p.Plane() != 0 || p.State() != pathmgr.Good || pr.a.snd.returning != 0 || !drained {
				t.Fatalf("path 0 moved %+v, ended on plane %d, %v, drained %v: want it away from plane 0 and back, drained first", moves, p.Plane(), p.State(), drained)
			}
			// Back once the plane works and an MPL has passed since the move.
			if back := time.Duration(moves[1].At); back < 2*time.Millisecond || back < time.Duration(moves[0].At)+time.Millisecond {
				t.Errorf("back at %v: repaired at 2ms, moved away at %v, MPL 1ms", back, time.Duration(moves[0].At))
			}
			if q := pr.a.snd.paths[1]; q.Plane() != 1 || q.Counters.Repaths != 0 {
				t.Errorf("path 1 ended on plane %d after %d repaths: its plane never failed", q.Plane(), q.Counters.Repaths)
			}
			t.Logf("%v: path 0 moved to plane %d at %v, back at %v; %+v", kind, moves[0].Plane, time.Duration(moves[0].At), time.Duration(moves[1].At), pr.a.SenderStats())
		})
	}
}

// TestReturnGivenUpWhenTheHomeFailsAgain repairs a plane and fails it
// again moments later, while the path that left it may be on its way
// back. The path never lands on the plane the host sees down: it stays
// where it is, carrying data, and the transfer completes with no
// retransmission timeout.
func TestReturnGivenUpWhenTheHomeFailsAgain(t *testing.T) {
	skipUnderRace(t)
	for _, again := range []time.Duration{2 * time.Microsecond, 10 * time.Microsecond, 30 * time.Microsecond} {
		n, pr, src, dst := writeOverFourPlanes(t, []netem.Fault{{At: 100 * time.Microsecond, Kind: netem.PlaneDown, Plane: 0},
			{At: 2 * time.Millisecond, Kind: netem.Repair, Plane: 0},
			{At: 2*time.Millisecond + again, Kind: netem.PlaneDown, Plane: 0}}, Config{Paths: 2, MPL: time.Millisecond}, 128<<20)
		onDown := false
		if !n.run(time.Second, func() bool {
			for _, p := range pr.a.snd.paths {
				onDown = onDown || p.Plane() == 0 && pr.a.ep.down[0] && p.InUse()
			}
			return len(pr.ra.done) == 1 || pr.a.State() == Closed
		}) {
			t.Fatal("not complete")
		}
		if pr.a.State() != Established || pr.ra.done[0].Status != StatusOK || digest(src.Bytes()) != digest(dst.Bytes()) {
			t.Fatalf("down again after %v: connection %v (%v), completion %+v", again, pr.a.State(), pr.a.Err(), pr.ra.done)
		}
		p := pr.a.snd.paths[0]
		st := pr.a.SenderStats()
		if onDown || p.Plane() == 0 || p.State() != pathmgr.Good || pr.a.snd.returning != 0 || p.returning || st.Timeouts != 0 {
			t.Errorf("down again after %v: a path in use on the downed plane %v; path 0 ended on plane %d, %v, returning %v; %d timeouts",
				again, onDown, p.Plane(), p.State(), p.returning, st.Timeouts)
		}
		t.Logf("down again after %v: %v; %+v", again, n.sim.Now(), st)
	}
}

// TestStuckPathTriesANewPortWhenNoPlaneAnswers blackholes the two planes
// a two-path connection has no path on, then the plane of path 0. The path
// first probes those planes for a plane to move to; they go unanswered,
// so after two rounds it tries new source ports of its own plane as well,
// as a route failure would need, rather than wait for planes that never
// answer.
func TestStuckPathTriesANewPortWhenNoPlaneAnswers(t *testing.T) {
	skipUnderRace(t)
	n, pr, _, _ := writeOverFourPlanes(t, []netem.Fault{{At: 10 * time.Microsecond, Kind: netem.PlaneBlackhole, Plane: 2},
		{At: 10 * time.Microsecond, Kind: netem.PlaneBlackhole, Plane: 3},
		{At: 100 * time.Microsecond, Kind: netem.PlaneBlackhole, Plane: 0}}, Config{Paths: 2, MPL: time.Millisecond}, 256<<20)
	var planeProbes int // plane probes (PathID 0) host 0 sent on planes 2 and 3
	n.fab.AddTap(func(e *netem.TapEvent) {
		d := e.Datagram
		if e.Link.Kind() != netem.Uplink || e.Link.Plane() < 2 || e.Verdict != netem.Sent && e.Verdict != netem.Dropped || len(d.Data) < 2 || proto.Type(d.Data[1]) != proto.TypeProbe {
			return
		}
		var pkt proto.Packet
		if pkt.DecodeNoCRC(d.Data) == nil && pkt.Common.PathID() == 0 && pkt.Probe().ProbeID()&planeProbeBits == planeProbeBits &&
			d.Src.Addr() == n.hosts[0].ep.cfg.Planes[e.Link.Plane()] {
			planeProbes++
		}
	})
	n.run(10*time.Millisecond, func() bool { return pr.a.State() == Closed })
	p := pr.a.snd.paths[0]
	if planeProbes == 0 || p.Counters.Repaths == 0 || p.Plane() != 0 || pr.a.State() != Established {
		t.Fatalf("%d plane probes; path 0 on plane %d after %d repaths, %d timeouts; connection %v",
			planeProbes, p.Plane(), p.Counters.Repaths, p.timeouts, pr.a.State())
	}
	t.Logf("%d plane probes, path 0: %d repaths, %+v", planeProbes, p.Counters.Repaths, pr.a.SenderStats())
}

// TestBlackholedPlaneProbedAtMostBadProbeMaxApart checks that a blackholed
// plane's paths are probed at most BadProbeMax apart however long the
// outage lasts, rather than at a timeout that doubles without end. Once the
// plane is repaired, its paths carry data again within BadProbeMax and a
// round trip.
func TestBlackholedPlaneProbedAtMostBadProbeMaxApart(t *testing.T) {
	skipUnderRace(t)
	fc := fourPlanes()
	const repairAt = 2 * time.Millisecond
	fc.Faults = []netem.Fault{{At: 50 * time.Microsecond, Kind: netem.PlaneBlackhole, Plane: 1},
		{At: repairAt, Kind: netem.Repair, Plane: 1}}
	n := newNet(t, fc, Config{Paths: 8})
	probes := map[int][]time.Duration{} // when each probe left, by path
	n.fab.AddTap(func(e *netem.TapEvent) {
		d := e.Datagram
		if e.Link.Kind() == netem.Uplink && (e.Verdict == netem.Sent || e.Verdict == netem.Dropped) && len(d.Data) > 1 && proto.Type(d.Data[1]) == proto.TypeProbe {
			var pkt proto.Packet
			if pkt.DecodeNoCRC(d.Data) == nil {
				path := int(pkt.Common.PathID())
				probes[path] = append(probes[path], time.Duration(e.At))
			}
		}
	})
	log := &pathLog{}
	pr := n.connect(0, 1)
	pr.a.events = log
	const size = 256 << 20 // about 6 ms
	src := pr.ha.region(t, size, 5, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
	if !n.run(time.Second, func() bool { return len(log.done) == 1 || pr.a.State() == Closed }) || log.done[0].Status != StatusOK {
		t.Fatalf("not complete: %v %+v", pr.a.Err(), log.done)
	}
	limit := pr.a.ep.cfg.BadProbeMax
	for _, path := range []int{1, 5} { // the paths on plane 1
		times := probes[path]
		if len(times) < 5 {
			t.Fatalf("path %d: %d probes in a 2 ms outage", path, len(times))
		}
		for i := 1; i < len(times); i++ {
			if gap := times[i] - times[i-1]; times[i] < repairAt && gap > limit+time.Microsecond {
				t.Errorf("path %d: probes %v apart (%v, then %v), more than BadProbeMax %v", path, gap, times[i-1], times[i], limit)
			}
		}
		var back time.Duration
		for _, ev := range log.events {
			if ev.Path == path && ev.To == pathmgr.Good && time.Duration(ev.At) > repairAt {
				back = time.Duration(ev.At)
				break
			}
		}
		if back == 0 || back > repairAt+limit+20*time.Microsecond {
			t.Errorf("path %d GOOD again at %v: the plane was repaired at %v", path, back, repairAt)
		}
		t.Logf("path %d: %d probes, GOOD again %v after the repair", path, len(times), back-repairAt)
	}
}

// oneLocalAddress stands between a host of a fabric and its endpoint, which
// has every plane on plane 0's address, as loopback planes do when the
// system picks 127.0.0.1 for each. What the endpoint sends leaves on the
// plane of its destination, and everything arrives addressed to the one
// local address.
type oneLocalAddress struct {
	link.Port
	ep    link.Receiver
	host  int
	local netip.Addr
}

func (o *oneLocalAddress) Send(batch []link.Datagram) {
	for i := range batch {
		plane := int(batch[i].Dst.Addr().As4()[1]) // netem.Addr's plane byte
		batch[i].Src = netip.AddrPortFrom(netem.Addr(plane, o.host), batch[i].Src.Port())
	}
	o.Port.Send(batch)
}

func (o *oneLocalAddress) Receive(d *link.Datagram, at clock.Time) {
	d.Dst = netip.AddrPortFrom(o.local, d.Dst.Port())
	o.ep.Receive(d, at)
}

// Planes that share a local address are told apart by the peer's address
// on each, at the side that connects and at the side that accepts. Every
// packet the peer sends on plane 1, data, ACKs, NACKs and probe replies,
// reaches the connection as plane 1's: none is dropped as from a wrong
// source, every path is sampled, and none times out.
func TestPlanesSharingALocalAddress(t *testing.T) {
	for _, side := range []int{0, 1} {
		t.Run(fmt.Sprint("host ", side), func(t *testing.T) { sharedLocalAddress(t, side) })
	}
}

func sharedLocalAddress(t *testing.T, side int) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 4, Streams: 1})
	local := netem.Addr(0, side)
	wrap := &oneLocalAddress{Port: n.fab.Host(side), host: side, local: local}
	ep, err := NewEndpoint(Config{Planes: []netip.Addr{local, local}, Paths: 4, Streams: 1, Random: seeded(7)}, n.sim, wrap)
	if err != nil {
		t.Fatal(err)
	}
	wrap.ep = ep
	n.fab.Host(side).Attach(wrap)
	n.hosts[side].ep = ep
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 4<<20)
	if w := ep.Stats().WrongSource; w != 0 {
		t.Errorf("%d packets of the peer dropped as from a wrong source", w)
	}
	if got := pr.b.ReceiverStats().Packets; got == 0 {
		t.Error("nothing was placed")
	}
	for _, p := range pr.a.Telemetry() {
		if p.RTT.Samples == 0 || p.Timeouts != 0 || p.PacketsSent == 0 {
			t.Errorf("path %d on plane %d: %d RTT samples, %d timeouts, %d packets", p.Path, p.Plane, p.RTT.Samples, p.Timeouts, p.PacketsSent)
		}
	}
}

// An endpoint deals its connections' paths to the planes in turn. Four
// connections of one path each on four planes take a plane each, and
// carry their data there; connections of three paths continue where the
// last left off; and where the planes divide a connection's paths, path i
// is on plane i.
func TestPathsAreDealtToThePlanes(t *testing.T) {
	planesOf := func(c *Conn) []int {
		var out []int
		for _, p := range c.Telemetry() {
			out = append(out, p.Plane)
		}
		return out
	}
	n := newNet(t, twoHostFabric(4), Config{Paths: 1})
	var data [4]int // data packets host 0 sent, by plane
	n.fab.AddTap(func(e *netem.TapEvent) {
		if d := e.Datagram; e.Verdict == netem.Sent && e.Link.Kind() == netem.Uplink && e.Link.From() == 0 &&
			len(d.Data) > 1 && proto.Type(d.Data[1]).IsData() {
			data[e.Link.Plane()]++
		}
	})
	var single []int
	for range 4 {
		pr := n.connect(0, 1)
		n.writeWhole(t, pr, 64<<10)
		single = append(single, planesOf(pr.a)...)
		for plane, sent := range data {
			if want := plane < len(single); (sent > 0) != want {
				t.Errorf("after %d connections, plane %d carried %d data packets", len(single), plane, sent)
			}
		}
	}
	if fmt.Sprint(single) != "[0 1 2 3]" {
		t.Errorf("one-path connections on planes %v, want one each", single)
	}
	n = newNet(t, twoHostFabric(4), Config{Paths: 3})
	var three [][]int
	for range 2 {
		pr := n.connect(0, 1)
		n.writeWhole(t, pr, 64<<10)
		three = append(three, planesOf(pr.a))
	}
	if fmt.Sprint(three) != "[[0 1 2] [3 0 1]]" {
		t.Errorf("three-path connections on planes %v", three)
	}
	n = newNet(t, twoHostFabric(4), Config{Paths: 8})
	for range 2 {
		pr := n.connect(0, 1)
		n.writeWhole(t, pr, 64<<10)
		if got := planesOf(pr.a); fmt.Sprint(got) != "[0 1 2 3 0 1 2 3]" {
			t.Errorf("eight paths on planes %v", got)
		}
	}
}

// An initiator deals its paths only to the planes it was given the peer's
// address on: with the peer known on plane 0 of 2, every one-path
// connection's path is on plane 0, and each WRITE completes.
func TestPathsAreDealtToKnownPlanesOnly(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 1})
	for range 3 {
		pr := &pair{ra: &recorder{}, rb: &recorder{}, ha: n.hosts[0], hb: n.hosts[1]}
		n.hosts[1].ep.Listen(n.hosts[1].pd, func(c *Conn) (Events, bool) {
			pr.accepted = c
			return pr.rb, true
		})
		c, err := n.hosts[0].ep.Connect([]netip.Addr{netem.Addr(0, 1)}, proto.DefaultPort, n.hosts[0].pd, pr.ra)
		if err != nil {
			t.Fatal(err)
		}
		pr.a = c
		n.run(time.Millisecond, func() bool { return c.State() == Established && pr.accepted != nil })
		pr.b = pr.accepted
		n.writeWhole(t, pr, 64<<10)
		if planes := c.Telemetry(); planes[0].Plane != 0 {
			t.Fatalf("path on plane %d, where the peer has no address", planes[0].Plane)
		}
	}
}

// TestPlaneProbesRetriedUntilAPathMayMove checks a stranded connection
// whose path moved to a new port just before its plane went down: a path
// moves at most as often as the MPL allows (spec section 6.3), and a path
// DOWN with its plane has no timer of its own, so the plane probes go
// again, BadProbeMax apart, until the path may move. The default MPL of
// 100 ms applies.
func TestPlaneProbesRetriedUntilAPathMayMove(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 1})
	pr := n.connect(0, 1)
	src, dst := n.writeWhole(t, pr, 1<<20)
	_, _ = src, dst
	p := pr.a.snd.paths[0]
	if !p.repath(n.sim.Now()) {
		t.Fatal("the path did not repath")
	}
	n.hosts[0].ep.SetPlaneUp(p.Plane(), false)
	pr.ra.done = nil
	src, dst = n.writeWhole(t, pr, 1<<20)
	if digest(src.Bytes()) != digest(dst.Bytes()) || pr.a.SenderStats().PlaneMoves != 1 {
		t.Fatalf("data equal %v, %d plane moves", digest(src.Bytes()) == digest(dst.Bytes()), pr.a.SenderStats().PlaneMoves)
	}
}

// TestBaselineKeepsItsPlane checks that a baseline connection, one route
// with a fixed port and epoch 0 (spec section 10), does not move when its
// plane goes down.
func TestBaselineKeepsItsPlane(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 1, Mode: proto.ModeBaseline})
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 1<<20)
	p := pr.a.snd.paths[0]
	plane, port := p.Plane(), p.Port()
	n.hosts[0].ep.SetPlaneUp(plane, false)
	n.run(10*time.Millisecond, func() bool { return false })
	if p.Plane() != plane || p.Port() != port || p.Epoch() != 0 || pr.a.SenderStats().PlaneMoves != 0 {
		t.Fatalf("the baseline path went from plane %d port %d to plane %d port %d epoch %d", plane, port, p.Plane(), p.Port(), p.Epoch())
	}
}

// writeOverFourPlanes connects two hosts over four planes with faults, and
// posts one WRITE of size bytes from a region of host 0 to one of host 1.
func writeOverFourPlanes(t *testing.T, faults []netem.Fault, cfg Config, size int) (n *testNet, pr *pair, src, dst *memreg.Region) {
	t.Helper()
	fc := fourPlanes()
	fc.Faults = faults
	n = newNet(t, fc, cfg)
	pr = n.connect(0, 1)
	src = pr.ha.region(t, size, 5, memreg.LocalWrite)
	dst = pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, uint32(size)}, RKey: dst.Key()})
	return n, pr, src, dst
}

// TestConnectsWithPlaneZeroDown opens a connection while its first plane
// is down or drops everything. A plane the host sees down is passed over
// at once. One that drops everything takes the first CONNECT; the resend
// goes on the next plane, its ACCEPT comes back there, and the connection
// opens one resend interval late. Either way it carries a WRITE over the
// other planes (spec section 8.1). A handshake held to the first plane
// never opened. In the authenticated mode too, where the acceptor learns
// the initiator's address on plane 1 from its protected answer to the
// ACCEPT, not from the CONNECT.
func TestConnectsWithPlaneZeroDown(t *testing.T) {
	for _, authed := range []bool{false, true} {
		for _, kind := range []netem.FaultKind{netem.PlaneDown, netem.PlaneBlackhole} {
			t.Run(fmt.Sprint(kind, " authenticated ", authed), func(t *testing.T) {
				connectWithPlaneZeroDown(t, kind, authed)
			})
		}
	}
}

// connectWithPlaneZeroDown is one case of TestConnectsWithPlaneZeroDown:
// plane 0 failed as kind from the start, in the authenticated mode or not.
func connectWithPlaneZeroDown(t *testing.T, kind netem.FaultKind, authed bool) {
	fc := fourPlanes()
	fc.Faults = []netem.Fault{{At: 0, Kind: kind, Plane: 0}}
	cfg := Config{Paths: 8, ConnectTimeout: time.Second}
	var n *testNet
	if authed {
		ic, ac := credentialPair(t, auth.MethodPSK, 0)
		n = authNet(t, fc, cfg, ic, ac)
	} else {
		n = newNet(t, fc, cfg)
	}
	n.sim.RunFor(time.Microsecond) // the hosts hear of the fault
	pr := n.connect(0, 1)
	// A plane the host sees down is not tried; one that drops everything
	// costs one resend interval.
	wait := handshakeRetry
	if kind == netem.PlaneDown {
		wait = 0
	}
	if at := time.Duration(n.sim.Now()); at < wait || at > wait+time.Millisecond {
		t.Errorf("established at %v, want %v after the first CONNECT and a round trip", at, wait)
	}
	if pr.b.RemoteAddr(1) != netem.Addr(1, 0) {
		t.Errorf("the acceptor knows the initiator on plane 1 as %v, want %v", pr.b.RemoteAddr(1), netem.Addr(1, 0))
	}
	src, dst := n.writeWhole(t, pr, 1<<20)
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("data differs")
	}
}

// TestConnectResentOnAnotherPlaneIsOneAttempt loses the acceptor's first
// ACCEPT. The CONNECT's resend goes on the next plane, from another
// address, and the acceptor knows it by its id and initial sequence
// numbers: it answers with the same ACCEPT, on that plane, and opens no
// second connection (spec section 8.1).
func TestConnectResentOnAnotherPlaneIsOneAttempt(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 8})
	n.hosts[1].ep.port = &dropPort{Port: n.fab.Host(1), match: func(p *proto.Packet) bool { return p.Type() == proto.TypeAccept }, limit: 1}
	accepts := n.capture(1)
	connects := n.capture(0)
	pr := n.connect(0, 1)
	cs, as := connects.of(proto.TypeConnect), accepts.of(proto.TypeAccept)
	if len(cs) != 2 || cs[0].dst.Addr() != netem.Addr(0, 1) || cs[1].dst.Addr() != netem.Addr(1, 1) {
		var to []netip.Addr
		for _, c := range cs {
			to = append(to, c.dst.Addr())
		}
		t.Fatalf("CONNECTs to %v, want 2: the first to plane 0 (%v), the resend to plane 1 (%v)", to, netem.Addr(0, 1), netem.Addr(1, 1))
	}
	if len(as) != 2 || as[1].dst.Addr() != netem.Addr(1, 0) || as[0].pkt.Handshake().SrcConnID() != as[1].pkt.Handshake().SrcConnID() {
		t.Fatalf("%d ACCEPTs, want the same two, the second to the initiator's plane 1", len(as))
	}
	if got := len(n.hosts[1].ep.conns); got != 1 || n.hosts[1].ep.accepting != 0 || pr.b.ID() != as[1].pkt.Handshake().SrcConnID() {
		t.Fatalf("the acceptor has %d connections, %d half-open; want one, established", got, n.hosts[1].ep.accepting)
	}
	src, dst := n.writeWhole(t, pr, 1<<20)
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("data differs")
	}
}

// TestSharedLocalAddressAcceptLost loses the first ACCEPT of an acceptor
// whose four planes share one local address, as on loopback. Every packet
// then seems to arrive on its first plane, the resent CONNECT on plane 1
// too, from the initiator's plane-1 address: it is answered there, and
// the connection opens one resend interval late, with nothing dropped as
// from a wrong source.
func TestSharedLocalAddressAcceptLost(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 4, Streams: 1})
	local := netem.Addr(0, 1)
	wrap := &oneLocalAddress{Port: n.fab.Host(1), host: 1, local: local}
	ep, err := NewEndpoint(Config{Planes: []netip.Addr{local, local, local, local}, Paths: 4, Streams: 1, Random: seeded(7)}, n.sim, wrap)
	if err != nil {
		t.Fatal(err)
	}
	wrap.ep = ep
	n.fab.Host(1).Attach(wrap)
	n.hosts[1].ep = ep
	ep.port = &dropPort{Port: wrap, match: func(p *proto.Packet) bool { return p.Type() == proto.TypeAccept }, limit: 1}
	pr := n.connect(0, 1)
	if at := time.Duration(n.sim.Now()); at > handshakeRetry+time.Millisecond {
		t.Errorf("established at %v, want one resend interval (%v) after the first CONNECT", at, handshakeRetry)
	}
	n.writeWhole(t, pr, 1<<20)
	if w := ep.Stats().WrongSource; w != 0 {
		t.Errorf("%d packets of the initiator dropped as from a wrong source", w)
	}
}
