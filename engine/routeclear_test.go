package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/netem"
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
}
