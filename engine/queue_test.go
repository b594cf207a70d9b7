package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
)

// TestLargeOwnQueueHoldsGrowth checks that connections of many paths do not keep
// queues of their own packets standing in the fabric. On a fat tree of
// 4-port switches and 400 Gb/s links, each of 16 hosts WRITEs to the host 8
// after it, across the core, over 128 paths: hashing loads some links more
// than others, and a connection's paths grow a packet a round trip each,
// while a mark cuts one path of many. With the hold (holdsGrowth) the
// paths' smoothed round trips when 9 tenths were sent through are shorter, and the last
// WRITE ends no later. It is a large test: 4,096 packets a host.
func TestLargeOwnQueueHoldsGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("large")
	}
	const hosts, size = 16, 16 << 20
	run := func(off bool) (took, srtt time.Duration) {
		holdOff = off
		defer func() { holdOff = false }()
		n := newNet(t, fatTreeAt400(1, 4, hosts), Config{Paths: 128, InboundCapacity: 49e9})
		var pairs []*pair
		var srcs, dsts []*memreg.Region
		for h := range hosts {
			pr := n.connect(h, (h+hosts/2)%hosts)
			pairs = append(pairs, pr)
			srcs = append(srcs, pr.ha.region(t, size, uint64(h+1), memreg.LocalWrite))
			dsts = append(dsts, pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite))
		}
		start := n.sim.Now()
		for i, pr := range pairs {
			pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{srcs[i], 0, size}, RKey: dsts[i].Key()})
		}
		s := &pairs[0].a.snd
		if !n.run(time.Second, func() bool { return s.unsent < size/10 }) {
			t.Fatalf("hold off %v: nine tenths of the data were never sent: %+v", off, s.stats)
		}
		for _, pr := range pairs {
			for _, p := range pr.a.snd.paths {
				srtt += p.RTT.SRTT / time.Duration(hosts*len(pr.a.snd.paths))
			}
		}
		done := func() bool {
			for _, pr := range pairs {
				if len(pr.ra.done) == 0 {
					return false
				}
			}
			return true
		}
		if !n.run(time.Second, done) {
			t.Fatalf("hold off %v: the WRITEs did not complete", off)
		}
		for i, pr := range pairs {
			if pr.ra.done[0].Status != StatusOK || digest(srcs[i].Bytes()) != digest(dsts[i].Bytes()) {
				t.Fatalf("hold off %v: connection %d: %+v, or its data differs", off, i, pr.ra.done)
			}
		}
		return n.sim.Now().Sub(start), srtt
	}
	on, srttOn := run(false)
	off, srttOff := run(true)
	t.Logf("with the hold: %v, mean SRTT %v when 9 tenths were sent; without: %v, %v", on, srttOn, off, srttOff)
	if srttOn >= srttOff || on > off {
		t.Errorf("with the hold %v, SRTT %v; without %v, %v: want shorter round trips, and no longer", on, srttOn, off, srttOff)
	}
}

// TestGrowthHeldOnTheQueuedPaths checks the rule of holdsGrowth: once the
// connection keeps more than half a BDP at its hint queued, and its paths
// number more than a quarter of that BDP, the paths that queue at least as
// much as its average path's stop growing and the others do not. Below
// that, with fewer paths, where the receiver is the bottleneck, or on a
// plane none of whose queues has marked once the delay signal saw a queue
// above its target, none is held.
func TestGrowthHeldOnTheQueuedPaths(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 4, InboundCapacity: 1e9, PortRates: []float64{8e9}})
	pr := n.connect(0, 1)
	pr.postWrite(t, 256)
	s := &pr.a.snd
	if !n.run(time.Millisecond, func() bool { return everyPathSampled(s) && s.hinted() }) {
		t.Fatal("the paths were not all sampled, or no hint came")
	}
	set := func(marking bool, hint float64, inflight int, srtt ...time.Duration) []bool {
		pr.a.ep.marking[0] = marking
		s.hint = hint
		held := make([]bool, len(s.paths))
		for i, p := range s.paths {
			p.RTT.Min, p.RTT.SRTT, p.inflight = 10*time.Microsecond, srtt[i], inflight
		}
		for i, p := range s.paths {
			held[i] = p.holdsGrowth()
		}
		return held
	}
	us := time.Microsecond
	srtts := []time.Duration{40 * us, 10 * us, 20 * us, 10 * us} // queued shares 3/4, 0, 1/2, 0
	// At 5 GB/s a BDP over 10 µs is 12 packets: its half is 6, its quarter 3.
	cases := []struct {
		marking  bool
		hint     float64
		inflight int
		srtt     []time.Duration
		want     []bool
	}{
		{true, 5e9, 16, srtts, []bool{true, false, true, false}},    // 12 + 8 queued
		{true, 5e9, 4, srtts, []bool{false, false, false, false}},   // 3 + 2 queued
		{true, 20e9, 64, srtts, []bool{false, false, false, false}}, // 4 paths grow less than a quarter of 48 a round trip
		{true, 1e9, 16, srtts, []bool{false, false, false, false}},  // the receiver grants under half the port
		{false, 5e9, 16, srtts, []bool{true, false, true, false}},   // no queue has marked, none passed the delay target
	}
	for _, c := range cases {
		if got := set(c.marking, c.hint, c.inflight, c.srtt...); !slices.Equal(got, c.want) {
			t.Errorf("marking %v, hint %.0f, %d in flight a path, SRTTs %v: held %v, want %v", c.marking, c.hint, c.inflight, c.srtt, got, c.want)
		}
	}
	// Where no queue marks, the delay signal bounds the queue once it has
	// seen one above its target.
	for _, p := range s.paths {
		p.cwin.OnDelay(time.Second, time.Second, 0)
	}
	if got := set(false, 5e9, 16, srtts...); slices.Contains(got, true) {
		t.Errorf("no queue marked, the delay signal saw a queue above its target: held %v, want none", got)
	}
	if got := set(true, 5e9, 16, srtts...); !slices.Equal(got, []bool{true, false, true, false}) {
		t.Errorf("a queue marked, the delay signal saw a queue above its target: held %v, want paths 0 and 2", got)
	}
}
