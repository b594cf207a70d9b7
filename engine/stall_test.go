package engine

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// stallingReceiver stands in front of an endpoint as a host that does not
// run it for a while, as a busy machine does. What arrives during a stall
// waits, copied, and reaches the endpoint in order when the stall ends.
type stallingReceiver struct {
	sim     *clock.Sim
	ep      link.Receiver
	until   clock.Time
	waiting []link.Datagram
}

func (s *stallingReceiver) Receive(d *link.Datagram, at clock.Time) {
	if at >= s.until {
		s.ep.Receive(d, at)
		return
	}
	kept := *d
	kept.Data = bytes.Clone(d.Data)
	s.waiting = append(s.waiting, kept)
}

// stall holds what arrives for d from now, then delivers it.
func (s *stallingReceiver) stall(d time.Duration) {
	s.until = s.sim.Now().Add(d)
	s.sim.At(s.until, clock.Func(func() {
		for i := range s.waiting {
			s.ep.Receive(&s.waiting[i], s.sim.Now())
		}
		s.waiting = nil
	}))
}

// A receiver whose host does not run it for many round trips makes the
// sender's paths time out, though nothing was lost. The ACKs that come
// when the host runs again report the packets the timeouts saw as
// received: every timeout is found spurious, each path gets back the
// window it had and returns to service, and none moves to a new source
// port, since no route failed. Nothing is resent but each path's tail
// probe, their copies, and the one packet the first timeout of the
// silence declared lost: not the windows in flight. The data arrives
// whole. A connection with one path on four planes moves it to no other
// plane: the stalled peer answers its plane probes on none.
func TestStalledReceiverTimeoutsAreFoundSpurious(t *testing.T) {
	for _, shape := range []struct{ planes, paths int }{{2, 4}, {4, 1}} {
		t.Run(fmt.Sprintf("%d paths on %d planes", shape.paths, shape.planes), func(t *testing.T) {
			stalledReceiver(t, shape.planes, shape.paths)
		})
	}
}

// postWrite posts a WRITE of size bytes of generated data from pr's
// requester to a region of its responder, and returns the two regions.
func postWrite(t *testing.T, pr *pair, size uint32) (src, dst *memreg.Region) {
	t.Helper()
	src = pr.ha.region(t, int(size), 3, memreg.LocalWrite)
	dst = pr.hb.region(t, int(size), 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	return src, dst
}

func stalledReceiver(t *testing.T, planes, paths int) {
	n := newNet(t, twoHostFabric(planes), Config{Paths: paths, Streams: 1, PlaceholderPayloads: false})
	pr := n.connect(0, 1)
	st := &stallingReceiver{sim: n.sim, ep: n.hosts[1].ep}
	n.fab.Host(1).Attach(st)

	src, dst := postWrite(t, pr, 8<<20)
	n.run(100*time.Microsecond, func() bool { return false }) // windows open, RTTs sampled
	windows := map[int]int{}
	for _, p := range pr.a.Telemetry() {
		windows[p.Path] = p.Window
	}
	st.stall(2 * time.Millisecond) // many retransmission timeouts long
	n.run(2*time.Millisecond+20*time.Microsecond, func() bool { return false })
	for _, p := range pr.a.Telemetry() {
		if p.Window < windows[p.Path] {
			t.Errorf("path %d: window %d after the stall, %d before", p.Path, p.Window, windows[p.Path])
		}
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatal("the WRITE did not complete")
	}
	if pr.ra.done[0].Status != StatusOK || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatalf("completion %+v; data equal %v", pr.ra.done[0], bytes.Equal(src.Bytes(), dst.Bytes()))
	}
	stats := pr.a.SenderStats()
	if stats.Timeouts == 0 {
		t.Fatal("no path timed out: the stall tests nothing")
	}
	if stats.Spurious != stats.Timeouts {
		t.Fatalf("%d timeouts, %d found spurious; every one was", stats.Timeouts, stats.Spurious)
	}
	if resent := stats.Retransmits - stats.TailProbes - stats.Copies; resent > 1 {
		t.Errorf("%d packets resent besides %d tail probes and %d copies, for a stall that lost nothing; want at most 1",
			resent, stats.TailProbes, stats.Copies)
	}
	// The ACKs were late, not lost: the round trip they revealed, the
	// stall's length, is the floor of the connection's timeouts.
	if f := pr.a.snd.lateFloor(); f < 2*time.Millisecond {
		t.Errorf("timeout floor %v after a stall of 2ms, want at least the stall", f)
	}
	for _, p := range pr.a.Telemetry() {
		if p.Repaths != 0 || p.State != pathmgr.Good {
			t.Errorf("path %d: %d moves, %v; want none, GOOD", p.Path, p.Repaths, p.State)
		}
		if p.Timeouts > 0 && p.SpuriousTimeouts != p.Timeouts {
			t.Errorf("path %d: %d timeouts, %d spurious", p.Path, p.Timeouts, p.SpuriousTimeouts)
		}
	}
}

// A receiver stalls, and the ACKs it sent just before reach the sender
// late, held in a queue for up to 300 µs (a busy host, or an emulator
// that did not run). A path whose timeout comes soon after they arrive
// finds the peer heard, not quiet, though it answered nothing the path
// sent after them: that timeout resends one packet for the silence, not
// the path's window, which waits in the stalled peer's socket. At most two
// packets go again besides the tail probes and their copies: that one,
// and one a later timeout of the silence declares. Before, such a timeout
// resent its path's whole window.
func TestLateAnswersBeforeAStall(t *testing.T) {
	for _, before := range []time.Duration{60 * time.Microsecond, 100 * time.Microsecond} {
		for hold := time.Duration(0); hold <= 300*time.Microsecond; hold += 12 * time.Microsecond {
			n := newNet(t, twoHostFabric(2), Config{Paths: 8, Streams: 1, PlaceholderPayloads: false})
			pr := n.connect(0, 1)
			stalled := &stallingReceiver{sim: n.sim, ep: n.hosts[1].ep}
			n.fab.Host(1).Attach(stalled)
			late := &stallingReceiver{sim: n.sim, ep: n.hosts[0].ep}
			n.fab.Host(0).Attach(late)
			src, dst := postWrite(t, pr, 8<<20)
			n.run(before, func() bool { return false })
			stalled.stall(2 * time.Millisecond)
			late.stall(hold)
			if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
				t.Fatalf("%v, held %v: the WRITE did not complete", before, hold)
			}
			if pr.ra.done[0].Status != StatusOK || !bytes.Equal(src.Bytes(), dst.Bytes()) {
				t.Fatalf("%v, held %v: completion %+v; data equal %v", before, hold, pr.ra.done[0], bytes.Equal(src.Bytes(), dst.Bytes()))
			}
			st := pr.a.SenderStats()
			if resent := st.Retransmits - st.TailProbes - st.Copies; resent > 2 {
				t.Errorf("%v, held %v: %d packets resent besides %d tail probes and %d copies, %d timeouts; want at most 2",
					before, hold, resent, st.TailProbes, st.Copies, st.Timeouts)
			}
		}
	}
}

// heldReceiver stands in front of an endpoint and holds what arrives for
// it from from on, until release.
type heldReceiver struct {
	ep   link.Receiver
	from clock.Time
	held []link.Datagram
	done bool
}

func (h *heldReceiver) Receive(d *link.Datagram, at clock.Time) {
	if at < h.from || h.done {
		h.ep.Receive(d, at)
		return
	}
	kept := *d
	kept.Data = bytes.Clone(d.Data)
	h.held = append(h.held, kept)
}

// A receiver stalls for 2 ms and every path of its sender leaves service.
// The sender's host does not run for a while either: when it does, the
// peer's reply to a path's newest PROBE comes first, and the timers of the
// paths out of service fire with it, overdue, before the rest of the
// peer's answers are read. What those paths have in flight waits in the
// peer's socket, and their probes, due with its answers, declare none of
// it lost until the answers are in: at most two packets go again besides
// the tail probes and their copies. Before, each such probe declared lost
// what its path sent before that PROBE, every packet it had in flight.
func TestAnswersAfterAStallAwaitedOutOfService(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 8, Streams: 1, PlaceholderPayloads: false})
	pr := n.connect(0, 1)
	stalled := &stallingReceiver{sim: n.sim, ep: n.hosts[1].ep}
	n.fab.Host(1).Attach(stalled)
	src, dst := postWrite(t, pr, 8<<20)
	n.run(100*time.Microsecond, func() bool { return false })
	stalled.stall(2 * time.Millisecond)
	answers := &heldReceiver{ep: n.hosts[0].ep, from: stalled.until}
	n.fab.Host(0).Attach(answers)
	fired := -1 // paths whose timers fired with the newest PROBE_REPLY; -1 without one
	n.sim.At(stalled.until.Add(50*time.Microsecond), clock.Func(func() {
		answers.done = true
		newest := -1
		for i := range answers.held {
			var pkt proto.Packet
			if pkt.Decode(answers.held[i].Data) == nil && pkt.Type() == proto.TypeProbeReply {
				newest = i
			}
		}
		if newest < 0 {
			return
		}
		n.hosts[0].ep.Receive(&answers.held[newest], n.sim.Now())
		fired = 0
		for _, p := range pr.a.snd.paths {
			if p.State() == pathmgr.AssumedBad && p.inflight > 0 {
				p.onTimer()
				fired++
			}
		}
		for i := range answers.held {
			if i != newest {
				n.hosts[0].ep.Receive(&answers.held[i], n.sim.Now())
			}
		}
	}))
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatal("the WRITE did not complete")
	}
	if fired <= 0 {
		t.Fatalf("%d answers after the stall, %d paths out of service with packets in flight: the test tests nothing", len(answers.held), fired)
	}
	if pr.ra.done[0].Status != StatusOK || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatalf("completion %+v; data equal %v", pr.ra.done[0], bytes.Equal(src.Bytes(), dst.Bytes()))
	}
	st := pr.a.SenderStats()
	if resent := st.Retransmits - st.TailProbes - st.Copies; resent > 2 {
		t.Errorf("%d packets resent besides %d tail probes and %d copies, %d timeouts, %d paths' timers fired with the first answer; want at most 2",
			resent, st.TailProbes, st.Copies, st.Timeouts, fired)
	}
}

// TestLostAcksSetNoTimeoutFloor runs 64 and then 128 paths at 20% loss on
// every link, data and ACKs alike. Each path carries a packet every few
// round trips, so a lost ACK leaves its packet unreported until the path's
// next ACK, or a later one that repeats its record, after the path timed
// out. That timeout is found spurious, but the time from the packet to
// that ACK is no round trip, and nor is the time from an older packet to
// the arrival of the newest its record reports: the timeouts' floor stays
// near the fabric's round trip, and the end of the transfer does not wait
// hundreds of microseconds for a last loss. How many timeouts turn out
// spurious varies with the paths and the draw; the two runs have some.
func TestLostAcksSetNoTimeoutFloor(t *testing.T) {
	spurious := uint64(0)
	for _, paths := range []int{64, 128} {
		fc := fourPlanes()
		fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.2}
		fc.Uplink.Impair.Loss = &netem.RandomLoss{P: 0.2}
		n := newNet(t, fc, Config{Paths: paths, InboundCapacity: 45e9})
		pr := n.connect(0, 1)
		n.writeWhole(t, pr, 16<<20)
		st := pr.a.SenderStats()
		floor := pr.a.snd.lateFloor()
		t.Logf("%d paths: %d timeouts, %d spurious; timeout floor %v", paths, st.Timeouts, st.Spurious, floor)
		spurious += st.Spurious
		if floor > 50*time.Microsecond {
			t.Errorf("%d paths: timeout floor %v, want under 50us: lost ACKs are not late ones", paths, floor)
		}
	}
	if spurious == 0 {
		t.Fatal("no spurious timeout: the test tests nothing")
	}
}

// blackout drops everything that arrives for its endpoint between from
// and to: a fabric that carries nothing for a while, both ways alike as
// far as the sender can tell, since its peer then answers nothing.
type blackout struct {
	ep       link.Receiver
	from, to clock.Time
	dropped  int
}

func (b *blackout) Receive(d *link.Datagram, at clock.Time) {
	if at >= b.from && at < b.to {
		b.dropped++
		return
	}
	b.ep.Receive(d, at)
}

// A receiver that gets nothing for 200 µs, four base RTTs of timeouts,
// is silent as a stalled one is, but what was sent meanwhile is lost. The
// timeouts of the silence resend one packet; once the peer answers the
// probes again, what its answers do not report within half a timeout is
// declared lost and resent at once: the WRITE ends within two timeouts of
// the blackout-free run plus the blackout, and every resend beside the
// tail probes and their copies replaces a packet the blackout took.
func TestBlackoutIsResentOnceThePeerAnswers(t *testing.T) {
	for _, shape := range []struct{ planes, paths int }{{2, 4}, {2, 8}, {4, 1}, {1, 8}} {
		t.Run(fmt.Sprintf("%d paths on %d planes", shape.paths, shape.planes), func(t *testing.T) {
			took := map[time.Duration]time.Duration{}
			for _, dark := range []time.Duration{0, 200 * time.Microsecond} {
				var st SenderStats
				var dropped int
				took[dark], st, dropped = writeThroughBlackout(t, shape.planes, shape.paths, dark)
				if resent := st.Retransmits - st.TailProbes - st.Copies; dark > 0 && (resent > uint64(dropped) || st.Timeouts == 0) {
					t.Errorf("blackout %v: %d resent besides tail probes and copies, %d dropped, %d timeouts", dark, resent, dropped, st.Timeouts)
				}
			}
			limit := took[0] + 200*time.Microsecond + 2*defaultRTOMin
			if got := took[200*time.Microsecond]; got > limit {
				t.Errorf("with the blackout the WRITE took %v, %v without: want at most %v", got, took[0], limit)
			}
			t.Logf("%v without the blackout, %v with it", took[0], took[200*time.Microsecond])
		})
	}
}

// A blackout of 0.7 or 2 ms on connections with one path a plane: every
// path leaves service, and, its plane's only one, moves to a new source
// port while its packets wait in flight (routeSuspect). No ACK record of
// the new epoch reports them (spec section 6.3), so once the peer answers
// again the path's tail probe declares them lost (declarePassedEpochs);
// tail probes of new data alone, acknowledged, left them in flight until
// the receive window filled. The WRITE ends within five RTOMin of the
// blackout-free run plus the blackout; it took 10 ms more before.
func TestLongBlackoutWithAPathAPlane(t *testing.T) {
	for _, planes := range []int{1, 2, 4} {
		took := map[time.Duration]time.Duration{}
		for _, dark := range []time.Duration{0, 700 * time.Microsecond, 2 * time.Millisecond} {
			took[dark], _, _ = writeThroughBlackout(t, planes, planes, dark)
			if limit := took[0] + dark + 5*defaultRTOMin; took[dark] > limit {
				t.Errorf("%d planes, blackout %v: the WRITE took %v, %v without: want at most %v", planes, dark, took[dark], took[0], limit)
			}
		}
		t.Logf("%d planes: %v", planes, took)
	}
}

// writeThroughBlackout WRITEs 8 MiB over paths on planes, with nothing
// reaching the receiver for dark from 200 µs after the post. It returns
// how long the WRITE took, the sender's counters and how many datagrams
// the blackout took.
func writeThroughBlackout(t *testing.T, planes, paths int, dark time.Duration) (time.Duration, SenderStats, int) {
	t.Helper()
	n := newNet(t, twoHostFabric(planes), Config{Paths: paths, Streams: 1})
	pr := n.connect(0, 1)
	b := &blackout{ep: n.hosts[1].ep}
	n.fab.Host(1).Attach(b)
	src, dst := postWrite(t, pr, 8<<20)
	start := n.sim.Now()
	b.from, b.to = start.Add(200*time.Microsecond), start.Add(200*time.Microsecond+dark)
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatalf("%d paths on %d planes, blackout %v: the WRITE did not complete intact", paths, planes, dark)
	}
	return n.sim.Now().Sub(start), pr.a.SenderStats(), b.dropped
}

// fallingHintSetup is headStarved with its window full and every path
// sampled, and a function that hands the sender an ACK with no records and
// the given rate hint, as a receiver whose share moves sends.
func fallingHintSetup(t *testing.T) (*testNet, *sender, func(hint float64)) {
	t.Helper()
	n, pr := headStarved(t)
	s := &pr.a.snd
	if !n.run(time.Millisecond, func() bool { return everyPathSampled(s) && s.nextDSN-s.una == s.window }) {
		t.Fatal("the paths were not sampled, or the window did not fill")
	}
	ack := func(hint float64) {
		var pkt proto.Packet
		if err := proto.Build(&pkt, make([]byte, 256), proto.TypeAck, 0, 0); err != nil {
			t.Fatal(err)
		}
		pkt.Ack().SetCumDSN(s.una)
		pkt.Ack().SetRateHint(uint64(hint))
		s.onAck(&pkt, n.sim.Now())
	}
	return n, s, ack
}

// pathsInFlight returns two of s's paths with packets in flight.
func pathsInFlight(t *testing.T, s *sender) (*sendPath, *sendPath) {
	t.Helper()
	var busy []*sendPath
	for _, q := range s.paths {
		if q.inflight > 0 {
			busy = append(busy, q)
		}
	}
	if len(busy) < 2 {
		t.Fatalf("%d paths have packets in flight, want 2", len(busy))
	}
	return busy[0], busy[1]
}

// TestFallingHintKeepsTimersDue lets a path's packets go unanswered while
// ACKs come every 2 µs with the receiver's share a thousandth lower each
// time, as a share does that moves with its senders' backlogs. A fall of
// the share lengthens the drain time in the path's timeout, from when its
// timer was armed: the timer fires later than first set, and no later
// than last set. Armed again from every ACK, it was put off for as long
// as the share kept falling.
func TestFallingHintKeepsTimersDue(t *testing.T) {
	n, s, ack := fallingHintSetup(t)
	log := &traceLog{}
	s.c.ep.tracer = log
	hint := 2e8 // a share under which the drain time rules the timeouts
	ack(hint)
	p, _ := pathsInFlight(t, s)
	p.probed = true // its timer is the retransmission timeout, which counts all of the drain time
	p.armTimer(n.sim.Now())
	first := p.timer.Deadline()
	firedAt := func() (clock.Time, bool) {
		for _, ev := range log.evs {
			if ev.Kind == TraceTimer && ev.Path == int(p.ID()) {
				return ev.At, true
			}
		}
		return 0, false
	}
	last := first
	for i := 0; i < 200; i++ {
		if _, ok := firedAt(); ok {
			break
		}
		n.sim.RunFor(2 * time.Microsecond)
		hint *= 0.999
		ack(hint)
		if _, ok := firedAt(); !ok {
			last = p.timer.Deadline()
		}
	}
	at, ok := firedAt()
	if !ok {
		t.Fatalf("the path's timer did not fire within %v of its first deadline", n.sim.Now().Sub(first))
	}
	if last <= first {
		t.Errorf("the falling share left the timer at %v, want it later than %v: the drain time grew", last, first)
	}
	if at < first || at > last {
		t.Errorf("the timer fired at %v, want between its first deadline %v and its last %v", at, first, last)
	}
}

// TestFallingHintNeverBringsTimersForward acknowledges another path's
// packet and then lowers the share by a thousandth. The drain time in a
// retransmission timeout counts what is in flight now, less than when the
// timer was armed, so a timeout at the new share after the arming comes
// sooner; a fall of the share must only ever put the timer off.
func TestFallingHintNeverBringsTimersForward(t *testing.T) {
	n, s, ack := fallingHintSetup(t)
	hint := 2e8 // a share under which the drain time rules the timeouts
	ack(hint)
	p, q := pathsInFlight(t, s)
	p.probed = true // its timer is the retransmission timeout, which counts all of the drain time
	if d := s.drainTime(); d < 2*p.RTT.SRTT {
		t.Fatalf("the drain time %v does not rule a timeout with an SRTT of %v: the test would check nothing", d, p.RTT.SRTT)
	}
	p.armTimer(n.sim.Now())
	armed := p.timer.Deadline()
	n.sim.RunFor(time.Microsecond)
	q.resolveAcked(q.slot(q.oldest), n.sim.Now())
	q.advance()
	ack(hint * 0.999)
	if got := p.timer.Deadline(); got < armed {
		t.Errorf("a fall of the share brought the timer forward from %v to %v", armed, got)
	}
}
