package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
)

// writeOneLongPlane WRITEs size bytes over cfg.Paths paths (default 1) of
// four planes, the planes in long (-1: all) with links of delay, where the
// others' are 1 µs, and returns how long the WRITE took and the
// connection.
func writeOneLongPlane(t *testing.T, long int, delay time.Duration, cfg Config, size int) (time.Duration, *pair) {
	t.Helper()
	fc := fourPlanes()
	if long != noPlane {
		l := link100()
		l.Delay = delay
		fc.Overrides = []netem.Override{{Plane: long, Match: netem.LinkMatch{Kind: netem.AnyKind, Host: -1, Leaf: -1, Spine: -1}, Link: l}}
	}
	cfg.Paths = max(cfg.Paths, 1)
	if cfg.InboundCapacity == 0 {
		cfg.InboundCapacity = Headroom * 4 * portPayload // the receiver's four ports, as a socket host sets it
	}
	n := newNet(t, fc, cfg)
	pr := n.connect(0, 1)
	src := pr.ha.region(t, size, 5, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	began := n.sim.Now()
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, uint32(size)}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK ||
		digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatalf("the WRITE: %+v", pr.ra.done)
	}
	return n.sim.Now().Sub(began), pr
}

// noPlane is writeOneLongPlane's long for planes of equal links.
const noPlane = -2

// A WRITE on one path of four planes, dealt to plane 0 whose links are ten
// times as long as the others', reaches its window's cap at about half the
// line. It probes the other planes, drains and moves to one whose round
// trip is shorter (spec section 6.3), and ends within an eighth of the time
// it takes over equal planes: about half the time it took on plane 0.
// Nothing is resent. A path that its receiver's hint holds below what the
// long plane carries stays, and so does one whose planes are all as long,
// also where links of 200 ns make a full packet's round trip a third
// longer than a probe's. Of two paths, the one on the long plane moves,
// once it has grown unmarked for 8 of its round trips, and the other
// stays.
func TestPathLeavesALongPlane(t *testing.T) {
	skipUnderRace(t)
	const size = 16 << 20
	equal, _ := writeOneLongPlane(t, noPlane, 0, Config{}, size)
	took, pr := writeOneLongPlane(t, 0, 10*time.Microsecond, Config{}, size)
	st := pr.a.SenderStats()
	p := pr.a.snd.paths[0]
	if st.ShorterMoves != 1 || st.PlaneMoves != 1 || p.Plane() == 0 || p.home != p.Plane() {
		t.Errorf("%d moves to a shorter plane, %d in all, the path on plane %d (home %d): want one move off plane 0",
			st.ShorterMoves, st.PlaneMoves, p.Plane(), p.home)
	}
	if st.Retransmits != 0 || st.Timeouts != 0 {
		t.Errorf("%d resent, %d timeouts: the path drained before it moved", st.Retransmits, st.Timeouts)
	}
	if took > equal*9/8 {
		t.Errorf("the WRITE took %v over a long plane, %v over equal planes", took, equal)
	}
	t.Logf("%v with the long plane, %v with equal planes", took, equal)

	for _, c := range []struct {
		name  string
		long  int
		delay time.Duration
		cfg   Config
	}{
		{"held by the hint", 0, 10 * time.Microsecond, Config{InboundCapacity: portPayload / 4}},
		{"every plane long", -1, 10 * time.Microsecond, Config{}},
		{"every plane short", -1, 200 * time.Nanosecond, Config{}},
	} {
		_, pr := writeOneLongPlane(t, c.long, c.delay, c.cfg, size/4)
		if st := pr.a.SenderStats(); st.PlaneMoves != 0 || pr.a.snd.paths[0].Plane() != 0 {
			t.Errorf("%s: %d moves, the path on plane %d: want it left on plane 0", c.name, st.PlaneMoves, pr.a.snd.paths[0].Plane())
		}
	}

	equal, _ = writeOneLongPlane(t, noPlane, 0, Config{Paths: 2}, 4*size)
	took, pr = writeOneLongPlane(t, 0, 10*time.Microsecond, Config{Paths: 2}, 4*size)
	planes := []int{pr.a.snd.paths[0].Plane(), pr.a.snd.paths[1].Plane()}
	if st := pr.a.SenderStats(); st.ShorterMoves != 1 || st.PlaneMoves != 1 || st.Retransmits != 0 || planes[0] < 2 || planes[1] != 1 {
		t.Errorf("two paths: %d moves to a shorter plane, %d in all, %d resent, the paths on planes %v: want path 0 moved to plane 2 or 3, nothing resent",
			st.ShorterMoves, st.PlaneMoves, st.Retransmits, planes)
	}
	if took > equal*9/8 {
		t.Errorf("two paths: the WRITE took %v over a long plane, %v over equal planes", took, equal)
	}
	t.Logf("two paths: %v with the long plane, %v with equal planes", took, equal)
}
