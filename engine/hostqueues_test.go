package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
)

// This file uses only what the test harness had before planes kept a
// queue of their own (a0e20b6), so that a copy of it in such a checkout
// gives the "before" column of docs/results.md's table of host queues.

// onePlaneQueue sends the datagrams from one of the host's plane addresses
// through a host queue and the others straight to the port: the queue is
// that plane's own.
type onePlaneQueue struct {
	link.Port
	q     *hostQueue
	plane netip.Addr
}

func (o *onePlaneQueue) Send(batch []link.Datagram) {
	for i := range batch {
		if batch[i].Src.Addr() == o.plane {
			o.q.Send(batch[i : i+1])
		} else {
			o.Port.Send(batch[i : i+1])
		}
	}
}

// writeThroughHostQueue WRITEs 16 MiB from host 0 to host 1 on the fabric
// fc, host 0's datagrams through q, which is given the port, or only those
// of plane where that is a valid address. It returns the sender's
// statistics, its paths' timeouts and moves, q, and the time the WRITE
// took.
func writeThroughHostQueue(t *testing.T, fc netem.Config, plane netip.Addr, q *hostQueue, cfg Config) (SenderStats, uint64, uint64, *hostQueue, time.Duration) {
	n := newNetWrapped(t, fc, cfg, func(h int, p link.Port) link.Port {
		if h != 0 {
			return p
		}
		q.Port = p
		if plane.IsValid() {
			return &onePlaneQueue{Port: p, q: q, plane: plane}
		}
		return q
	})
	q.sim, q.ep = n.sim, n.hosts[0].ep
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 16<<20, 5, memreg.LocalWrite)
	dst := pr.hb.region(t, 16<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 16 << 20}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	start := n.sim.Now()
	if !n.run(5*time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
		t.Fatalf("the WRITE did not complete: %+v", pr.ra.done)
	}
	took := n.sim.Now().Sub(start)
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("the data differs")
	}
	var timeouts, moves uint64
	for _, p := range pr.a.Telemetry() {
		timeouts += p.Timeouts
		moves += p.Repaths
	}
	return pr.a.SenderStats(), timeouts, moves, q, took
}

// TestLargeHostQueuesAcrossRates writes 16 MiB over 2 or 4 planes of
// 10 Gb/s with 4, 8 or 16 paths, through a queue on the way out of 0.5 to
// 6 Gb/s that is plane 1's own, or that every plane passes. With plane 1's
// own queue the WRITE takes at most 1.25 times what the other planes and
// the queue carry together, and the host drops under 2% of the packets;
// with a shared one, at most 1.3 times what the queue lets out, and under
// 8%. With -v it prints the table docs/results.md shows.
func TestLargeHostQueuesAcrossRates(t *testing.T) {
	if testing.Short() {
		t.Skip("48 transfers: run without -short")
	}
	for _, planes := range []int{2, 4} {
		for _, paths := range []int{4, 8, 16} {
			for _, gbps := range []float64{0.5, 1, 3, 6} {
				for _, shared := range []bool{false, true} {
					fc := twoHostFabric(planes)
					fc.Uplink.Rate, fc.Downlink.Rate = 10e9, 10e9
					var plane netip.Addr                            // every plane's
					carries, most, mostDrops := gbps*1e9, 1.3, 0.08 // bits a second
					if !shared {
						plane = netem.Addr(1, 0)
						carries, most, mostDrops = float64(planes-1)*10e9+gbps*1e9, 1.25, 0.02
					}
					q := &hostQueue{fluidQueue: fluidQueue{rate: gbps * 1e9 / 8, limit: 64 << 10}}
					st, timeouts, moves, q, took := writeThroughHostQueue(t, fc, plane, q, Config{Paths: paths})
					ideal := time.Duration(float64(16<<20) * 8 / carries * 1e9)
					ratio, drops := took.Seconds()/ideal.Seconds(), float64(q.drops)/float64(st.Packets)
					t.Logf("%d planes, %2d paths, queue %.1f Gb/s, shared %-5v: %.3f of ideal, %4d dropped of %d, %d connection cuts, %d timeouts, %d moves",
						planes, paths, gbps, shared, ratio, q.drops, st.Packets, st.HostCuts, timeouts, moves)
					if ratio > most || drops > mostDrops {
						t.Errorf("%d planes, %d paths, queue %.1f Gb/s, shared %v: took %.3f of the ideal %v and the host dropped %.1f%%: want at most %.2f and %.0f%%",
							planes, paths, gbps, shared, ratio, ideal, 100*drops, most, 100*mostDrops)
					}
				}
			}
		}
	}
}
