package engine

import (
	"math"
	"testing"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// startRun WRITEs size bytes over 8 paths of one 400 Gb/s plane whose round
// trip is about 12.5 µs, and returns the virtual time it took and the
// sender's windows summed at the end.
func startRun(t *testing.T, size int, hints bool) (took time.Duration, windows int) {
	t.Helper()
	fc := twoHostFabric(1)
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	n := newNet(t, fc, Config{Paths: 8, InboundCapacity: 0.98 * 400e9 / 8, NoRateHints: !hints})
	pr := n.connect(0, 1)
	start := n.sim.Now()
	n.writeWhole(t, pr, size)
	for _, tel := range pr.a.Telemetry() {
		windows += tel.Window
	}
	return n.sim.Now().Sub(start), windows
}

// TestStartFromTheReceiversShare moves 2 MiB where the first window of 16
// packets is a tenth of the bandwidth-delay product. At the first ACK the
// receiver's hint lifts the windows to its share's BDP, and the transfer
// takes little more than its serialization and a round trip. Without hints
// the windows grow a packet a round trip and take far longer.
func TestStartFromTheReceiversShare(t *testing.T) {
	const size = 2 << 20
	rtt := 12500 * time.Nanosecond
	rate := 0.98 * 400e9 / 8
	ideal := time.Duration(float64(size)/rate*1e9) + rtt
	withHint, w := startRun(t, size, true)
	without, w0 := startRun(t, size, false)
	t.Logf("2 MiB: %v with hints (windows %d packets), %v without (%d); ideal %v", withHint, w, without, w0, ideal)
	if withHint > ideal*13/10 {
		t.Errorf("with hints it took %v, want at most 1.3 x %v", withHint, ideal)
	}
	if withHint > without*3/4 {
		t.Errorf("with hints %v, without %v: the start made no difference", withHint, without)
	}
	// A BDP at the share is 0.98 x 50 GB/s x 12.5 µs over 4,096-byte
	// packets: about 150.
	if w < 140 {
		t.Errorf("windows %d packets at the end, want a bandwidth-delay product, about 150", w)
	}
}

// TestFirstWindowIsTheConnections opens a connection of 64 paths over a
// long round trip. Each path's window starts at one packet, but before its
// first ACK the connection sends 16 packets in all, as one of 8 paths does:
// more paths do not make a bigger first burst into an incast.
func TestFirstWindowIsTheConnections(t *testing.T) {
	for _, paths := range []int{8, 64} {
		fc := twoHostFabric(1)
		fc.Uplink.Delay, fc.Downlink.Delay = 25*time.Microsecond, 25*time.Microsecond // a round trip of over 100 µs
		n := newNet(t, fc, Config{Paths: paths})
		pr := n.connect(0, 1)
		src := pr.ha.region(t, 1<<20, 5, memreg.LocalWrite)
		dst := pr.hb.region(t, 1<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
		if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 1 << 20}, RKey: dst.Key()}); err != nil {
			t.Fatal(err)
		}
		n.run(60*time.Microsecond, func() bool { return false }) // sent, and no ACK back yet
		if got := pr.a.SenderStats().Packets; got != 16 {
			t.Errorf("%d paths: %d packets before the first ACK, want 16", paths, got)
		}
	}
}

// TestStartBoundByTheFirstWindowsRate puts the sender behind its own
// 2 Gb/s link while its receiver grants 320 Gb/s. The first window's
// acknowledgments come at the slow link's rate, and the start raises the
// windows to that rate's bandwidth-delay product, not the hint's. The
// delay signal is off: the first window's queue at the slow link would
// show above its target and the start would not come at all, whatever the
// rate it read.
func TestStartBoundByTheFirstWindowsRate(t *testing.T) {
	fc := twoHostFabric(1)
	fc.Uplink.Delay, fc.Downlink.Delay = 10*time.Microsecond, 10*time.Microsecond
	slow := fc.Uplink
	slow.Rate = 2e9
	fc.Overrides = []netem.Override{{Plane: 0, Match: netem.LinkMatch{Kind: netem.Uplink, Host: 0, Leaf: -1, Spine: -1}, Link: slow}}
	s := writeUntilStarted(t, newNet(t, fc, Config{Paths: 4, InboundCapacity: 40e9, DelayTarget: -1}), 4<<20, 10*time.Millisecond)
	var w int
	for _, p := range s.paths {
		w += p.window
	}
	t.Logf("windows %d packets at the start (hint %.3g B/s)", w, s.hint)
	if w > 32 {
		t.Errorf("windows %d packets at the start, want the slow link's BDP: a few packets above the first 16", w)
	}
}

// TestFirstWindowOfOneBDP sends, before the first ACK, one bandwidth-delay
// product unless Config.FirstWindow says otherwise: the handshake's round
// trip times the NIC port's rate, and the packets the receiver may hold
// its first ACK for. With FirstWindowFixed, or without the ports' rates,
// the first window is 16 packets, however many paths share it.
func TestFirstWindowOfOneBDP(t *testing.T) {
	const rate = 400e9 / 8
	for _, c := range []struct {
		name   string
		window FirstWindowPolicy
		rates  []float64
	}{
		{"a BDP", FirstWindowBDP, []float64{rate}},
		{"no ports' rates", FirstWindowBDP, nil},
		{"fixed", FirstWindowFixed, []float64{rate}},
	} {
		fc := twoHostFabric(1)
		fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
		fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
		n := newNet(t, fc, Config{Paths: 8, FirstWindow: c.window, PortRates: c.rates})
		pr := n.connect(0, 1)
		s := &pr.a.snd
		most := firstWindowSent(t, n, pr)
		want := 16
		if c.window == FirstWindowBDP && c.rates != nil {
			rtt := pr.a.hsRTT
			bdp := int(math.Ceil(rate * rtt.Seconds() / s.mss))
			if rtt < 12*time.Microsecond || rtt > 13*time.Microsecond || bdp < 140 {
				t.Fatalf("%s: handshake RTT %v, a BDP of %d packets: want about 12.5 µs and 150", c.name, rtt, bdp)
			}
			// At 50 GB/s more than AckEvery packets arrive in AckDelay.
			want = bdp + pr.a.ep.cfg.AckEvery
		}
		if most != want {
			t.Errorf("%s: %d packets in flight before the first ACK, want %d", c.name, most, want)
		}
	}
}

// firstWindowSent posts a WRITE of 4 MiB from pr's initiator and returns
// the most packets it had in flight before its first ACK came.
func firstWindowSent(t *testing.T, n *testNet, pr *pair) int {
	t.Helper()
	s := &pr.a.snd
	src := pr.ha.region(t, 4<<20, 5, memreg.LocalWrite)
	dst := pr.hb.region(t, 4<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 4 << 20}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	most := 0
	n.run(time.Millisecond, func() bool {
		most = max(most, s.inflight())
		return s.heard
	})
	return most
}

// TestFirstWindowOfOneBDPAfterALostHandshake loses the first CONNECT of a
// connection at 400 Gb/s, and in a second run the first ACCEPT. A
// handshake that went more than once times no round trip (Karn), so the
// first window could not be sized; the keep-alive PROBE sent at its
// establishment is answered with its Timestamp echoed, and a WRITE posted
// after that reply goes with a first window of one bandwidth-delay
// product, as after a handshake that lost nothing, not of 16 packets.
func TestFirstWindowOfOneBDPAfterALostHandshake(t *testing.T) {
	const rate = 400e9 / 8
	fc := twoHostFabric(1)
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	for _, lost := range []proto.Type{proto.TypeConnect, proto.TypeAccept} {
		drop := &dropPort{match: func(p *proto.Packet) bool { return p.Type() == lost }, limit: 1}
		n := newNetWrapped(t, fc, Config{Paths: 8, PortRates: []float64{rate}}, func(h int, p link.Port) link.Port {
			if h == 0 && lost == proto.TypeConnect || h == 1 && lost == proto.TypeAccept {
				drop.Port = p
				return drop
			}
			return p
		})
		pr := n.connect(0, 1)
		if drop.dropped != 1 || pr.a.hsSends != 2 {
			t.Fatalf("%v lost: %d dropped, %d CONNECTs sent: want 1 dropped and the CONNECT sent twice", lost, drop.dropped, pr.a.hsSends)
		}
		n.run(100*time.Microsecond, func() bool { return false }) // the keep-alive's reply
		s := &pr.a.snd
		most := firstWindowSent(t, n, pr)
		rtt := pr.a.hsRTT
		bdp := int(math.Ceil(rate * rtt.Seconds() / s.mss))
		t.Logf("%v lost: round trip %v, %d packets in flight before the first ACK", lost, rtt, most)
		if rtt < 12*time.Microsecond || rtt > 13*time.Microsecond {
			t.Fatalf("%v lost: round trip %v, want about 12.5 µs", lost, rtt)
		}
		if want := bdp + pr.a.ep.cfg.AckEvery; most != want {
			t.Errorf("%v lost: %d packets in flight before the first ACK, want a BDP and AckEvery, %d", lost, most, want)
		}
	}
}

// TestStartDespiteTheReceiversMarks runs 8 senders to one receiver at
// 400 Gb/s, whose downlink marks above 64 KiB: their first windows, 512
// KiB, queue there and the first ACKs come marked. The receiver grants
// each an eighth of its link, under half of a sender's port, so the queue
// is the receiver's to drain, and a sender whose first ACKs were marked
// still starts at its share: at its start its windows rise to at least the
// hint times its least round trip. Held by the marks alone, they would
// carry a packet or two a path for a round trip. The first windows are
// FirstWindowFixed's: one of a BDP is above the share already.
func TestStartDespiteTheReceiversMarks(t *testing.T) {
	const senders = 8
	fc := netem.Config{Seed: 1, Hosts: senders + 1, Planes: 1, Uplink: link100(), Downlink: link100()}
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	fc.Downlink.Queue.ECNThreshold = 64 << 10
	rate := 400e9 / 8.0
	n := newNet(t, fc, Config{Paths: 8, FirstWindow: FirstWindowFixed, InboundCapacity: rate, OutboundCapacity: rate, PortRates: []float64{rate}})
	var pairs []*pair
	for h := range senders {
		pr := n.connect(h, senders)
		src := pr.ha.region(t, 2<<20, uint64(h+1), memreg.LocalWrite)
		dst := pr.hb.region(t, 2<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
		pairs = append(pairs, pr)
		if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 2 << 20}, RKey: dst.Key()}); err != nil {
			t.Fatal(err)
		}
	}
	seen := make([]bool, senders)
	next := func() bool {
		for i, pr := range pairs {
			if !seen[i] && pr.a.snd.started {
				return true
			}
		}
		return false
	}
	marked, done := 0, 0
	for done < senders {
		if !n.run(time.Millisecond, next) {
			t.Fatal("not every sender started within a millisecond")
		}
		for i, pr := range pairs {
			s := &pr.a.snd
			if seen[i] || !s.started {
				continue
			}
			seen[i] = true
			done++
			var w float64
			var marks uint64
			least := time.Duration(math.MaxInt64)
			for _, p := range s.paths {
				w += p.cwin.Value()
				marks += p.Counters.CEMarks
				if p.RTT.Samples > 0 {
					least = min(least, p.RTT.Min)
				}
			}
			want := s.hint * least.Seconds() / s.mss
			t.Logf("sender %d at its start: windows %.1f packets, hint %.3g B/s, share's BDP %.1f, %d marks", i, w, s.hint, want, marks)
			if marks == 0 {
				continue
			}
			marked++
			if w < want {
				t.Errorf("sender %d, marked before its start: windows %.1f packets, want its share's BDP, %.1f or more", i, w, want)
			}
		}
	}
	if marked < senders/2 {
		t.Errorf("%d senders saw marks before their start, want at least %d: the queue was not there", marked, senders/2)
	}
}

// TestStartUnderLossFollowsTheHint loses a fifth of the packets on every
// link, data and ACKs alike. The first ACKs report a packet or two a path,
// and the packets acknowledged after the first ACK were sent a round trip
// after one another as the windows let them out: their acknowledgments'
// spacing is the windows' rate, not a bottleneck's. The start raises the
// windows to the receiver's share's bandwidth-delay product all the same,
// rather than leave them to grow a packet a round trip.
func TestStartUnderLossFollowsTheHint(t *testing.T) {
	fc := twoHostFabric(1)
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	fc.Uplink.Impair.Loss = &netem.RandomLoss{P: 0.2}
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.2}
	s := writeUntilStarted(t, newNet(t, fc, Config{Paths: 8, InboundCapacity: 0.98 * 400e9 / 8}), 8<<20, time.Millisecond)
	var w float64
	var least time.Duration
	for _, p := range s.paths {
		w += p.cwin.Value()
		if p.RTT.Samples > 0 && (least == 0 || p.RTT.Min < least) {
			least = p.RTT.Min
		}
	}
	bdp := s.hint * least.Seconds() / s.mss
	t.Logf("windows %.0f packets at the start; the hint's BDP over the least RTT %v: %.0f", w, least, bdp)
	if w < bdp/2 {
		t.Errorf("windows %.0f packets at the start, want about the hint's BDP, %.0f", w, bdp)
	}
}

// TestStartAfterLostAcksFollowsTheHint loses the ACKs that would follow
// the first one for 20 µs, and one packet of the first window. The first
// window left back to back, and the ACK that comes after the gap reports
// the packets the lost ones did: their spacing reads as a bottleneck's, a
// tenth of the hint. A packet declared lost says the spacing may be the
// loss's, not a link's, and the start raises the windows to the receiver's
// share's bandwidth-delay product all the same.
func TestStartAfterLostAcksFollowsTheHint(t *testing.T) {
	fc := twoHostFabric(1)
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	for _, dropData := range []bool{true, false} {
		n := newNet(t, fc, Config{Paths: 8, InboundCapacity: 0.98 * 400e9 / 8})
		var posted, firstAck clock.Time
		var dataDropped bool
		acks := &dropPort{match: func(p *proto.Packet) bool {
			if posted == 0 || p.Type() != proto.TypeAck {
				return false
			}
			now := n.sim.Now()
			if firstAck == 0 {
				firstAck = now // the first ACK of the data goes through
				return false
			}
			return now < firstAck.Add(20*time.Microsecond)
		}, limit: 1 << 30}
		acks.Port, n.hosts[1].ep.port = n.fab.Host(1), acks
		data := &dropPort{match: func(p *proto.Packet) bool {
			if !dropData || dataDropped || p.Common.Type() != proto.TypeWrite || p.Common.PathID() != 0 {
				return false
			}
			dataDropped = true
			return true
		}, limit: 1}
		data.Port, n.hosts[0].ep.port = n.fab.Host(0), data
		pr := n.connect(0, 1)
		posted = n.sim.Now()
		pr.postWrite(t, 2048)
		s := &pr.a.snd
		if !n.run(time.Millisecond, func() bool { return s.started }) {
			t.Fatalf("the start never came: hint %v, %+v", s.hint, pr.a.SenderStats())
		}
		var w float64
		var lost uint64
		for _, p := range s.paths {
			w += p.cwin.Value()
			lost += p.Counters.Lost
		}
		least, _ := s.leastRTTs()
		if dropData != (lost > 0) {
			t.Fatalf("a data packet dropped %v: %d declared lost at the start", dropData, lost)
		}
		bdp := s.hint * least.Seconds() / s.mss
		t.Logf("a data packet lost %v: windows %.0f packets at the start; the hint's BDP over the least RTT %v: %.0f", dropData, w, least, bdp)
		switch {
		case dropData && w < bdp/2:
			t.Errorf("a packet lost with the ACKs: windows %.0f packets at the start, want about the hint's BDP, %.0f", w, bdp)
		case !dropData && w >= bdp/2:
			// ACKs alone lost look like a bottleneck to the train; the
			// case checks that the one above tests the loss's part.
			t.Errorf("only ACKs lost: windows %.0f packets at the start, want the train's slower rate (under half of %.0f)", w, bdp)
		}
	}
}

// writeUntilStarted connects host 0 to host 1 of n, posts a WRITE of size
// bytes (postWrite) and runs until the start from the receiver's share has come
// (startFromHint), for at most limit. It returns the connection's sender.
func writeUntilStarted(t *testing.T, n *testNet, size int, limit time.Duration) *sender {
	t.Helper()
	pr := n.connect(0, 1)
	pr.postWrite(t, size/4096)
	s := &pr.a.snd
	if !n.run(limit, func() bool { return s.started }) {
		t.Fatalf("the start never came: hint %v, %+v", s.hint, pr.a.SenderStats())
	}
	return s
}

// TestOvertakenFirstWindowIsProbed loses path 3's share of a first window
// of one BDP, and its new packets for 150 µs after, into a receiver that
// grants a thirty-second of the line, as the standing queue of a 32:1
// incast does. Path 3 has no RTT sample, and nothing it sends shows its
// losses. Once packets sent after them on other paths are acknowledged,
// its losses are found by a probe at its connection's estimate, a few
// round trips in, and none times out. Its retransmission timeout counts
// the drain of every packet in flight at the receiver's share, most of
// which the queue dropped: many round trips.
func TestOvertakenFirstWindowIsProbed(t *testing.T) {
	const rate = 400e9 / 8
	log := &traceLog{}
	var sim *clock.Sim
	lostUntil := clock.Time(0)
	drop := &dropPort{match: func(p *proto.Packet) bool {
		// Path 3's new packets while the queue stands, not its probes.
		return p.Common.Type() == proto.TypeWrite && p.Common.PathID() == 3 &&
			p.Common.Flags()&proto.FlagRetransmit == 0 && sim.Now() < lostUntil
	}, limit: 1 << 30}
	fc := twoHostFabric(1)
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	n := newNetWithDrop(t, fc, Config{Paths: 8, PortRates: []float64{rate}, InboundCapacity: rate / 32, Tracer: log}, drop)
	sim = n.sim
	pr := n.connect(0, 1)
	sender := &pr.a.snd
	start := n.sim.Now()
	lostUntil = start.Add(150 * time.Microsecond)
	pr.postWrite(t, 1024)
	found := clock.Never // when the last of path 3's first window was found lost
	n.run(5*time.Millisecond, func() bool {
		lost := 0
		for _, ev := range log.evs {
			if ev.Kind == TraceLost && ev.Path == 3 {
				lost++
				found = ev.At
			}
		}
		return drop.dropped > 0 && lost >= drop.dropped
	})
	if drop.dropped < 10 || sender.first == 0 {
		t.Fatalf("dropped %d of path 3's first packets, first window %d: the test needs a first window of one BDP", drop.dropped, sender.first)
	}
	timeouts := 0
	for _, ev := range log.evs {
		if ev.Kind == TraceLost && ev.Path == 3 && ev.Loss == LossTimeout {
			timeouts++
		}
	}
	t.Logf("dropped %d, found after %v, %d timeouts, first %d", drop.dropped, found.Sub(start), timeouts, sender.first)
	if took := found.Sub(start); took > 200*time.Microsecond || timeouts > 0 {
		t.Fatalf("path 3's %d lost packets were all found %v after the WRITE, %d by its timeout: want within 200 µs, by a probe", drop.dropped, took, timeouts)
	}
}

// TestWholeFirstWindowLostIsProbed loses every packet of a first window
// of one BDP, as a sender of an incast whose window met the receiver's
// queue full does. The connection has heard no ACK, so it has no hint and
// no RTT sample. Its paths borrow the handshake's round trip and probe: the
// losses are found within a few round trips, where RTOInitial, a
// millisecond, held the whole transfer.
func TestWholeFirstWindowLostIsProbed(t *testing.T) {
	const rate = 400e9 / 8
	log := &traceLog{}
	var sender *sender
	drop := &dropPort{match: func(p *proto.Packet) bool {
		// Every new packet before the first ACK: the first window.
		return p.Common.Type() == proto.TypeWrite && p.Common.Flags()&proto.FlagRetransmit == 0 && !sender.heard
	}, limit: 1 << 30}
	fc := twoHostFabric(1)
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	n := newNetWithDrop(t, fc, Config{Paths: 8, PortRates: []float64{rate}, Tracer: log}, drop)
	pr := n.connect(0, 1)
	sender = &pr.a.snd
	rtoMin := pr.a.ep.cfg.RTOMin
	start := n.sim.Now()
	pr.postWrite(t, 1024)
	if !n.run(5*time.Millisecond, func() bool { return !sender.busy() }) {
		t.Fatal("the WRITE did not end within 5 ms")
	}
	if sender.first == 0 || drop.dropped < sender.first {
		t.Fatalf("dropped %d packets of a first window of %d: the test needs a whole first window of one BDP lost", drop.dropped, sender.first)
	}
	found := clock.Never
	for _, ev := range log.evs {
		if ev.Kind == TraceLost && ev.At < found {
			found = ev.At
		}
	}
	t.Logf("dropped %d, the first loss found after %v, the WRITE done after %v, handshake RTT %v", drop.dropped, found.Sub(start), n.sim.Now().Sub(start), pr.a.hsRTT)
	if took := found.Sub(start); took > 10*pr.a.hsRTT+2*rtoMin {
		t.Errorf("the first loss was found %v after the WRITE: want within ten handshake round trips and two RTOMin, %v", took, 10*pr.a.hsRTT+2*rtoMin)
	}
}

// incastAt400 is the fat tree's incast in small: senders hosts and a
// receiver, the last host, on one switch of 400 Gb/s links of 3 µs, the
// receiver's downlink holding 612 KiB and marking from 125 KiB.
func incastAt400(senders int) netem.Config {
	fc := netem.Config{Seed: 1, Hosts: senders + 1, Planes: 1, Uplink: link100(), Downlink: link100()}
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	fc.Downlink.Queue.ECNThreshold = 125 << 10
	fc.Downlink.Queue.Limit = 612 << 10
	return fc
}

// TestFirstBDPIncastKeepsUp runs 8 senders to one receiver at 400 Gb/s,
// 2 MiB each over 128 paths, through a receiver's downlink that holds 612
// KiB and marks from 125 KiB, as the fat tree's incast does. Their first
// windows of one BDP, eight of them, overflow that queue. The last WRITE
// ends no later than a twentieth after it does with first windows of 16
// packets, which fit: the resends of what the queue dropped go at the
// receiver's share (the pacer), and the packets a later one overtook are
// found lost at once (lostOvertaken). Resent unpaced and found by each
// path's probe, they overflowed the queue again, and paths timed out.
func TestFirstBDPIncastKeepsUp(t *testing.T) {
	skipUnderRace(t)
	run := func(window FirstWindowPolicy) (time.Duration, SenderStats) {
		const senders = 8
		rate := 400e9 / 8.0
		n := newNet(t, incastAt400(senders), Config{Paths: 128, FirstWindow: window, InboundCapacity: rate, OutboundCapacity: rate, PortRates: []float64{rate}})
		var pairs []*pair
		for h := range senders {
			pairs = append(pairs, n.connect(h, senders))
		}
		start := n.sim.Now()
		for _, pr := range pairs {
			pr.postWrite(t, 512)
		}
		var all SenderStats
		if !n.runUntilSent(pairs, 10*time.Millisecond) {
			t.Fatalf("first window %v: the WRITEs did not end within 10 ms", window)
		}
		for _, pr := range pairs {
			st := pr.a.SenderStats()
			all.Retransmits += st.Retransmits
			all.Timeouts += st.Timeouts
		}
		return n.sim.Now().Sub(start), all
	}
	small, sst := run(FirstWindowFixed)
	bdp, bst := run(FirstWindowBDP)
	t.Logf("first windows of 16 packets: %v, %d resent, %d timeouts; of one BDP: %v, %d resent, %d timeouts", small, sst.Retransmits, sst.Timeouts, bdp, bst.Retransmits, bst.Timeouts)
	if bdp > small+small/20 {
		t.Errorf("with first windows of one BDP the WRITEs took %v, against %v with 16 packets: want within a twentieth", bdp, small)
	}
}

// TestFirstWindowSharedByTheConnectionsOpened opens four connections from
// one host at 400 Gb/s: one bandwidth-delay product of its NIC is what the
// host sends before its first ACKs, so each connection's first window is a
// quarter of it, and the packets its receiver may hold the first ACK for
// (AckEvery: more arrive in AckDelay at a quarter of 400 Gb/s). An
// all-to-all's host opens one to every other; a BDP each put tens of BDPs
// into the fabric at once, and a plane of longer links a multiple of that.
func TestFirstWindowSharedByTheConnectionsOpened(t *testing.T) {
	const rate, conns = 400e9 / 8, 4
	fc := netem.Config{Seed: 1, Hosts: conns + 1, Planes: 1, Uplink: link100(), Downlink: link100()}
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	n := newNet(t, fc, Config{Paths: 8, PortRates: []float64{rate}})
	var pairs []*pair
	for h := 1; h <= conns; h++ {
		pairs = append(pairs, n.connect(0, h))
	}
	for _, pr := range pairs {
		pr.postWrite(t, 64)
	}
	n.run(time.Microsecond, func() bool { return false })
	for i, pr := range pairs {
		s := &pr.a.snd
		want := int(math.Ceil(rate*pr.a.hsRTT.Seconds()/s.mss/conns + float64(pr.a.ep.cfg.AckEvery)))
		if want <= 16 || s.first != want {
			t.Errorf("connection %d: first window %d packets, want a quarter of its BDP and AckEvery, %d (more than 16)", i, s.first, want)
		}
	}
}

// TestFirstBDPIncastKeepsTheLinkBusy has 8 senders WRITE 2 MiB each over 8
// paths into one receiver at 400 Gb/s, through a downlink that holds 612
// KiB, as TestFirstBDPIncastKeepsUp does. Their first windows of one BDP
// overflow it, and each path's window fills with packets lost there that
// nothing acknowledged after them shows lost. Those do not count against
// the windows while the receiver is the bottleneck (sendPath.held), so the
// senders go on at the receiver's share and its link stays busy: in the
// 8 round trips after the first packet arrives it carries on average at
// least 0.925 of what it could. Counted against the windows, they held the
// senders back while the losses were found, and the link carried less.
// How busy one run keeps the link turns on when each sender's resends meet
// the queue, which tens of nanoseconds move, so the test runs the incast
// with uplinks from 0 to 77 ns longer, as switches and NICs differ.
func TestFirstBDPIncastKeepsTheLinkBusy(t *testing.T) {
	skipUnderRace(t)
	sum := 0.0
	const runs = 12
	for i := range runs {
		sum += incastBusy(t, time.Duration(7*i)*time.Nanosecond)
	}
	if mean := sum / runs; mean < 0.925 {
		t.Errorf("the receiver's link carried on average %.3f of what it could in the 8 round trips after the first packet arrived, want at least 0.925", mean)
	}
}

// incastBusy runs the incast of TestFirstBDPIncastKeepsTheLinkBusy with
// uplinks longer by extra and returns the share of its link the receiver's
// downlink carried in the 8 round trips after the first packet arrived.
func incastBusy(t *testing.T, extra time.Duration) float64 {
	const senders, size = 8, 2 << 20
	rate := 400e9 / 8.0
	fc := incastAt400(senders)
	fc.Uplink.Delay += extra
	n := newNet(t, fc, Config{Paths: 8, InboundCapacity: rate, OutboundCapacity: rate, PortRates: []float64{rate}})
	var pairs []*pair
	for h := range senders {
		pairs = append(pairs, n.connect(h, senders))
	}
	arrived := func() (packets uint64) {
		for _, pr := range pairs {
			st := pr.b.ReceiverStats()
			packets += st.Packets + st.Duplicates
		}
		return packets
	}
	for _, pr := range pairs {
		pr.postWrite(t, size/4096)
	}
	if !n.run(time.Millisecond, func() bool { return arrived() > 0 }) {
		t.Fatal("no packet arrived within a millisecond")
	}
	first, before := n.sim.Now(), arrived()
	const span = 8 * 12 * time.Microsecond // 8 round trips
	n.run(span, func() bool { return false })
	could := rate * n.sim.Now().Sub(first).Seconds() / float64(writeFrame(4096))
	got := float64(arrived() - before)
	var all SenderStats
	for _, pr := range pairs {
		st := pr.a.SenderStats()
		all.Retransmits += st.Retransmits
		all.Timeouts += st.Timeouts
	}
	t.Logf("uplinks %v longer: in %v after the first packet arrived the link carried %.0f packets of the %.0f it could (%.3f); %d resent, %d timeouts",
		extra, n.sim.Now().Sub(first), got, could, got/could, all.Retransmits, all.Timeouts)
	return got / could
}

// A first window policy reads back as it prints, and a config with one the
// engine does not know is refused.
func TestFirstWindowPolicyParses(t *testing.T) {
	for _, f := range []FirstWindowPolicy{FirstWindowBDP, FirstWindowFixed} {
		if got, err := ParseFirstWindowPolicy(f.String()); err != nil || got != f {
			t.Errorf("%v: read back as %v, %v", f, got, err)
		}
	}
	if _, err := ParseFirstWindowPolicy("default"); err == nil {
		t.Error(`"default" read as a first window policy`)
	}
	cfg := Config{FirstWindow: FirstWindowFixed + 1}
	if err := cfg.fill(); err == nil {
		t.Error("a config with an unknown first window policy was accepted")
	}
}

// Everything a connection sends before its first answer is lost: a first
// window of 16 packets on one path and the path's probes. Nothing the
// sender sent has been answered, so the path's first timeout declares
// every packet it has in flight lost, as its window held: they go again
// at once, not one a timeout. So too on the side that accepted the
// connection, which has an ACK from the handshake but no answer to
// anything it sent.
func TestFirstTimeoutBeforeAnyAnswerDeclaresTheWindow(t *testing.T) {
	for _, acceptor := range []bool{false, true} {
		log := &traceLog{}
		var sender *sender
		drop := &dropPort{match: func(p *proto.Packet) bool {
			return sender != nil && p.Common.Type() == proto.TypeWrite && p.Common.Flags()&proto.FlagRetransmit == 0 && sender.peerAnswered() == 0
		}, limit: 1 << 30}
		n := newNetWithDrop(t, twoHostFabric(1), Config{Paths: 1, FirstWindow: FirstWindowFixed, Tracer: log}, drop)
		pr := n.connect(0, 1) // host 0, behind the drop, sends
		if acceptor {
			pr = n.connect(1, 0)
			pr.a, pr.ha, pr.hb = pr.accepted, pr.hb, pr.ha
		}
		sender = &pr.a.snd
		pr.postWrite(t, 64)
		if !n.run(10*time.Millisecond, func() bool { return !sender.busy() }) {
			t.Fatalf("acceptor %v: the WRITE did not end within 10 ms", acceptor)
		}
		first, atFirst := clock.Never, 0 // the first timeout, and what it declared
		for _, ev := range log.evs {
			if ev.Kind == TraceLost && ev.Loss == LossTimeout && ev.At <= first {
				first = ev.At
				atFirst++
			}
		}
		t.Logf("acceptor %v: dropped %d, the first timeout declared %d", acceptor, drop.dropped, atFirst)
		if drop.dropped < 16 || first == clock.Never || atFirst < drop.dropped {
			t.Errorf("acceptor %v: the first timeout declared %d packets lost of the %d dropped before any answer; want all", acceptor, atFirst, drop.dropped)
		}
	}
}

// TestFirstWindowLastsUntilTheFirstACK sends a WRITE over a switch at 100
// and at 400 Gb/s with first windows of one BDP. The receiver holds its
// first ACK until AckEvery packets arrived (spec section 6.6), so the
// first ACK comes that many packets after the handshake's round trip; a
// window of the handshake's BDP alone ran out first, and the sender's
// uplink idled until the ACK came. With those packets added, the uplink
// idles at most for the data's serialization on the downlink, which the
// handshake's small packets crossed at once: from the first data packet
// to the first one after the first window, no gap is longer than two
// packets' time.
func TestFirstWindowLastsUntilTheFirstACK(t *testing.T) {
	for _, gbps := range []float64{100, 400} {
		rate := gbps * 1e9
		fc := twoHostFabric(1)
		fc.Uplink.Rate, fc.Downlink.Rate = int64(rate), int64(rate)
		fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
		n := newNet(t, fc, Config{Paths: 8, PortRates: []float64{rate / 8}})
		pr := n.connect(0, 1)
		up := n.fab.Uplink(0, 0)
		var sent []clock.Time // the data packets' departures on the sender's uplink
		n.fab.AddTap(func(e *netem.TapEvent) {
			d := e.Datagram
			if e.Link == up && e.Verdict == netem.Sent && len(d.Data) > 1 && proto.Type(d.Data[1]).IsData() {
				sent = append(sent, e.At)
			}
		})
		pr.postWrite(t, 512)
		s := &pr.a.snd
		if !n.run(time.Millisecond, func() bool { return s.heard }) {
			t.Fatalf("%v Gb/s: no ACK came", gbps)
		}
		if s.first <= 16 || !n.run(time.Millisecond, func() bool { return len(sent) > s.first }) {
			t.Fatalf("%v Gb/s: first window %d packets, %d crossed the uplink: want one of a BDP, and a packet after it", gbps, s.first, len(sent))
		}
		var idle time.Duration
		for i := 1; i < len(sent); i++ {
			idle = max(idle, sent[i].Sub(sent[i-1]))
		}
		packet := time.Duration(float64(writeFrame(int(s.mss))*8) / rate * float64(time.Second))
		t.Logf("%v Gb/s: first window %d packets, the uplink idled %v at most between data packets (a packet takes %v)", gbps, s.first, idle, packet)
		if idle > 2*packet {
			t.Errorf("%v Gb/s: the uplink idled %v between data packets up to the first ACK, want at most %v", gbps, idle, 2*packet)
		}
	}
}

// TestHandshakeSeedsTheDelayBase checks that the delay signal's base on the
// handshake's plane starts from the handshake's one-way delay, before any
// data: the CONNECT's at the initiator, the ACCEPT's at the acceptor. The
// two ends share one clock here, so a base is the delay itself: the links'
// 6 µs and the serialization of a packet of under a hundred bytes, and a
// full packet's at the sender's port where its rate is known. The other
// plane has no reading. An end that sent its CONNECT or ACCEPT twice takes
// none, since which one was answered is not known, nor does an initiator
// in the authenticated mode, whose ACCEPT's Timestamp nothing
// authenticates.
func TestHandshakeSeedsTheDelayBase(t *testing.T) {
	const us = time.Microsecond
	fc := twoHostFabric(2)
	fc.Uplink.Delay, fc.Downlink.Delay = 3*us, 3*us
	// base reads a sender's base on plane through a reading of 10 µs, which
	// an unseeded base takes as its least and reads as no queue.
	const none = 10 * us
	base := func(s *sender, plane int) time.Duration {
		s.equip()
		b := s.delayBase[plane]
		return none - b.Queue(uint32(none))
	}
	near := func(b, want time.Duration) bool { return b >= want && b <= want+100*time.Nanosecond }
	// check compares the bases of the two ends with the bases wanted on
	// planes 0 and 1.
	check := func(name string, pr *pair, initiator, acceptor [2]time.Duration) {
		t.Helper()
		for _, end := range []struct {
			name string
			s    *sender
			want [2]time.Duration
		}{{"initiator", &pr.a.snd, initiator}, {"acceptor", &pr.b.snd, acceptor}} {
			for plane, want := range end.want {
				if b := base(end.s, plane); !near(b, want) {
					t.Errorf("%s: the %s's delay base on plane %d starts at %v, want %v", name, end.name, plane, b, want)
				}
			}
		}
	}
	onFirst := [2]time.Duration{6 * us, none} // the handshake on plane 0

	check("one CONNECT and one ACCEPT", newNet(t, fc, Config{}).connect(0, 1), onFirst, onFirst)

	const rate = 100e9 / 8
	n := newNet(t, fc, Config{PortRates: []float64{rate, rate}})
	full := time.Duration(float64(n.hosts[0].ep.cfg.MaxPacket) / rate * 1e9)
	withFull := [2]time.Duration{6*us + full, none}
	check("the ports' rates known", n.connect(0, 1), withFull, withFull)

	connects := &dropPort{match: func(p *proto.Packet) bool { return p.Type() == proto.TypeConnect }, limit: 1}
	pr := newNetWithDrop(t, fc, Config{}, connects).connect(0, 1)
	if connects.dropped != 1 || pr.a.hsSends != 2 || pr.b.hsSends != 1 {
		t.Fatalf("%d CONNECTs dropped, %d sent and %d ACCEPTs: want 1, 2 and 1", connects.dropped, pr.a.hsSends, pr.b.hsSends)
	}
	// The second CONNECT went on plane 1, and the ACCEPT that answered it.
	check("the first CONNECT lost", pr, [2]time.Duration{none, none}, [2]time.Duration{none, 6 * us})

	accepts := &dropPort{match: func(p *proto.Packet) bool { return p.Type() == proto.TypeAccept }, limit: 1}
	pr = newNetWrapped(t, fc, Config{}, func(h int, p link.Port) link.Port {
		if h == 1 {
			accepts.Port = p
			return accepts
		}
		return p
	}).connect(0, 1)
	if accepts.dropped != 1 || pr.b.hsSends != 2 {
		t.Fatalf("%d ACCEPTs dropped of %d sent, want 1 of 2", accepts.dropped, pr.b.hsSends)
	}
	check("the first ACCEPT lost", pr, [2]time.Duration{none, none}, [2]time.Duration{none, none})

	ic, ac := credentialPair(t, auth.MethodPSK, 0)
	check("authenticated", authNet(t, fc, Config{}, ic, ac).connect(0, 1), [2]time.Duration{none, none}, onFirst)
}

// TestLongPlaneWindowsFitItsRoundTrip runs a WRITE of 16 MiB over two
// planes of 400 Gb/s, plane 1's links five times as long as plane 0's. The
// start sizes every window by plane 0's round trip, the least, before
// plane 1's first ACK comes; when it does, plane 1's windows rise by the
// ratio of the round trips (fitLongPlane), and plane 1 carries a third of
// the data or more, and the WRITE ends sooner than without the rule. With
// equal planes the rule changes nothing, not even a window. Nor does it
// where plane 0 is the long one: the handshake's round trip was plane 0's,
// and the first window, sized by it, fits plane 0 already.
func TestLongPlaneWindowsFitItsRoundTrip(t *testing.T) {
	const rate = 400e9 / 8
	run := func(long int, delay time.Duration, paths int, off bool) (took time.Duration, share, windows float64) {
		fitLongPlaneOff = off
		defer func() { fitLongPlaneOff = false }()
		fc := twoHostFabric(2)
		fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
		fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
		l := fc.Uplink
		l.Delay = delay
		fc.Overrides = []netem.Override{{Plane: long, Match: netem.LinkMatch{Kind: netem.AnyKind, Host: -1, Leaf: -1, Spine: -1}, Link: l}}
		n := newNet(t, fc, Config{Paths: paths, PortRates: []float64{rate, rate}, InboundCapacity: 2 * rate, OutboundCapacity: 2 * rate})
		pr := n.connect(0, 1)
		start := n.sim.Now()
		pr.postWrite(t, 4096)
		if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
			t.Fatalf("plane %d's links at %v, rule off %v: the WRITE did not complete: %+v %v", long, delay, off, pr.ra.done, pr.a.Err())
		}
		var acked [2]uint64
		for _, p := range pr.a.snd.paths {
			acked[p.Plane()] += p.Counters.Acked
			windows += p.cwin.Value()
		}
		return n.sim.Now().Sub(start), float64(acked[long]) / float64(acked[0]+acked[1]), windows
	}
	on, shareOn, _ := run(1, 15*time.Microsecond, 16, false)
	off, shareOff, _ := run(1, 15*time.Microsecond, 16, true)
	t.Logf("plane 1 five times as long: %v, plane 1 carried %.2f of the packets; without the rule %v, %.2f", on, shareOn, off, shareOff)
	if shareOn < 1.0/3 || on >= off*85/100 {
		t.Errorf("plane 1 five times as long: %v and %.2f of the packets on plane 1, without the rule %v and %.2f: want a third or more, and 15%% sooner", on, shareOn, off, shareOff)
	}
	for _, c := range []struct {
		what  string
		long  int
		delay time.Duration
		paths int
	}{
		{"equal planes", 1, 3 * time.Microsecond, 16},
		// 64 paths: a first window of a long round trip, a few packets a path.
		{"plane 0 five times as long", 0, 15 * time.Microsecond, 64},
	} {
		on, _, wOn := run(c.long, c.delay, c.paths, false)
		off, _, wOff := run(c.long, c.delay, c.paths, true)
		if on != off || wOn != wOff {
			t.Errorf("%s: %v and windows of %.0f packets in all with the rule, %v and %.0f without: want the same", c.what, on, wOn, off, wOff)
		}
	}
}

// TestOnePathFillsAFastLine runs a 16 MiB WRITE over one path at 400
// Gb/s and a round trip of about 12.5 µs, where a bandwidth-delay product
// is near 150 packets. The path's window reaches it, as its cap
// (PathWindow) allows, and the WRITE moves at 0.9 of the line or more. A
// cap under one BDP would hold a connection of one path to a fraction of
// its line.
func TestOnePathFillsAFastLine(t *testing.T) {
	const rate = 400e9 / 8
	fc := twoHostFabric(1)
	fc.Uplink.Rate, fc.Downlink.Rate = 400e9, 400e9
	fc.Uplink.Delay, fc.Downlink.Delay = 3*time.Microsecond, 3*time.Microsecond
	n := newNet(t, fc, Config{Paths: 1, PortRates: []float64{rate}, InboundCapacity: rate, OutboundCapacity: rate})
	pr := n.connect(0, 1)
	start := n.sim.Now()
	pr.postWrite(t, 4096)
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
		t.Fatalf("the WRITE did not complete: %+v %v", pr.ra.done, pr.a.Err())
	}
	took := n.sim.Now().Sub(start)
	share := 4096 * 4096 / rate / took.Seconds()
	t.Logf("16 MiB in %v, %.2f of the line; the path's window ended at %.0f packets", took, share, pr.a.snd.paths[0].cwin.Value())
	if share < 0.9 {
		t.Errorf("16 MiB over one path took %v, %.2f of the line: want 0.9 or more", took, share)
	}
}
