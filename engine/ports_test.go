package engine

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/netem"
)

// portRun moves size bytes from host 0 to host 1 over two planes whose
// host-0 ports run at 25 and 100 Gb/s, and returns the bytes and the
// highest queue of each of host 0's ports and the virtual time it took.
func portRun(t *testing.T, size int, paths int, rates []float64) (bytes [2]uint64, queue [2]int, took time.Duration) {
	t.Helper()
	fc := twoHostFabric(2)
	slow := link100()
	slow.Rate = 25e9
	fc.Overrides = []netem.Override{{Plane: 0, Match: netem.LinkMatch{Kind: netem.Uplink, Host: 0, Leaf: -1, Spine: -1}, Link: slow}}
	n := newNet(t, fc, Config{Paths: paths, PortRates: rates})
	pr := n.connect(0, 1)
	start := n.sim.Now()
	n.writeWhole(t, pr, size)
	took = n.sim.Now().Sub(start)
	for _, l := range n.fab.Links() {
		if l.Kind() == netem.Uplink && l.From() == 0 {
			st := l.Stats()
			bytes[l.Plane()], queue[l.Plane()] = st.Bytes, st.QueueHighWater
		}
	}
	return bytes, queue, took
}

// TestPortsShareByTheirRates gives a sender the rates of its two ports,
// one a quarter of the other. It sends each its share of the transfer, a
// fifth and four fifths, keeps their queues to a few packets, and takes
// about the time the two rates together allow. Told nothing, it sends the
// slow port as much as its paths' windows take, which queues there.
func TestPortsShareByTheirRates(t *testing.T) {
	skipUnderRace(t)
	const size = 32 << 20
	payload := func(gbps float64) float64 { return gbps * 1e9 / 8 * 4096 / 4226 } // a full WRITE packet's payload share of its frame
	rates := []float64{payload(25), payload(100)}
	bytes, queue, took := portRun(t, size, 4, rates)
	share := float64(bytes[0]) / float64(bytes[0]+bytes[1])
	ideal := time.Duration(float64(size) / (rates[0] + rates[1]) * 1e9)
	t.Logf("with port rates: slow port %.3f of the bytes, queues %d and %d bytes, %v (ideal %v)", share, queue[0], queue[1], took, ideal)
	if math.Abs(share-0.2) > 0.01 {
		t.Errorf("the slow port carried %.3f of the bytes, want 0.2 +- 0.01", share)
	}
	if limit := (portBacklog + 4) * 4226; queue[0] > limit || queue[1] > limit {
		t.Errorf("port queues reached %d and %d bytes, want at most %d", queue[0], queue[1], limit)
	}
	if took > ideal*105/100 {
		t.Errorf("took %v, want within 5%% of %v", took, ideal)
	}

	_, blind, _ := portRun(t, size, 4, nil)
	t.Logf("without: queues %d and %d bytes", blind[0], blind[1])
	if blind[0] < 4*queue[0] {
		t.Errorf("told nothing, the slow port queued %d bytes, want far more than the %d with its rate", blind[0], queue[0])
	}
}

// TestPortHoldsALonePath gives a one-path sender ports far slower than its
// link and its window's rate. The port's rate is what it sends at: no
// faster, and without stalls between the waits for the port.
func TestPortHoldsALonePath(t *testing.T) {
	const size = 1 << 20
	rate := 0.25e9 // 2 Gb/s of payload
	bytes, queue, took := portRun(t, size, 1, []float64{rate, rate})
	ideal := time.Duration(float64(size) / rate * 1e9)
	t.Logf("%v for %d bytes (ideal %v), queue %d", took, bytes[0]+bytes[1], ideal, queue[0])
	if took < ideal*98/100 || took > ideal*105/100 {
		t.Errorf("took %v, want the port's rate: %v, -2%% to +5%%", took, ideal)
	}
}

// TestPortRatesChecked refuses rates that are not positive and finite.
func TestPortRatesChecked(t *testing.T) {
	for _, r := range []float64{0, -1, math.Inf(1), math.NaN()} {
		c := Config{PortRates: []float64{1e9, r}}
		if err := c.fill(); err == nil {
			t.Errorf("port rate %v accepted", r)
		}
	}
}

// sprayShare WRITEs 4 MiB from host 0 to host 1 over two planes with cfg
// and returns the share of the bytes host 0's port on plane 0 carried.
func sprayShare(t *testing.T, cfg Config) float64 {
	t.Helper()
	n := newNet(t, twoHostFabric(2), cfg)
	n.writeWhole(t, n.connect(0, 1), 4<<20)
	var bytes [2]uint64
	for _, l := range n.fab.Links() {
		if l.Kind() == netem.Uplink && l.From() == 0 {
			bytes[l.Plane()] = l.Stats().Bytes
		}
	}
	return float64(bytes[0]) / float64(bytes[0]+bytes[1])
}

// TestSprayFollowsPortRates gives a sender ports of 25 and 100 Gb/s and a
// receiver that grants 10 Gb/s, so neither port is ever busy. New data
// still goes a fifth on the slow port and four fifths on the fast one, as
// the ports' rates are, not half and half as round robin would send it.
func TestSprayFollowsPortRates(t *testing.T) {
	payload := func(gbps float64) float64 { return gbps * 1e9 / 8 * 4096 / 4226 }
	share := sprayShare(t, Config{Paths: 4, PortRates: []float64{payload(25), payload(100)}, InboundCapacity: payload(10)})
	if math.Abs(share-0.2) > 0.02 {
		t.Errorf("the 25 Gb/s port carried %.3f of the bytes, want 0.2 +- 0.02", share)
	}
}

// A plane the endpoint has no port rate for takes its share of new data
// as the fastest port would, not all of it.
func TestSprayGivesAnUnratedPlaneItsShare(t *testing.T) {
	payload := portPayload
	share := sprayShare(t, Config{Paths: 4, PortRates: []float64{payload}, InboundCapacity: payload / 10})
	if math.Abs(share-0.5) > 0.02 {
		t.Errorf("the unrated plane carried %.3f of the bytes, want 0.5 +- 0.02", 1-share)
	}
}

// TestTheTailLeavesALongPlane runs a WRITE over two planes, the second's
// links ten times as long, 18 µs more one way. The long plane carries its
// half of the message until near the end, where its packets would arrive
// after the short plane could have carried all the rest. Sprayed to the
// end, its last packet arrives 21 µs after the short plane's; it must
// arrive within a third of its extra delay, and the plane must still
// carry most of its half.
func TestTheTailLeavesALongPlane(t *testing.T) {
	fc := twoHostFabric(2)
	long := link100()
	long.Delay = 10 * time.Microsecond
	fc.Overrides = []netem.Override{{Plane: 1, Match: netem.LinkMatch{Kind: netem.AnyKind, Host: -1, Leaf: -1, Spine: -1}, Link: long}}
	payload := portPayload
	n := newNet(t, fc, Config{Paths: 4, PortRates: []float64{payload, payload}, InboundCapacity: payload / 10})
	var last [2]time.Duration
	var bytes [2]int
	n.fab.AddTap(func(e *netem.TapEvent) {
		if e.Verdict == netem.Delivered && e.Link.Kind() == netem.Downlink && e.Datagram.Size() > 1000 {
			last[e.Link.Plane()] = time.Duration(e.At)
			bytes[e.Link.Plane()] += e.Datagram.Size()
		}
	})
	n.writeWhole(t, n.connect(0, 1), 4<<20)
	if late := last[1] - last[0]; late > 6*time.Microsecond {
		t.Errorf("the long plane's last data arrived %v after the short plane's, want at most 6µs", late)
	}
	if share := float64(bytes[1]) / float64(bytes[0]+bytes[1]); share < 0.45 || share > 0.5 {
		t.Errorf("the long plane carried %.3f of the data, want 0.45 to 0.5", share)
	}
}

// TestDeliveryRateHoldsThroughAckBatches checks that the delivery rate
// tailCut divides by stays near the rate a paced connection sends at. Its
// receiver grants a tenth of a port's payload rate, and its ACKs leave over
// links whose delay varies while they keep their order, so that they
// arrive in batches, as ACKs do behind a busy host's queue. An interval of
// one round trip then holds one batch or two, and the rate of one interval
// alone would be far from the true one.
func TestDeliveryRateHoldsThroughAckBatches(t *testing.T) {
	fc := twoHostFabric(2)
	acks := link100()
	acks.Delay, acks.Impair.Jitter = 20*time.Microsecond, 15*time.Microsecond
	fc.Overrides = []netem.Override{{Plane: -1, Match: netem.LinkMatch{Kind: netem.Uplink, Host: 1, Leaf: -1, Spine: -1}, Link: acks}}
	payload := portPayload
	n := newNet(t, fc, Config{Paths: 4, PortRates: []float64{payload, payload}, InboundCapacity: payload / 10})
	pr := n.connect(0, 1)
	pr.postWrite(t, 1024)
	s := &pr.a.snd
	var rates []float64
	last := 0.0
	done := n.run(time.Second, func() bool {
		if r := s.delivery.rate; r != last {
			last = r
			if n.sim.Now() > clock.Time(500*time.Microsecond) && s.unsent > 0 {
				rates = append(rates, r)
			}
		}
		return len(pr.ra.done) == 1
	})
	if !done {
		t.Fatal("the WRITE did not complete")
	}
	if len(rates) < 20 {
		t.Fatalf("%d delivery rates sampled after 500µs, want at least 20", len(rates))
	}
	lo, hi := slices.Min(rates), slices.Max(rates)
	if want := payload / 10; lo < want/1.5 || hi > 1.5*want {
		t.Errorf("the delivery rate ranged over %.3g to %.3g B/s, want 2/3 to 3/2 of the hint's %.3g", lo, hi, want)
	}
}

// portPayload is the payload rate in bytes a second of a 100 Gb/s port
// sending WRITEs of 4 KiB, 4,226 bytes on the wire each.
const portPayload = 100e9 / 8 * 4096 / 4226
