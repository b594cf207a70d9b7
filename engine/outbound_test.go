package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
)

// TestOutboundCapacityIsShared has two connections from one host to two
// receivers share the host's OutboundCapacity. Together they send no faster
// than the capacity and waste none of it, and they finish together. Without
// it each connection paces on its own, far faster than the capacity given
// here.
func TestOutboundCapacityIsShared(t *testing.T) {
	const size = 1 << 20
	capacity := 2.5e9 // bytes of payload a second, a fifth of the 100 Gb/s link
	finish := func(outbound float64) (first, last time.Duration) {
		fc := netem.Config{Seed: 1, Hosts: 3, Planes: 1, Uplink: link100(), Downlink: link100()}
		n := newNet(t, fc, Config{Paths: 4, Streams: 1, OutboundCapacity: outbound})
		var pairs [2]*pair
		for i := range pairs {
			pairs[i] = n.connect(0, 1+i)
		}
		start := n.sim.Now()
		for i, pr := range pairs {
			src := pr.ha.region(t, size, uint64(1+i), memreg.LocalWrite)
			dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
			if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()}); err != nil {
				t.Fatal(err)
			}
		}
		completed := func() int { return len(pairs[0].ra.done) + len(pairs[1].ra.done) }
		if !n.run(time.Second, func() bool { return completed() >= 1 }) {
			t.Fatal("neither WRITE completed")
		}
		first = n.sim.Now().Sub(start)
		if !n.run(time.Second, func() bool { return completed() == 2 }) {
			t.Fatal("the second WRITE did not complete")
		}
		return first, n.sim.Now().Sub(start)
	}
	ideal := time.Duration(float64(2*size) / capacity * float64(time.Second))
	first, last := finish(capacity)
	if last < ideal*97/100 || last > ideal*115/100 {
		t.Errorf("sharing %g B/s: both done after %v, want %v (+15%%)", capacity, last, ideal)
	}
	if first < last*9/10 {
		t.Errorf("sharing %g B/s: one done after %v, the other after %v: not an even share", capacity, first, last)
	}
	if _, alone := finish(0); alone > ideal/2 {
		t.Errorf("without an outbound capacity: done after %v, want well under %v", alone, ideal)
	}
}
