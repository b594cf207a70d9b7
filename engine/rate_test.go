package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/pathmgr"
)

// TestPacingRateFollowsThePaths checks that the pacing rate's per-path
// inputs, kept up to date as the paths change rather than read from every
// path at every packet, stay right. The run has ECN marks, random loss, and
// a plane that blackholes and comes back. After every event, each sender's
// inputs are what its paths say, and the rate it paces by is what they
// give. Its count of packets in flight, kept likewise, is its paths'
// summed.
func TestPacingRateFollowsThePaths(t *testing.T) {
	skipUnderRace(t)
	fc := netem.Config{Seed: 3, Hosts: 3, Planes: 4, Uplink: link100(), Downlink: link100()}
	fc.Downlink.Queue.ECNThreshold = 32 << 10 // two senders into one host, to draw marks
	fc.Downlink.Impair = netem.Impairments{Loss: &netem.RandomLoss{P: 0.01}}
	fc.Faults = []netem.Fault{{At: 200 * time.Microsecond, Kind: netem.PlaneBlackhole, Plane: 2},
		{At: 600 * time.Microsecond, Kind: netem.Repair, Plane: 2}}
	n := newNet(t, fc, Config{Paths: 8, MPL: 100 * time.Microsecond})
	const size = 32 << 20
	var senders []*sender
	for src := range 2 {
		pr := n.connect(src, 2)
		from := pr.ha.region(t, size, uint64(src+1), memreg.LocalWrite)
		to := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
		pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{from, 0, size}, RKey: to.Key()})
		senders = append(senders, &pr.a.snd)
	}
	var changes, outOfUse, marked int
	last := make([][]cc.PathRate, len(senders))
	for i, s := range senders {
		last[i] = slices.Clone(s.rateIn)
	}
	for n.sim.Step() {
		checkInflight(t, n.sim.Now(), senders...)
		for i, s := range senders {
			for id, p := range s.paths {
				w, rtt := p.cwin.Value()*s.mss, p.RTT.Min
				if p.State() == pathmgr.Down || p.State() == pathmgr.AssumedBad {
					w, rtt = 0, 0
					outOfUse++
				}
				if in := s.rateIn[id]; in.WindowBytes != w || in.MinRTT != rtt {
					t.Fatalf("at %v, sender %d path %d (%v): pacing inputs %g B, %v; the path has %g B, %v",
						n.sim.Now(), i, id, p.State(), s.rateIn[id].WindowBytes, s.rateIn[id].MinRTT, w, rtt)
				}
				if s.rateIn[id].WindowBytes != last[i][id].WindowBytes {
					changes++
					last[i][id] = s.rateIn[id]
				}
			}
			if !s.rateStale && s.windowRate != cc.WindowRate(s.rateIn) {
				t.Fatalf("at %v, sender %d paces by %g B/s, its paths give %g", n.sim.Now(), i, s.windowRate, cc.WindowRate(s.rateIn))
			}
		}
		if n.sim.Now() > clock.Time(2*time.Millisecond) {
			break
		}
	}
	for _, s := range senders {
		for _, p := range s.paths {
			marked += int(p.Counters.CEMarks)
		}
	}
	if changes < 100 || outOfUse == 0 || marked == 0 {
		t.Fatalf("the run did not exercise the inputs: %d window changes, %d path-events out of use, CE marks %d", changes, outOfUse, marked)
	}
	t.Logf("%d changes of a path's window bytes checked", changes)
}
