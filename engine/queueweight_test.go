package engine

import (
	"math"
	"testing"
	"time"

	"github.com/mroce/mroce/netem"
)

// fatTreeAt400 is a three-tier fat tree of k-port switches, one plane of
// 400 Gb/s links of 1 µs whose queues hold 612 KiB and mark on dequeue
// from 125 to 490 KiB: the Ultra Ethernet simulator's reference fabric
// (docs/results.md, "A fat tree at 400 Gb/s").
func fatTreeAt400(seed uint64, k, hosts int) netem.Config {
	l := netem.LinkConfig{Rate: 400e9, Delay: time.Microsecond}
	l.Queue.Limit = 612 << 10
	l.Queue.ECNRamp = &netem.ECNRamp{Min: 125 << 10, Max: 490 << 10}
	return netem.Config{Seed: seed, Hosts: hosts, Planes: 1, FatTreeK: k,
		Uplink: l, Downlink: l, FabricUp: l, FabricDown: l, CoreUp: l, CoreDown: l}
}

// atLineRate400 is a host's configuration on fatTreeAt400: its port's
// payload rate known (PortRates), its receiver granting all of it.
func atLineRate400(paths int) Config {
	const mtu = 4096
	payload := 400e9 / 8 * mtu / float64(writeFrame(mtu))
	return Config{Paths: paths, LineRate: 400e9 / 8, InboundCapacity: payload,
		OutboundCapacity: Headroom * payload, PortRates: []float64{payload}}
}

// TestQueueWeightEndsThePermutationSooner runs the reference permutation on the
// k = 8 fat tree: each of 128 hosts WRITEs 2 MB to the host 64 on, over
// 128 paths. The hash puts more paths on some links than on others, and
// with an equal share a path, the flows that cross the busiest links end
// last, their last packets waiting in those links' queues. With the
// queue weight near the end of what is posted (endInSight, queueWeight),
// their paths that cross idle links take more of the last data, and the
// slowest WRITE ends sooner.
func TestQueueWeightEndsThePermutationSooner(t *testing.T) {
	skipUnderRace(t)
	run := func(off bool) time.Duration {
		queueWeightOff = off
		defer func() { queueWeightOff = false }()
		n := newNet(t, fatTreeAt400(1, 8, 128), atLineRate400(128))
		var pairs []*pair
		for h := range 128 {
			pairs = append(pairs, n.connect(h, (h+64)%128))
		}
		start := n.sim.Now()
		for _, pr := range pairs {
			pr.postWrite(t, 489) // 2 MB
		}
		if !n.runUntilSent(pairs, 10*time.Millisecond) {
			t.Fatalf("queue weight off %v: the WRITEs did not end within 10 ms", off)
		}
		return n.sim.Now().Sub(start)
	}
	weighted := run(false)
	even := run(true)
	t.Logf("the slowest WRITE ended %v after the posts with the queue weight, %v without", weighted, even)
	if weighted >= even {
		t.Errorf("the slowest WRITE ended %v after the posts with the queue weight, %v without: want sooner", weighted, even)
	}
}

// TestQueueWeightKeepsEachRatesShare gives a connection's paths on three
// planes, two of one port rate and one of half that, queues of their own.
// Among the paths on ports of one rate the more queued path weighs more,
// whichever plane it is on, and the inverses of their weights, each times
// its path's share, sum to the shares, so that the ports of that rate keep
// their share of new data; a queue that every path of the class meets
// weighs nothing, and a path alone in its class weighs 1 whatever its
// queue.
func TestQueueWeightKeepsEachRatesShare(t *testing.T) {
	const rate = 12e9 // bytes of payload a second
	n := newNet(t, twoHostFabric(3), Config{Paths: 4, PortRates: []float64{rate, rate, rate / 2}})
	pr := n.connect(0, 1)
	pr.postWrite(t, 1) // the sender makes its paths for its first data
	if !n.runUntilSent([]*pair{pr}, time.Millisecond) {
		t.Fatal("the WRITE did not end")
	}
	s := pr.a.snd
	// A whole round, then the fourth path on a fast plane: two paths on
	// one fast plane (each half its share), one on the other, one slow.
	byPlane := map[int][]*sendPath{}
	for _, p := range s.paths {
		byPlane[p.Plane()] = append(byPlane[p.Plane()], p)
	}
	pair2, lone := byPlane[0], byPlane[1]
	if len(pair2) < len(lone) {
		pair2, lone = lone, pair2
	}
	if len(pair2) != 2 || len(lone) != 1 || len(byPlane[2]) != 1 {
		t.Fatalf("paths on planes 0, 1, 2: %d %d %d: want 2 and 1 (either way) and 1", len(byPlane[0]), len(byPlane[1]), len(byPlane[2]))
	}
	fast := []*sendPath{pair2[0], pair2[1], lone[0]}
	slow := byPlane[2]
	for _, p := range s.paths {
		p.RTT.Min, p.queue, p.queued = 10*time.Microsecond, 0, true
	}
	fast[1].queue = 10 * time.Microsecond // 1 + q / (2 x RTT): 1.5
	fast[2].queue = 40 * time.Microsecond // 3, on the other fast plane
	slow[0].queue = 40 * time.Microsecond
	var inverse, shares float64
	for _, p := range fast {
		share := 1 / s.stride(p.Plane())
		inverse += share / s.queueWeight(p)
		shares += share
	}
	if math.Abs(inverse-shares) > 1e-9*shares {
		t.Errorf("the fast ports' paths: their weights' inverses by share sum to %v of their shares: want all", inverse/shares)
	}
	if w0, w1, w2 := s.queueWeight(fast[0]), s.queueWeight(fast[1]), s.queueWeight(fast[2]); !(w0 < 1 && w0 < w1 && w1 < w2 && w2 > 1) {
		t.Errorf("weights %v, %v and %v for queues of 0, 1 and 4 RTTs: want them rising, across 1", w0, w1, w2)
	}
	if w1, w2 := s.queueWeight(fast[1]), s.queueWeight(fast[2]); math.Abs(w2/w1-3/1.5) > 1e-9 {
		t.Errorf("weights %v and %v for queues of 1 and 4 RTTs on two planes: want them %v apart", w1, w2, 3/1.5)
	}
	if w := s.queueWeight(slow[0]); w != 1 {
		t.Errorf("a path alone on the half-rate plane, with a queue of 4 RTTs, weighs %v: want 1", w)
	}
	fast[2].queue = 100 * time.Microsecond // 1 + 5, held to maxRouteWeight
	if w := fast[2].routeWeight(); w != maxRouteWeight {
		t.Errorf("a queue of 10 RTTs weighs %v: want at most %v", w, maxRouteWeight)
	}
	for _, p := range fast[1:] {
		p.returning = true // out of the spray: fast[0] is alone in its class
	}
	if w := s.queueWeight(fast[0]); w != 1 {
		t.Errorf("path %d, the one of its class in the spray, weighs %v: want 1", fast[0].ID(), w)
	}
	for _, p := range s.paths {
		p.returning = false
		p.queue = 10 * time.Microsecond
	}
	for _, p := range s.paths {
		if w := s.queueWeight(p); math.Abs(w-1) > 1e-9 {
			t.Errorf("path %d: every path queues alike, and it weighs %v: want 1", p.ID(), w)
		}
	}
}

// TestQueueWeightOnlyNearTheEnd checks that the queue weight holds only
// once what is left to send takes less than routeWeightTail least RTTs at
// the delivery rate, and never before a rate or an RTT is known.
func TestQueueWeightOnlyNearTheEnd(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 4})
	pr := n.connect(0, 1)
	pr.postWrite(t, 1)
	if !n.runUntilSent([]*pair{pr}, time.Millisecond) {
		t.Fatal("the WRITE did not end")
	}
	s := pr.a.snd
	for _, p := range s.paths {
		p.RTT.Min = 10 * time.Microsecond
	}
	s.delivery.rate = 1e9 // bytes a second: 10,000 bytes a least RTT
	for _, c := range []struct {
		unsent uint64
		want   bool
	}{{29_000, true}, {31_000, false}, {0, true}} {
		s.unsent = c.unsent
		if got := s.endInSight(); got != c.want {
			t.Errorf("%d bytes left at 10,000 a least RTT: end in sight %v, want %v", c.unsent, got, c.want)
		}
	}
	s.unsent, s.delivery.rate = 1000, 0
	if s.endInSight() {
		t.Error("no delivery rate yet, and the end is in sight: want not")
	}
	s.delivery.rate = 1e9
	for _, p := range s.paths {
		p.RTT.Samples = 0
	}
	if s.endInSight() {
		t.Error("no RTT sample yet, and the end is in sight: want not")
	}
}
