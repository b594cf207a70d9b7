package engine

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// tailFinish WRITEs packets of 4 KiB over two planes of 10 µs links, a
// round trip of about 42 µs, to a receiver that grants 2.5 GB/s. It loses
// the first transmission of the data packets numbered in drop, counted from
// 1 in the order sent. It returns when the WRITE completed, and the
// sender's counters 5 ms later.
func tailFinish(t *testing.T, packets int, drop ...int) (time.Duration, SenderStats) {
	t.Helper()
	return tailFinishWatching(t, packets, nil, drop...)
}

// tailFinishWatching is tailFinish calling watch, if set, with the time
// since the post and the sender's counters after every event.
func tailFinishWatching(t *testing.T, packets int, watch func(time.Duration, SenderStats), drop ...int) (time.Duration, SenderStats) {
	t.Helper()
	n := twoPlanes(t, Config{Paths: 2, Streams: 1, MaxPacket: 4160, InboundCapacity: 2.5e9}, 10*time.Microsecond)
	data := 0
	return n.write(t, packets, func(d *link.Datagram) bool {
		if proto.Type(d.Data[1]).IsData() {
			data++
			return slices.Contains(drop, data)
		}
		return false
	}, watch)
}

// twoPlanes is two hosts on two planes of 100 Gb/s links of 10 µs, a round
// trip of about 42 µs. Plane 1's links have plane1Delay instead. cfg sets
// the endpoints.
func twoPlanes(t *testing.T, cfg Config, plane1Delay time.Duration) *testNet {
	t.Helper()
	l := link100()
	l.Delay = 10 * time.Microsecond
	fc := netem.Config{Seed: 1, Hosts: 2, Planes: 2, Uplink: l, Downlink: l}
	if plane1Delay != l.Delay {
		slow := l
		slow.Delay = plane1Delay
		fc.Overrides = []netem.Override{{Plane: 1, Match: netem.LinkMatch{Kind: netem.AnyKind, Host: -1, Leaf: -1, Spine: -1}, Link: slow}}
	}
	return newNet(t, fc, cfg)
}

// postWrite registers packets x 4 KiB at both ends and posts their WRITE,
// with ID 1, from the pair's initiator.
func (pr *pair) postWrite(t testing.TB, packets int) {
	t.Helper()
	size := packets * 4096
	src := pr.ha.region(t, size, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, uint32(size)}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
}

// write connects host 0 to host 1 and loses the datagrams from host 0 that
// drop picks, none if drop is nil. It WRITEs packets of 4 KiB, calling
// watch, if set, with the time since the post and the sender's counters
// after every event. It returns how long the WRITE took, and the sender's
// counters 5 ms after it completed. By then what was still in flight has
// settled, and a timeout for it counts.
func (n *testNet) write(t *testing.T, packets int, drop func(*link.Datagram) bool, watch func(time.Duration, SenderStats)) (time.Duration, SenderStats) {
	t.Helper()
	pr := n.connect(0, 1)
	if drop != nil {
		n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: drop}
	}
	start := n.sim.Now()
	pr.postWrite(t, packets)
	if !n.run(time.Second, func() bool {
		if watch != nil {
			watch(n.sim.Now().Sub(start), pr.a.SenderStats())
		}
		return len(pr.ra.done) == 1
	}) {
		t.Fatal("the WRITE did not complete")
	}
	took := n.sim.Now().Sub(start)
	n.run(5*time.Millisecond, func() bool { return false })
	return took, pr.a.SenderStats()
}

// tailRTT is the round trip of tailFinish's fabric.
const tailRTT = 42 * time.Microsecond

// lossCost is how much later tailFinish's WRITE of packets completes when
// the data packets numbered in drop are lost than without, and the
// sender's counters with the loss.
func lossCost(t *testing.T, packets int, drop ...int) (time.Duration, SenderStats) {
	t.Helper()
	clean, st := tailFinish(t, packets)
	if st.Retransmits != 0 {
		t.Fatalf("no loss, yet %+v", st)
	}
	lossy, st := tailFinish(t, packets, drop...)
	return lossy - clean, st
}

// TestLostLastPacketFoundSoon checks that the last packet of a WRITE, lost,
// is found about one and a half round trips after it was sent. That is the
// round trip the packets sent with it took. It is not two smoothed RTTs
// after its path's previous ACK, which came back before it was sent.
// Nothing is resent without a loss.
func TestLostLastPacketFoundSoon(t *testing.T) {
	late, st := lossCost(t, 64, 64)
	if st.Retransmits == 0 {
		t.Fatalf("the last packet was dropped, yet nothing was resent: %+v", st)
	}
	if late > 5*tailRTT/2 {
		t.Fatalf("the lost last packet cost %v: want under 2.5 round trips", late)
	}
}

// TestTailProbeHasACopy checks that a tail probe with nothing behind it
// goes twice, the copy on another plane. When the last packet and its probe
// are both lost, the copy finds the packet, with no retransmission timeout.
// Whichever of the two is lost after the other delivered the data, no
// timeout follows for it either. That timeout would cut a working path's
// window to one packet.
func TestTailProbeHasACopy(t *testing.T) {
	for _, c := range []struct {
		what string
		drop []int
	}{
		{"the last packet and its probe", []int{64, 65}},
		{"the last packet and the probe's copy", []int{64, 66}},
	} {
		late, st := lossCost(t, 64, c.drop...)
		if st.Timeouts != 0 || st.TailProbes != 1 {
			t.Errorf("%s lost: %+v, want one probe and no timeout", c.what, st)
		}
		if late > 5*tailRTT/2 {
			t.Errorf("%s lost: it cost %v, want under 2.5 round trips", c.what, late)
		}
	}
}

// TestTailProbeAndItsCopyLost checks a tail whose last packet, its probe
// and the probe's copy are all lost. The copy's path probes again by the
// tail's margin from the newest round trip, as after a resend, not by its
// own timer from its smoothed RTT: the packet is found within three round
// trips.
func TestTailProbeAndItsCopyLost(t *testing.T) {
	late, st := lossCost(t, 64, 64, 65, 66)
	if st.TailProbes != 2 || st.Retransmits < 3 {
		t.Fatalf("the last packet, its probe and the copy lost: %+v, want a second probe", st)
	}
	if late > 3*tailRTT {
		t.Errorf("it cost %v, want under 3 round trips (%v)", late, 3*tailRTT)
	}
}

// TestUnsampledPathOverdue checks a path whose only packets are lost. It
// has no RTT sample, and its timer runs to twice its connection's estimate.
// Once the connection has nothing new to send, the round trips of its other
// path show sooner that its packets are overdue, and their loss is found
// then, and both resent.
func TestUnsampledPathOverdue(t *testing.T) {
	late, st := lossCost(t, 4, 2, 4) // packets alternate between the paths, so these are all of path 1's
	if st.Retransmits < 2 {
		t.Fatalf("path 1's packets lost: %+v, want both resent", st)
	}
	if late > 4*tailRTT {
		t.Fatalf("losing a path's only packets cost %v: want under 4 round trips", late)
	}
}

// TestUnsampledPathProbesByItsConnection loses every data packet path 1
// sends, from the first, while path 0 delivers: path 1 never has an RTT
// sample of its own, and nothing it sends shows its losses. Once the
// receiver has granted a rate, the first time its timer fires it sends a
// tail probe, timed by its connection's estimate, before any timeout
// declares its packets lost; a path that could not probe timed out at its
// first firing.
func TestUnsampledPathProbesByItsConnection(t *testing.T) {
	log := &traceLog{}
	drop := &dropPort{match: func(p *proto.Packet) bool {
		return p.Common.Type() == proto.TypeWrite && p.Common.PathID() == 1
	}, limit: 1 << 30}
	n := newNetWithDrop(t, twoHostFabric(2), Config{Paths: 2, InboundCapacity: 10e9, Tracer: log}, drop)
	pr := n.connect(0, 1)
	pr.postWrite(t, 1024)
	firstTimer := -1 // the index in log.evs of path 1's first timer
	n.run(2*time.Millisecond, func() bool {
		for i, ev := range log.evs {
			if ev.Kind == TraceTimer && ev.Path == 1 {
				firstTimer = i
				return true
			}
		}
		return false
	})
	if firstTimer < 0 {
		t.Fatalf("path 1's timer never fired: %+v", pr.a.SenderStats())
	}
	if s := &pr.a.snd; s.paths[1].RTT.Samples != 0 || !s.hinted() {
		t.Fatalf("path 1 has %d RTT samples, hint %v: the test needs none, and a hint", s.paths[1].RTT.Samples, s.hint)
	}
	probed, timedOut := false, false
	for _, ev := range log.evs[firstTimer:] {
		probed = probed || ev.Kind == TraceSent && ev.Path == 1 && ev.Probe
		timedOut = timedOut || ev.Kind == TraceLost && ev.Path == 1 && ev.Loss == LossTimeout
	}
	if !probed || timedOut {
		t.Fatalf("path 1's first timer: probe sent %v, packets lost by timeout %v; want a probe and no timeout", probed, timedOut)
	}
}

// TestUnsampledPathTimedOnceAnotherIsSampled loses the whole first window
// of path 1 of two, while path 0 delivers and the WRITE has much left to
// send: path 1 has no RTT sample, and nothing it sends shows its losses.
// Its timer was armed without an estimate, at RTOInitial. Once path 0's
// first sample comes in (with the receiver's hint), path 1 goes by its
// connection's estimate: its timer fires within a few round trips, not a
// millisecond later, while the WRITE still runs.
func TestUnsampledPathTimedOnceAnotherIsSampled(t *testing.T) {
	log := &traceLog{}
	drop := &dropPort{match: func(p *proto.Packet) bool {
		return p.Common.Type() == proto.TypeWrite && p.Common.PathID() == 1
	}, limit: int(cc.DefaultWindow.Initial)} // more than path 1's share of the first window
	cfg := Config{Paths: 2, InboundCapacity: 10e9, Tracer: log}
	n := newNetWithDrop(t, twoHostFabric(2), cfg, drop)
	pr := n.connect(0, 1)
	start := n.sim.Now()
	pr.postWrite(t, 4096) // 16 MiB, about 1.7 ms at the receiver's 10 GB/s
	s := &pr.a.snd
	var fired clock.Time
	samples := -1 // path 1's RTT samples when its timer fired
	seen := 0     // the events already read
	n.run(5*time.Millisecond, func() bool {
		for ; seen < len(log.evs); seen++ {
			if ev := log.evs[seen]; ev.Kind == TraceTimer && ev.Path == 1 {
				fired, samples = ev.At, int(s.paths[1].RTT.Samples)
				return true
			}
		}
		return false
	})
	if fired == 0 {
		t.Fatalf("path 1's timer never fired: %+v", pr.a.SenderStats())
	}
	if samples != 0 || s.unsent == 0 {
		t.Fatalf("path 1 had %d RTT samples and %d bytes were left to send when its timer fired: the test needs none and some", samples, s.unsent)
	}
	took := fired.Sub(start)
	t.Logf("path 1's first timer fired %v after the post (RTOInitial %v)", took, n.hosts[0].ep.cfg.RTOInitial)
	if took > n.hosts[0].ep.cfg.RTOInitial/4 {
		t.Errorf("path 1's first timer fired %v after the post: want it timed by its connection's estimate, well before RTOInitial (%v)",
			took, n.hosts[0].ep.cfg.RTOInitial)
	}
}

// TestTailResendHasACopy checks that a resend at the tail goes twice, the
// copy on another plane, as a probe does. Losing the packet before the last
// and then its resend or the copy costs about what losing the packet alone
// does. With the packet, its resend and the copy all lost, the connection
// probes, without a timeout.
func TestTailResendHasACopy(t *testing.T) {
	alone, st := lossCost(t, 64, 62)
	if st.Copies != 1 || st.Retransmits != 2 {
		t.Fatalf("a packet lost at the tail: %+v, want its resend and one copy", st)
	}
	for _, c := range []struct {
		what string
		drop []int
	}{
		{"the packet and its resend", []int{62, 65}},
		{"the packet and the resend's copy", []int{62, 66}},
	} {
		late, st := lossCost(t, 64, c.drop...)
		if st.Timeouts != 0 || st.TailProbes != 0 {
			t.Errorf("%s lost: %+v, want no probe and no timeout", c.what, st)
		}
		if late > alone+tailRTT/4 {
			t.Errorf("%s lost: it cost %v, the packet alone %v", c.what, late, alone)
		}
	}
	late, st := lossCost(t, 64, 62, 65, 66)
	if st.Timeouts != 0 || late > 11*tailRTT/4 {
		t.Errorf("the packet, its resend and the copy lost: it cost %v (%+v), want under 2.75 round trips and no timeout", late, st)
	}
}

// TestLastPacketsProbedByTheNewestRTT checks the tail probe's margin. With
// no more than tailPackets in flight at the tail, a path's smoothed RTT,
// which remembers the queues of the busy part of a transfer, no longer
// holds its probe back. The newest round trip and ProbeMin set it. With
// more in flight, the longer of the two round trips, plus half of it, sets
// it.
func TestLastPacketsProbedByTheNewestRTT(t *testing.T) {
	for _, packets := range []int{tailPackets, tailPackets + 4} {
		n := twoPlanes(t, Config{Paths: 2, Streams: 1}, 10*time.Microsecond)
		pr := n.connect(0, 1)
		pr.postWrite(t, packets)
		s := pr.a.snd
		if !n.run(time.Millisecond, func() bool { return s.unsent == 0 }) || s.inflight() != packets {
			t.Fatalf("%d packets: not all sent before the first ACK (%d in flight)", packets, s.inflight())
		}
		// Set what a long busy phase leaves. That is a stale smoothed RTT,
		// a fresh newest round trip, and a receiver's grant.
		const stale, fresh = 500 * time.Microsecond, 12 * time.Microsecond
		s.hint, s.newestRTT = 2.5e9, fresh
		for _, p := range s.paths {
			p.RTT.SRTT = stale
			p.timer.Reset(n.sim.Now().Add(time.Second))
		}
		now := n.sim.Now()
		s.probeOverdue(now)
		cfg := &pr.a.ep.cfg
		for _, p := range s.paths {
			margin := fresh + cfg.ProbeMin
			if packets > tailPackets {
				margin = stale + stale/2
			}
			want := max(p.slot(p.oldest).sentAt.Add(margin+s.drainTime()+cfg.AckDelay), now)
			if got := p.timer.Deadline(); got != want {
				t.Errorf("%d in flight: path %d probes at %v, want %v", packets, p.ID(), got, want)
			}
		}
	}
}

// A sender paced far below the line leaves a gap longer than AckDelay
// before each of its packets. The receiver repeats its last ACK once the
// sender has been quiet for a few of its own gaps, not after each packet:
// that would double the ACKs, which take a few percent of a link from the
// data going the other way.
func TestPacedSenderDrawsNoRepeatPerPacket(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 4, InboundCapacity: 125e6}) // 1 Gb/s: a packet every 33 µs
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 1<<20)
	data, acks := pr.a.SenderStats().Packets, pr.b.ReceiverStats().AcksSent
	t.Logf("%d data packets, %d ACKs", data, acks)
	if acks > data*5/4 {
		t.Fatalf("%d ACKs for %d data packets: repeats between paced packets", acks, data)
	}
}

// TestTailCopiesOnPlanesOfTheirOwn checks a tail under heavy random loss:
// with 30% of the packets lost on each downlink, data and ACKs alike, a
// resend at the tail goes with up to maxTailCopies copies, as many as
// other planes' windows have room for, each on a plane of its own, so that
// all four transmissions of its DSN are lost less than one time in a
// hundred; the transfer completes and checks.
func TestTailCopiesOnPlanesOfTheirOwn(t *testing.T) {
	log, pr := writeThroughLoss(t, fourPlanes(), 8)
	if got := pr.a.snd.loss.tailCopies(); got != maxTailCopies {
		t.Fatalf("loss rate %.2f asks for %d copies: the test needs %d", pr.a.snd.loss.rate, got, maxTailCopies)
	}
	// A resend and its copies leave at one instant.
	type burst struct {
		at  clock.Time
		dsn uint32
	}
	planes := map[burst][]int{}
	for _, ev := range log.evs {
		if ev.Kind == TraceSent && ev.Retransmit && !ev.Probe {
			b := burst{ev.At, ev.DSN}
			planes[b] = append(planes[b], pr.a.snd.paths[ev.Path].Plane())
		}
	}
	full := 0
	for b, ps := range planes {
		if len(ps) <= 1 {
			continue
		}
		if len(ps) > 1+maxTailCopies {
			t.Errorf("DSN %d at %v went %d times, want a resend and at most %d copies", b.dsn, time.Duration(b.at), len(ps), maxTailCopies)
		}
		slices.Sort(ps)
		if len(ps) == 1+maxTailCopies && len(slices.Compact(ps)) == len(ps) {
			full++
		}
	}
	if full == 0 {
		t.Errorf("no resend at the tail went with its copies on planes of their own: %v", planes)
	}
}

// TestTailCopiesOnItsOwnPlane checks that a connection with one plane
// copies its resends at the tail there too, on the path that lost them when
// it is the only one: random loss takes a copy no likelier on the same
// plane, and without one each round of loss at the tail waits for a probe.
func TestTailCopiesOnItsOwnPlane(t *testing.T) {
	log, pr := writeThroughLoss(t, twoHostFabric(1), 1)
	type burst struct {
		at  clock.Time
		dsn uint32
	}
	sent := map[burst]int{} // a resend and its copies leave at one instant
	for _, ev := range log.evs {
		if ev.Kind == TraceSent && ev.Retransmit && !ev.Probe {
			sent[burst{ev.At, ev.DSN}]++
		}
	}
	copied := 0
	for _, k := range sent {
		if k > 1 {
			copied++
		}
	}
	if st := pr.a.SenderStats(); copied == 0 || st.Copies == 0 {
		t.Errorf("%d resends at the tail went with a copy (%d copies in all), want some on the one path", copied, st.Copies)
	}
}

// TestNoCopyWhereTheRouteQueues checks where a copy goes: on another plane
// while one has room, then on another path of the path's own plane whose
// route reads clear, on the path itself last, and nowhere whose route holds
// a queue, since loss behind a queue is that queue's overflow and a copy
// would add to it; nor on a path that moved to a route it has no reading
// of yet.
func TestNoCopyWhereTheRouteQueues(t *testing.T) {
	n, pr, p := writtenPath(t, 2)
	s := pr.a.snd
	var sibling *sendPath
	var others []*sendPath // on the other plane
	for _, q := range s.paths[1:] {
		if q.Plane() == p.Plane() {
			sibling = q
		} else {
			others = append(others, q)
		}
	}
	if sibling == nil || len(others) == 0 {
		t.Fatalf("paths on planes %d, %d, %d, %d: want two a plane", s.paths[0].Plane(), s.paths[1].Plane(), s.paths[2].Plane(), s.paths[3].Plane())
	}
	if !p.queued || !sibling.queued {
		t.Fatal("a path without a reading of its queue")
	}
	p.queue, sibling.queue = 0, 0
	if got := s.pathForCopy(p, -1, 0); got == nil || got.Plane() == p.Plane() {
		t.Errorf("the other plane with room: the copy goes on %v, want a path of plane %d", pathName(got), others[0].Plane())
	}
	for _, q := range others {
		q.window = 0 // full
	}
	for _, c := range []struct {
		name                string
		queue, siblingQueue time.Duration
		want                *sendPath
	}{
		{"both routes clear", 0, 0, sibling},
		{"the sibling's route queues", 0, sibling.RTT.Min / 4, p},
		{"both routes queue", p.RTT.Min / 4, sibling.RTT.Min / 4, nil},
	} {
		p.queue, sibling.queue = c.queue, c.siblingQueue
		if got := s.pathForCopy(p, -1, 0); got != c.want {
			t.Errorf("%s: the copy goes on %v, want %v", c.name, pathName(got), pathName(c.want))
		}
	}
	p.queue, sibling.queue = 0, 0
	if !sibling.repath(n.sim.Now()) {
		t.Fatal("the sibling could not move to a new source port")
	}
	if got := s.pathForCopy(p, -1, 0); got != p {
		t.Errorf("the sibling on a new route it has not read: the copy goes on %v, want %v", pathName(got), pathName(p))
	}
}

// writeThroughLoss moves 1 MiB over a connection of the given paths
// through fc with 30% of the packets lost on each downlink, data and ACKs
// alike, checks what arrived, and returns the trace and the pair.
func writeThroughLoss(t *testing.T, fc netem.Config, paths int) (*traceLog, *pair) {
	t.Helper()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.3}
	log := &traceLog{}
	n := newNet(t, fc, Config{Paths: paths, Streams: 1, Tracer: log})
	pr := n.connect(0, 1)
	x := &xfer{op: OpWrite, size: 1 << 20, streams: 1}
	x.start(t, pr)
	if !n.run(10*time.Second, func() bool { return x.finished(pr) }) {
		t.Fatalf("not finished: %+v", pr.a.SenderStats())
	}
	x.check(t, pr)
	return log, pr
}

// pathName names a path in a test's message, or none.
func pathName(p *sendPath) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("path %d", p.ID())
}

// TestTailProbeCarriesNewData checks that a tail probe is new data while
// the sender has some the path may carry (spec section 6.6): every ACK of
// the receiver is dropped for a while in the middle of a WRITE, no data
// packet is lost, and the probes that the silence draws duplicate nothing.
// A probe that resent its path's newest packet would arrive twice.
func TestTailProbeCarriesNewData(t *testing.T) {
	for _, dark := range []time.Duration{15 * time.Microsecond, 25 * time.Microsecond} {
		log := &traceLog{}
		n := newNet(t, fourPlanes(), Config{Paths: 8, InboundCapacity: 45e9, Tracer: log})
		pr := n.connect(0, 1)
		from := n.sim.Now().Add(100 * time.Microsecond)
		dropped := 0
		n.hosts[1].ep.port = &portFilter{Port: n.fab.Host(1), drop: func(d *link.Datagram) bool {
			now := n.sim.Now()
			if proto.Type(d.Data[1]) == proto.TypeAck && now >= from && now < from.Add(dark) {
				dropped++
				return true
			}
			return false
		}}
		n.writeWhole(t, pr, 16<<20)
		st, rst := pr.a.SenderStats(), pr.b.ReceiverStats()
		probes := log.count(TraceSent, func(ev TraceEvent) bool { return ev.Probe })
		t.Logf("ACKs dark for %v: %d dropped, %d probes; %d resent (%d tail probes), %d timeouts, %d duplicates",
			dark, dropped, probes, st.Retransmits, st.TailProbes, st.Timeouts, rst.Duplicates)
		if dropped == 0 || probes == 0 {
			t.Fatalf("ACKs dark for %v: %d dropped and %d probes: the silence tests nothing", dark, dropped, probes)
		}
		if st.Retransmits != 0 || rst.Duplicates != 0 {
			t.Errorf("ACKs dark for %v: %d resent and %d duplicates where nothing was lost", dark, st.Retransmits, rst.Duplicates)
		}
	}
}

// TestTailOnADeadPathIsResent has one path of two die near the end of a
// WRITE, on whatever source port it moves to: its last packets, and everything it sends after
// them, PROBEs too, are lost, while the other path delivers. The tail
// probe's copy on the other plane arrives, and then the peer has nothing
// left to answer, so the path's timeout finds it quiet and resends one
// packet (peerQuiet). Once the peer answers that resend, what the path had
// in flight before its timeout is lost, and the path's next probe of its
// path declares it, its probes' wait at most BadProbeMax. Before, the peer
// stayed quiet, with nothing to answer, and the path's packets stayed in
// flight for ever.
func TestTailOnADeadPathIsResent(t *testing.T) {
	tailOvertakenOff = true // else the probe's copy finds the path's packets lost first (lostAtTail)
	defer func() { tailOvertakenOff = false }()
	took, st, onPath1 := deadPathAtTail(t)
	t.Logf("took %v: %d resent, %d tail probes, %d copies, %d timeouts", took, st.Retransmits, st.TailProbes, st.Copies, st.Timeouts)
	if onPath1 <= 29 {
		t.Fatalf("%d data packets on path 1: the dead path tests nothing", onPath1)
	}
	if st.Timeouts != 1 {
		t.Errorf("%d timeouts; want 1, whose resend the peer answers", st.Timeouts)
	}
	// The path's timeout comes within RTOMin, 50 µs, of its tail probe,
	// and its first probe after it within BadProbeMax.
	if limit := 100*time.Microsecond + 200*time.Microsecond; took > limit {
		t.Errorf("the WRITE took %v; want at most %v", took, limit)
	}
}

// TestTailOvertakenOnAnotherPath runs TestTailOnADeadPathIsResent's WRITE,
// whose path 1 dies at its tail, its tail probe lost with its last
// packets. The probe's copy on plane 0 arrives, and the ACK that reports
// it declares path 1's packets lost, sent long before it (lostAtTail):
// they are resent then, with no timeout, and the WRITE completes sooner
// than where the path's timeout finds them.
func TestTailOvertakenOnAnotherPath(t *testing.T) {
	took, st, _ := deadPathAtTail(t)
	tailOvertakenOff = true
	defer func() { tailOvertakenOff = false }()
	slow, _, _ := deadPathAtTail(t)
	t.Logf("took %v, %v without the rule: %d resent, %d tail probes, %d copies, %d timeouts", took, slow, st.Retransmits, st.TailProbes, st.Copies, st.Timeouts)
	if st.Timeouts != 0 || took > slow-40*time.Microsecond {
		t.Errorf("%d timeouts, the WRITE took %v (%v without the rule); want none, and at least 40us less", st.Timeouts, took, slow)
	}
}

// TestProbeReplyDeclaresWhatTheTimeoutLeft has path 0, of two, lose the
// last 6 DSNs of a WRITE, every copy it carries of them, until it sends its
// first PROBE, while path 1 runs over a plane of links 3 or 3.5 times as
// long. When path 0 times out the peer answered path 1's packets a little
// before, so it is not quiet (peerQuiet), and it answered nothing sent
// after path 0's: the timeout resends the oldest only (declareOldestOnce)
// and leaves the rest in flight, and the path leaves service. Its PROBE
// crosses, and the reply, which passed the rest, brings the path back and
// declares them lost at once. Before, the path came back with those
// packets in flight and its timer ran a whole timeout again. Where the
// peer's answers after a silence are still coming in when the reply
// arrives, as with links 4 times as long, the path waits for them instead
// (hear), and this test does not look.
func TestProbeReplyDeclaresWhatTheTimeoutLeft(t *testing.T) {
	for _, long := range []time.Duration{30 * time.Microsecond, 35 * time.Microsecond} {
		n := twoPlanes(t, Config{Paths: 2, Streams: 1, MaxPacket: 4160, InboundCapacity: 2.5e9}, long)
		var first uint32
		seen, probed := false, false
		lost := func(dsn uint32) bool { return dsn-first >= 58 } // the WRITE's last 6 DSNs of 64
		n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: func(d *link.Datagram) bool {
			var pkt proto.Packet
			if probed || pkt.Decode(d.Data) != nil {
				return false
			}
			if pkt.Type().IsData() && !seen {
				first, seen = pkt.Common.DSN(), true
			}
			if pkt.Common.PathID() != 0 {
				return false
			}
			if pkt.Type() == proto.TypeProbe {
				probed = true // the path's route works again from its first PROBE
				return false
			}
			return pkt.Type().IsData() && lost(pkt.Common.DSN())
		}}
		log := &traceLog{}
		n.hosts[0].ep.tracer = log
		pr := n.connect(0, 1)
		pr.postWrite(t, 64)
		if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
			t.Fatalf("plane 1 at %v: the WRITE did not complete", long)
		}
		// Path 0's transmissions, when each was resolved, acknowledged or
		// declared lost, and the DSNs declared lost when it came back.
		sentAt, resolvedAt := map[uint32]clock.Time{}, map[uint32]clock.Time{}
		var out, back clock.Time // path 0 out of service, and back
		var declaredBack []uint32
		for _, ev := range log.evs {
			if ev.Path != 0 {
				continue
			}
			switch ev.Kind {
			case TraceSent:
				sentAt[ev.PSN] = ev.At
			case TraceAcked, TraceLost:
				if _, done := resolvedAt[ev.PSN]; !done {
					resolvedAt[ev.PSN] = ev.At
				}
				if ev.Kind == TraceLost && back != 0 && ev.At == back {
					declaredBack = append(declaredBack, ev.DSN)
				}
			case TracePath:
				if ev.To == pathmgr.AssumedBad && out == 0 {
					out = ev.At
				}
				if ev.From == pathmgr.AssumedBad && ev.To == pathmgr.Good && out != 0 && back == 0 {
					back = ev.At
				}
			}
		}
		if back == 0 {
			t.Fatalf("plane 1 at %v: path 0 never left service and came back (out at %v): the test tests nothing", long, out)
		}
		leftAt := func(at clock.Time) int { // sent before the timeout, unresolved at at
			left := 0
			for psn, sent := range sentAt {
				if r, ok := resolvedAt[psn]; sent < out && (!ok || r > at) {
					left++
				}
			}
			return left
		}
		t.Logf("plane 1 at %v: path 0 out of service at %v with %d in flight, back at %v, %d declared then; WRITE done at %v",
			long, out, leftAt(out), back, len(declaredBack), n.sim.Now())
		if leftAt(out) == 0 {
			t.Fatalf("plane 1 at %v: path 0's timeout left nothing in flight: the test tests nothing", long)
		}
		if left := leftAt(back); left != 0 {
			t.Errorf("plane 1 at %v: %d packets sent before path 0's timeout still in flight when its probe's reply brought it back", long, left)
		}
		for _, dsn := range declaredBack {
			if !lost(dsn) {
				t.Errorf("plane 1 at %v: DSN %d, which crossed, declared lost when path 0 came back", long, dsn-first)
			}
		}
	}
}

// TestDeadPathStillLeavesService runs WRITEs of 16 packets one after
// another over two paths, path 1 dead after its 28th data packet. Its
// packets at the first WRITE's tail are found lost when its probe's copy
// arrives (lostAtTail), which leaves its timer nothing to time; at the
// next tail they are found lost again with no news of the path between,
// and it times out and leaves service. Declared lost at every tail, it
// stayed in service and lost its share of every WRITE.
func TestDeadPathStillLeavesService(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 2, InboundCapacity: 10e9})
	pr := n.connect(0, 1)
	drop, _ := path1DeadAfter(28)
	n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: drop}
	const packets, writes = 16, 20
	src := pr.ha.region(t, packets*4096, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, packets*4096, 0, memreg.LocalWrite|memreg.RemoteWrite)
	for i := range writes {
		if err := pr.a.Post(SendWR{ID: uint64(i), Op: OpWrite, Local: SGE{src, 0, packets * 4096}, RKey: dst.Key()}); err != nil {
			t.Fatal(err)
		}
		if !n.run(time.Second, func() bool { return len(pr.ra.done) > i }) {
			t.Fatalf("WRITE %d did not complete", i)
		}
		n.run(20*time.Microsecond, func() bool { return false })
	}
	st, dead := pr.a.SenderStats(), pr.a.snd.paths[1]
	t.Logf("%d resent, %d timeouts, %d copies; path 1 %v", st.Retransmits, st.Timeouts, st.Copies, dead.State())
	if dead.State() != pathmgr.AssumedBad || st.Timeouts == 0 {
		t.Errorf("path 1 %v after %d timeouts; want it ASSUMED_BAD after one", dead.State(), st.Timeouts)
	}
	if st.Retransmits > 2*writes {
		t.Errorf("%d packets resent over %d WRITEs: the dead path kept taking data", st.Retransmits, writes)
	}
}

// A path loses a burst of packets near a WRITE's tail, its tail probe
// among them, and the sender's host, which did not run for a while, reads
// the ACKs of the other path late, in one burst. Each ACK reports a newer
// transmission and declares a few more of the path's packets overtaken
// (lostAtTail): that is one tail, not two, and the path, which lost a
// burst and did not fail, neither times out nor leaves service. Before,
// each declaration counted as a tail, and the second timed the path out.
func TestLateAckBurstIsOneTail(t *testing.T) {
	us := time.Microsecond
	for _, k := range []int{18, 20, 22, 24} {
		for _, m := range []int{12, 16} {
			for _, at := range []time.Duration{25 * us, 30 * us} {
				for _, hold := range []time.Duration{10 * us, 20 * us, 30 * us} {
					n := newNet(t, twoHostFabric(2), Config{Paths: 2, InboundCapacity: 10e9})
					pr := n.connect(0, 1)
					n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: path1LosesBurst(k, m)}
					late := &stallingReceiver{sim: n.sim, ep: n.hosts[0].ep}
					n.fab.Host(0).Attach(late)
					n.sim.At(n.sim.Now().Add(at), clock.Func(func() { late.stall(hold) }))
					pr.postWrite(t, 64)
					if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
						t.Fatalf("path 1 lost packets %d-%d, ACKs held %v from %v: the WRITE did not complete", k+1, k+m, hold, at)
					}
					n.run(time.Millisecond, func() bool { return false })
					st := pr.a.SenderStats()
					if st.Timeouts != 0 || pr.a.snd.paths[1].State() != pathmgr.Good {
						t.Errorf("path 1 lost packets %d-%d, ACKs held %v from %v: %d timeouts, path 1 %v; want none, and Good",
							k+1, k+m, hold, at, st.Timeouts, pr.a.snd.paths[1].State())
					}
				}
			}
		}
	}
}

// path1LosesBurst returns a drop function that loses path 1's data
// packets k+1 to k+m.
func path1LosesBurst(k, m int) func(*link.Datagram) bool {
	sent := 0
	return func(d *link.Datagram) bool {
		var p proto.Packet
		if p.Decode(d.Data) != nil || p.Common.PathID() != 1 || !p.Type().IsData() {
			return false
		}
		sent++
		return sent > k && sent <= k+m
	}
}

// deadPathAtTail WRITEs 64 packets over two paths on two planes, where
// path 1 carries nothing after its 28th data packet (path1DeadAfter). It
// returns how long the WRITE took, the sender's counters, and how many
// data packets path 1 sent.
func deadPathAtTail(t *testing.T) (time.Duration, SenderStats, int) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 2, InboundCapacity: 10e9})
	drop, onPath1 := path1DeadAfter(28)
	took, st := n.write(t, 64, drop, nil)
	return took, st, *onPath1
}

// path1DeadAfter returns a drop function that loses everything path 1
// sends, data or PROBE, after its k-th data packet, and the count of data
// packets path 1 sent.
func path1DeadAfter(k int) (func(*link.Datagram) bool, *int) {
	sent := new(int)
	return func(d *link.Datagram) bool {
		var p proto.Packet
		if p.Decode(d.Data) != nil || p.Common.PathID() != 1 {
			return false
		}
		if p.Type().IsData() {
			*sent++
		}
		return *sent > k && (p.Type().IsData() || p.Type() == proto.TypeProbe)
	}, sent
}

// TestTailLossFoundOnAnotherPath loses the first transmission of every
// data packet that path 0 of two carries from the WRITE's 53rd DSN of 64
// on, and early on of DSNs 4, 12 and 20, a random loss of one in eight.
// Nothing of path 0 arrives after its last packets, but path 1's later
// packets do, and the ACK that reports them declares path 0's packets
// lost (lostAtTail): they are resent before path 0 sends a tail probe, and
// the WRITE completes sooner than where only a path that sent its tail
// probe declares. Without the earlier losses the connection loses nothing
// at random, and path 0's tail probe finds them as before.
func TestTailLossFoundOnAnotherPath(t *testing.T) {
	// run returns how long the WRITE took, the sender's counters, and how
	// many of path 0's packets of the last DSNs were declared overtaken.
	run := func(random bool) (time.Duration, SenderStats, int) {
		n := newNet(t, twoHostFabric(2), Config{Paths: 2, InboundCapacity: 10e9})
		log := &traceLog{}
		n.hosts[0].ep.tracer = log
		var first uint32
		seen := false
		dropped := map[uint32]bool{}
		tail := 0 // path 0's first transmissions of the last DSNs
		took, st := n.write(t, 64, func(d *link.Datagram) bool {
			var p proto.Packet
			if p.Decode(d.Data) != nil || !p.Type().IsData() {
				return false
			}
			dsn := p.Common.DSN()
			if !seen {
				first, seen = dsn, true
			}
			if dropped[dsn] {
				return false
			}
			if random && dsn-first < 24 && (dsn-first)%8 == 3 {
				dropped[dsn] = true
				return true
			}
			if p.Common.PathID() != 0 || dsn-first < 52 {
				return false
			}
			dropped[dsn] = true
			tail++
			return true
		}, nil)
		if tail == 0 {
			t.Fatal("path 0 carried none of the last DSNs")
		}
		overtaken := log.count(TraceLost, func(ev TraceEvent) bool {
			return ev.Path == 0 && ev.Loss == LossOvertaken && ev.DSN-first >= 52
		})
		return took, st, overtaken
	}
	took, st, overtaken := run(true)
	tailProbedOnly = true
	defer func() { tailProbedOnly = false }()
	slow, stSlow, _ := run(true)
	tailProbedOnly = false
	t.Logf("took %v (%v when only a probed path declares): %d declared overtaken, %d tail probes (%d), %d timeouts",
		took, slow, overtaken, st.TailProbes, stSlow.TailProbes, st.Timeouts)
	if overtaken == 0 || st.TailProbes != 0 || st.Timeouts != 0 {
		t.Errorf("%d of path 0's last packets declared overtaken, %d tail probes, %d timeouts; want some, and none", overtaken, st.TailProbes, st.Timeouts)
	}
	if took > slow-10*time.Microsecond {
		t.Errorf("the WRITE took %v, %v when only a probed path declares; want at least 10us less", took, slow)
	}
	_, st, overtaken = run(false)
	if overtaken != 0 || st.TailProbes == 0 {
		t.Errorf("no random loss: %d of path 0's last packets declared overtaken, %d tail probes; want none, and path 0's probe", overtaken, st.TailProbes)
	}
}

// holdPort sends the datagrams hold picks that long after the others, in
// the order they came.
type holdPort struct {
	link.Port
	sim  *clock.Sim
	hold func(*link.Datagram) time.Duration
}

func (f *holdPort) Send(batch []link.Datagram) {
	kept := batch[:0]
	for _, d := range batch {
		late := f.hold(&d)
		if late <= 0 {
			kept = append(kept, d)
			continue
		}
		held := d
		held.Data = append([]byte(nil), d.Data...)
		f.sim.At(f.sim.Now().Add(late), clock.Func(func() { f.Port.Send([]link.Datagram{held}) }))
	}
	f.Port.Send(kept)
}

// TestDeclaredPacketArrivingIsNews holds back, by 40 µs, every data
// packet path 1 of two sends from the WRITE's 97th DSN of 128 on, after
// three early losses. At the tail path 0's packets, and then the resends
// of path 1's that it carries, overtake them all, and lostAtTail declares
// them lost: a tail of path 1's. Then they arrive. A record that reports
// received a packet declared lost shows the path delivering, and the
// strike goes then, before any packet of path 1 is acknowledged; counted
// as no news, it would stand until one is, and a next tail before that
// would time the path out.
func TestDeclaredPacketArrivingIsNews(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 2, InboundCapacity: 10e9})
	var first uint32
	seen := false
	// data decodes a data packet and takes the WRITE's first DSN from the
	// first one: holdPort reads each batch before portFilter does.
	data := func(d *link.Datagram) (proto.Packet, bool) {
		var p proto.Packet
		if p.Decode(d.Data) != nil || !p.Type().IsData() {
			return p, false
		}
		if !seen {
			first, seen = p.Common.DSN(), true
		}
		return p, true
	}
	lost := map[uint32]bool{}
	held := 0
	n.hosts[0].ep.port = &holdPort{Port: &portFilter{Port: n.fab.Host(0), drop: func(d *link.Datagram) bool {
		p, ok := data(d)
		if !ok {
			return false
		}
		dsn := p.Common.DSN()
		if dsn-first < 24 && (dsn-first)%8 == 3 && !lost[dsn] {
			lost[dsn] = true
			return true
		}
		return false
	}}, sim: n.sim, hold: func(d *link.Datagram) time.Duration {
		p, ok := data(d)
		if !ok || p.Common.PathID() != 1 || p.Common.DSN()-first < 96 {
			return 0
		}
		held++
		return 40 * time.Microsecond
	}}
	log := &traceLog{}
	n.hosts[0].ep.tracer = log
	pr := n.connect(0, 1)
	pr.postWrite(t, 128)
	path := pr.a.snd.paths[1]
	var struckAt, clearedAt clock.Time // when path 1 was first struck, and when that strike went
	watch := func() {
		switch {
		case struckAt == 0 && path.tailStrikes > 0:
			struckAt = n.sim.Now()
		case struckAt != 0 && clearedAt == 0 && path.tailStrikes == 0:
			clearedAt = n.sim.Now()
		}
	}
	if !n.run(time.Second, func() bool { watch(); return len(pr.ra.done) == 1 }) {
		t.Fatal("the WRITE did not complete")
	}
	n.run(time.Millisecond, func() bool { watch(); return false })
	// The first acknowledgment on path 1 after the strike, which clears it
	// too.
	var acked clock.Time
	for _, ev := range log.evs {
		if ev.Kind == TraceAcked && ev.Path == 1 && ev.At >= struckAt && acked == 0 {
			acked = ev.At
		}
	}
	overtaken := log.count(TraceLost, func(ev TraceEvent) bool {
		return ev.Path == 1 && ev.Loss == LossOvertaken && ev.DSN-first >= 96
	})
	t.Logf("%d of path 1's packets held, %d declared overtaken; struck at %v, cleared at %v, acknowledged at %v; %v",
		held, overtaken, struckAt, clearedAt, acked, path.State())
	if struckAt == 0 || overtaken == 0 {
		t.Fatal("no tail of path 1's declared its held packets")
	}
	if clearedAt == 0 || acked != 0 && clearedAt >= acked || !path.InUse() {
		t.Errorf("path 1's strike cleared at %v, its first acknowledgment after it at %v, %v; want it cleared before, by its packets declared lost, and in service",
			clearedAt, acked, path.State())
	}
}
