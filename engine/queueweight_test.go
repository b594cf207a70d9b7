package engine

import (
	"math"
	"testing"
	"time"

	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
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
func atLineRate400(t *testing.T, paths int) Config {
	header, err := proto.HeaderLen(proto.TypeWrite, 0)
	if err != nil {
		t.Fatal(err)
	}
	const mtu = 4096
	frame := mtu + header + proto.TrailerLen + netem.DefaultOverhead
	payload := 400e9 / 8 * mtu / float64(frame)
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
		n := newNet(t, fatTreeAt400(1, 8, 128), atLineRate400(t, 128))
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

// TestQueueWeightKeepsEachPlanesShare gives a connection's paths on two
// planes queues of their own. On each plane the more queued path weighs
// more, and the inverses of a plane's weights sum to its number of paths,
// so that the plane's share of new data stays its port's; the queue that
// every path of a plane meets weighs nothing, and a path alone on its
// plane weighs 1 whatever its queue.
func TestQueueWeightKeepsEachPlanesShare(t *testing.T) {
	n := newNet(t, twoHostFabric(3), Config{Paths: 5})
	pr := n.connect(0, 1)
	pr.postWrite(t, 1) // the sender makes its paths for its first data
	if !n.runUntilSent([]*pair{pr}, time.Millisecond) {
		t.Fatal("the WRITE did not end")
	}
	s := pr.a.snd
	queues := []time.Duration{0, 4 * time.Microsecond, 10 * time.Microsecond, 10 * time.Microsecond, 40 * time.Microsecond}
	inverse := map[int]float64{}
	on := map[int]int{}
	for i, p := range s.paths {
		p.RTT.Min, p.queue, p.queued = 10*time.Microsecond, queues[i], true
		on[p.Plane()]++
	}
	// Paths 0 and 3 share plane 0, 1 and 4 plane 1, and 2 is alone on plane 2.
	if s.paths[0].Plane() != s.paths[3].Plane() || s.paths[1].Plane() != s.paths[4].Plane() || on[s.paths[2].Plane()] != 1 {
		t.Fatalf("planes %d %d %d %d %d: want paths dealt in turn over three planes",
			s.paths[0].Plane(), s.paths[1].Plane(), s.paths[2].Plane(), s.paths[3].Plane(), s.paths[4].Plane())
	}
	for _, p := range s.paths {
		inverse[p.Plane()] += 1 / s.queueWeight(p)
	}
	for plane, sum := range inverse {
		if math.Abs(sum-float64(on[plane])) > 1e-9 {
			t.Errorf("plane %d: the inverses of its %d paths' weights sum to %v", plane, on[plane], sum)
		}
	}
	if w0, w3 := s.queueWeight(s.paths[0]), s.queueWeight(s.paths[3]); !(w0 < 1 && w3 > 1) {
		t.Errorf("plane 0: weights %v with no queue and %v with a queue of an RTT: want below and above 1", w0, w3)
	}
	// 1 + q / (2 x RTT): 1.2 and 3.
	if w1, w4 := s.queueWeight(s.paths[1]), s.queueWeight(s.paths[4]); math.Abs(w4/w1-3/1.2) > 1e-9 {
		t.Errorf("plane 1: weights %v and %v for queues of 0.4 and 4 RTTs: want them %v apart", w1, w4, 3/1.2)
	}
	if w := s.queueWeight(s.paths[2]); w != 1 {
		t.Errorf("a path alone on its plane, with a queue of an RTT, weighs %v: want 1", w)
	}
	s.paths[4].queue = 100 * time.Microsecond // 1 + 5, held to maxRouteWeight
	if w := s.paths[4].routeWeight(); w != maxRouteWeight {
		t.Errorf("a queue of 10 RTTs weighs %v: want at most %v", w, maxRouteWeight)
	}
	s.paths[3].returning = true // out of the spray: plane 0 has path 0 alone
	if w := s.queueWeight(s.paths[0]); w != 1 {
		t.Errorf("path 0, the one of its plane in the spray, weighs %v: want 1", w)
	}
	s.paths[3].returning = false
	for _, p := range s.paths {
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
