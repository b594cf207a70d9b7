package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// sentData is a data packet that host 0 sent. It holds the packet's DSN
// counted from the connection's first, whether it is a retransmission, and
// its plane.
type sentData struct {
	dsn   uint32
	retx  bool
	plane int
}

// writeThrough WRITEs packets of 4 KiB from host 0 to host 1 over two
// planes of 10 µs links, plane 1's of 15 µs, with cfg. For each data packet
// host 0 sends, drop decides whether the fabric loses it. It returns what
// twoPlanes' write does.
func writeThrough(t *testing.T, packets int, cfg Config, drop func(sentData) bool) (time.Duration, SenderStats) {
	t.Helper()
	first, seen := uint32(0), false
	return twoPlanes(t, cfg, 15*time.Microsecond).write(t, packets, func(d *link.Datagram) bool {
		var pkt proto.Packet
		if pkt.DecodeNoCRC(d.Data) != nil || !pkt.Type().IsData() {
			return false
		}
		if !seen {
			first, seen = pkt.Common.DSN(), true
		}
		return drop(sentData{dsn: pkt.Common.DSN() - first, retx: pkt.Common.Flags()&proto.FlagRetransmit != 0, plane: int(d.Src.Addr().As4()[1])})
	}, nil)
}

// TestResendGoesToAnotherPlane checks that a packet lost on a plane is
// resent on the other plane, though a path of its own plane has the shorter
// RTT. Plane 1's links are slower, and the packet is lost on plane 0.
// Losses on a plane come together, so the resend avoids it.
func TestResendGoesToAnotherPlane(t *testing.T) {
	lostOn, lostDSN := -1, uint32(0)
	var resends []int
	writeThrough(t, 256, Config{Paths: 4, Streams: 1, InboundCapacity: 0.5e9}, func(d sentData) bool {
		switch {
		case lostOn < 0 && d.dsn >= 100 && d.plane == 0 && !d.retx:
			lostOn, lostDSN = d.plane, d.dsn
			return true
		case lostOn >= 0 && d.dsn == lostDSN && d.retx:
			resends = append(resends, d.plane)
		}
		return false
	})
	if len(resends) == 0 {
		t.Fatal("the lost packet was not resent")
	}
	for _, p := range resends {
		if p == lostOn {
			t.Fatalf("lost on plane %d, resent on planes %v", lostOn, resends)
		}
	}
}

// TestHeadOfWindowCopied checks the oldest DSN not acknowledged, which
// holds the receive window. Once its latest transmission is overdue, it is
// copied on a path of another plane, and the copy becomes its latest
// transmission. It is not copied before, nor on a closed connection.
func TestHeadOfWindowCopied(t *testing.T) {
	n := twoPlanes(t, Config{Paths: 4, Streams: 1, DSNWindow: 8}, 10*time.Microsecond)
	pr := fullWindow(t, n)
	s := pr.a.snd
	head := s.record(s.una)
	first := s.paths[head.path]
	now := n.sim.Now()
	s.copyHead(now)
	if s.stats.Copies != 0 {
		t.Fatalf("copied as soon as sent: %+v", s.stats)
	}
	s.copyHead(now.Add(s.overdueMargin(first) + s.drainTime() + pr.a.ep.cfg.AckDelay + time.Nanosecond))
	if s.stats.Copies != 1 || s.paths[head.path].Plane() == first.Plane() {
		t.Fatalf("overdue: %+v, the head's latest transmission on plane %d (first on %d), want one copy on the other plane",
			s.stats, s.paths[head.path].Plane(), first.Plane())
	}
	pr.a.Close()
	sent := s.stats.Packets
	s.copyHead(now.Add(time.Second))
	if s.stats.Packets != sent {
		t.Fatalf("closed, yet the head was copied: %+v", s.stats)
	}
}

// TestHeadCopiesFollowTheLoss checks that the head of a full receive
// window goes with as many copies as a resend at the tail, where the
// connection loses a third of its packets: three, each on a plane of its
// own other than the head's, so that the DSN does not hold the window for
// another round of loss found (docs/cc.md, "Copy of the DSN holding the
// window").
func TestHeadCopiesFollowTheLoss(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 8, Streams: 1, DSNWindow: 8})
	pr := fullWindow(t, n)
	s := pr.a.snd
	s.loss = randomLoss{rate: 0.33, verdicts: lossMemory}
	if s.loss.tailCopies() != maxTailCopies {
		t.Fatalf("a loss of a third asks for %d copies; the test needs %d", s.loss.tailCopies(), maxTailCopies)
	}
	log := &traceLog{}
	pr.a.ep.tracer = log
	first := s.paths[s.record(s.una).path]
	s.copyHead(n.sim.Now().Add(s.overdueMargin(first) + s.drainTime() + pr.a.ep.cfg.AckDelay + time.Nanosecond))
	planes := map[int]bool{}
	for _, ev := range log.evs {
		if ev.Kind == TraceSent && ev.DSN == s.una {
			planes[s.paths[ev.Path].Plane()] = true
		}
	}
	if s.stats.Copies != maxTailCopies || len(planes) != maxTailCopies || planes[first.Plane()] {
		t.Errorf("%d copies of the head, on planes %v (the head's latest on plane %d); want %d, each on a plane of its own other than the head's",
			s.stats.Copies, planes, first.Plane(), maxTailCopies)
	}
}

// fullWindow connects host 0 to host 1 and posts a WRITE of 64 packets,
// of which none arrives, so that the receive window fills and stays full.
func fullWindow(t *testing.T, n *testNet) *pair {
	t.Helper()
	pr := n.connect(0, 1)
	n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: func(d *link.Datagram) bool {
		return proto.Type(d.Data[1]).IsData()
	}}
	pr.postWrite(t, 64)
	s := pr.a.snd
	if !n.run(time.Millisecond, func() bool { return s.nextDSN-s.una == s.window }) {
		t.Fatalf("the window did not fill: %d of %d", s.nextDSN-s.una, s.window)
	}
	return pr
}

// headStarved connects host 0 to host 1 over two planes of 5 µs links,
// plane 1's faster, with a receive window of 8 DSNs, and posts a WRITE of
// 64 packets. The first 8 data packets arrive and sample the paths' round
// trips; no data packet after them does, so the window fills and stays
// full.
func headStarved(t *testing.T) (*testNet, *pair) {
	t.Helper()
	n := twoPlanes(t, Config{Paths: 4, Streams: 1, DSNWindow: 8, InboundCapacity: 1e9}, 5*time.Microsecond)
	pr := n.connect(0, 1)
	data := 0
	n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: func(d *link.Datagram) bool {
		if !proto.Type(d.Data[1]).IsData() {
			return false
		}
		data++
		return data > 8
	}}
	pr.postWrite(t, 64)
	return n, pr
}

// everyPathSampled reports whether each of s's paths has an RTT sample.
func everyPathSampled(s *sender) bool {
	for _, p := range s.paths {
		if p.RTT.Samples == 0 {
			return false
		}
	}
	return true
}

// TestHeadCopiedWhenPassed checks that the head of the receive window is
// copied once an ACK reports received a transmission sent more than a
// reordering window after the head's latest, and the head is as old as a
// tail probe's margin, before the drain time that the copy waits without
// that evidence. Not while the later transmission's lead is within the
// window, nor before the margin. The window is a quarter of the newest
// round trip plus what the head's path exceeds the connection's shortest
// by, in least RTT (plane 1's links are faster than plane 0's, where the
// head is) or in smoothed RTT (a queue on the head's path).
func TestHeadCopiedWhenPassed(t *testing.T) {
	n, pr := headStarved(t)
	s := &pr.a.snd
	if !n.run(time.Millisecond, func() bool { return everyPathSampled(s) && s.nextDSN-s.una == s.window }) {
		t.Fatalf("the window did not fill after every path's first sample: %d of %d", s.nextDSN-s.una, s.window)
	}
	head := s.record(s.una)
	p := s.paths[head.path]
	latest := p.slot(head.psn)
	least, fastest := s.leastRTTs()
	if p.RTT.Min <= least {
		t.Fatalf("the head's path %d, on plane %d, is the shortest: least RTT %v", p.ID(), p.Plane(), p.RTT.Min)
	}
	s.newestRTT = 40 * time.Microsecond
	window := max(p.RTT.Min-least, p.RTT.SRTT-fastest) + s.newestRTT/4
	margin := s.overdueMargin(p) + pr.a.ep.cfg.AckDelay
	if s.drainTime() == 0 {
		t.Fatal("no drain time: the receiver granted no rate")
	}
	old := latest.sentAt.Add(margin) // as old as a probe's margin, short of the drain time
	for _, c := range []struct {
		now  clock.Time
		lead time.Duration
	}{
		{old, window},
		{old - 1, window + time.Nanosecond},
	} {
		s.newestAcked = latest.sentAt.Add(c.lead)
		s.copyHead(c.now)
		if s.stats.Copies != 0 {
			t.Fatalf("%v after the head's latest transmission, a later one received with a lead of %v (window %v): %+v, want no copy",
				c.now.Sub(latest.sentAt), c.lead, window, s.stats)
		}
	}
	// A queue on the head's path, which its smoothed RTT shows, widens the
	// window.
	p.RTT.SRTT += 30 * time.Microsecond
	queued := max(p.RTT.Min-least, p.RTT.SRTT-fastest) + s.newestRTT/4
	old = latest.sentAt.Add(s.overdueMargin(p) + pr.a.ep.cfg.AckDelay)
	s.newestAcked = latest.sentAt.Add(window + time.Nanosecond)
	s.copyHead(old)
	if s.stats.Copies != 0 {
		t.Fatalf("a later transmission received with a lead of %v, within the window of a queued path (%v): %+v, want no copy",
			window+time.Nanosecond, queued, s.stats)
	}
	s.newestAcked = latest.sentAt.Add(queued + time.Nanosecond)
	s.copyHead(old)
	if s.stats.Copies != 1 || s.paths[head.path].Plane() == p.Plane() {
		t.Fatalf("passed by a transmission sent %v later: %+v, the head's latest transmission on plane %d (was on %d), want one copy on the other plane",
			queued+time.Nanosecond, s.stats, s.paths[head.path].Plane(), p.Plane())
	}
}

// TestHeadCopiedByItsTimer checks that the head of a full receive window
// is copied when it comes due though no ACK comes then: the evidence that
// it was passed came before a tail probe's margin, and nothing arrives
// after it. The evidence is set by hand, a transmission sent long after
// the head reported received, and cleared again, as by a later ACK that
// reports nothing: the head stays passed. It is copied at the margin,
// before its path's tail probe or timeout would have sent it again
// (other paths' tail probes may go before it).
func TestHeadCopiedByItsTimer(t *testing.T) {
	n, pr := headStarved(t)
	s := &pr.a.snd
	if !n.run(time.Millisecond, func() bool { return s.stats.Packets > 8 && s.nextDSN-s.una == s.window }) {
		t.Fatalf("the window did not fill: %d of %d", s.nextDSN-s.una, s.window)
	}
	headDSN := s.una
	head := s.record(headDSN)
	p := s.paths[head.path]
	latest := p.slot(head.psn)
	s.newestAcked = latest.sentAt.Add(time.Millisecond) // a transmission sent long after it was received
	due := latest.sentAt.Add(s.overdueMargin(p) + pr.a.ep.cfg.AckDelay)
	if now := n.sim.Now(); now >= due {
		t.Fatalf("the head is due at %v, before the window filled (%v)", due, now)
	}
	s.copyHead(n.sim.Now())
	if s.stats.Copies != 0 || s.headT.Deadline() > due {
		t.Fatalf("before it is due: %+v, the timer at %v, want no copy and the timer by %v", s.stats, s.headT.Deadline(), due)
	}
	s.newestAcked = 0
	if !n.run(time.Millisecond, func() bool { h := s.record(headDSN); return h.path != head.path || h.psn != latest.psn }) {
		t.Fatalf("the head was never sent again: %+v", s.stats)
	}
	h := s.record(headDSN)
	q := s.paths[h.path]
	if at := q.slot(h.psn).sentAt; at != due || s.stats.Copies != 1 || s.stats.Timeouts != 0 || q.Plane() == p.Plane() {
		t.Errorf("the head sent again %v after its latest transmission, on plane %d (was on %d): %+v, want one copy on the other plane at %v and no timeout before it",
			at.Sub(latest.sentAt), q.Plane(), p.Plane(), s.stats, due.Sub(latest.sentAt))
	}
}

// TestSlowPlaneNotProbedEarly checks that the last packets of a WRITE are
// probed by the newest round trip, but not before their own path's shortest
// one. With plane 1's links slower and nothing lost, nothing is resent or
// probed.
func TestSlowPlaneNotProbedEarly(t *testing.T) {
	for _, packets := range []int{16, 64} {
		_, st := writeThrough(t, packets, Config{Paths: 4, Streams: 1, InboundCapacity: 2.5e9}, func(sentData) bool { return false })
		if st.Retransmits != 0 || st.TailProbes != 0 {
			t.Errorf("%d packets, no loss: %+v, want nothing resent", packets, st)
		}
	}
}

// TestHeadNotCopiedBehindASlowerPlane checks that a plane whose queue is
// longer than another's does not pass for loss. Plane 1's downlinks run at
// half the rate, nothing is lost, and the receive window is small, so that
// half of it often waits behind a packet still queued there, which packets
// sent after it on plane 0 pass. No such head is a tail probe's margin old
// before it arrives, so none is copied. (TestHeadCopiedWhenPassed covers
// the reordering window's term for a queued path.)
func TestHeadNotCopiedBehindASlowerPlane(t *testing.T) {
	for _, window := range []int{32, 64, 256} {
		fc := twoHostFabric(2)
		slow := link100()
		slow.Rate = 50e9
		fc.Overrides = []netem.Override{{Plane: 1, Match: netem.LinkMatch{Kind: netem.Downlink, Host: -1, Leaf: -1, Spine: -1}, Link: slow}}
		n := newNet(t, fc, Config{Paths: 8, Streams: 1, DSNWindow: window})
		pr := n.connect(0, 1)
		n.writeWhole(t, pr, 4096*4096)
		if st := pr.a.SenderStats(); st.Copies != 0 || st.Retransmits != 0 {
			t.Errorf("window %d, nothing lost: %+v, want nothing copied or resent", window, st)
		}
	}
}

// TestLostResendCopiedOncePassed follows the copy of the window's head
// through the ACKs that show it passed. The head's first transmission and
// its resend are lost, and so is everything after the resend on the
// resend's path, which then finds nothing by a gap. The packets sent on
// the other paths arrive, and their ACKs show the head's latest
// transmission passed: it is copied once it is a tail probe's margin old,
// before it is also the drain time older, which the copy waits for
// without that evidence.
func TestLostResendCopiedOncePassed(t *testing.T) {
	n := twoPlanes(t, Config{Paths: 4, Streams: 1, DSNWindow: 32, InboundCapacity: 1e9}, 10*time.Microsecond)
	pr := n.connect(0, 1)
	s := &pr.a.snd
	var first uint32
	seen, lostPort := false, uint16(0)
	var lastAt, copiedAt clock.Time
	var margin, drain time.Duration
	var copied SenderStats
	n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: func(d *link.Datagram) bool {
		var pkt proto.Packet
		if pkt.DecodeNoCRC(d.Data) != nil || !pkt.Type().IsData() {
			return false
		}
		if !seen {
			first, seen = pkt.Common.DSN(), true
		}
		head := pkt.Common.DSN()-first == 40
		switch {
		case head && lostPort == 0 && pkt.Common.Flags()&proto.FlagRetransmit == 0:
			return true // the first transmission
		case head && (lostPort == 0 || d.Src.Port() == lostPort):
			lostPort, lastAt = d.Src.Port(), n.sim.Now() // the resend, or a later one on its path
			return true
		case head && copiedAt == 0:
			copiedAt, drain, copied = n.sim.Now(), s.drainFor(s.inflight()-1), s.stats // less the copy, in flight as it goes
			for _, p := range s.paths {
				if p.Port() == lostPort {
					margin = s.overdueMargin(p) + pr.a.ep.cfg.AckDelay
				}
			}
		}
		return lostPort != 0 && d.Src.Port() == lostPort
	}}
	pr.postWrite(t, 256)
	if !n.run(10*time.Millisecond, func() bool { return copiedAt != 0 }) {
		t.Fatalf("the head was never sent on another path: %+v", s.stats)
	}
	if copied.Copies != 1 || copied.Timeouts != 0 {
		t.Fatalf("when the head went on another path: %+v, want it the one copy, and no timeout", copied)
	}
	if age := copiedAt.Sub(lastAt); age < margin || age >= margin+drain {
		t.Fatalf("copied %v after its latest transmission, want from a probe's margin (%v) to that and the drain time (%v)", age, margin, margin+drain)
	}
}
