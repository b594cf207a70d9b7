package engine

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// hostQueue stands for a sending host's own queue on its way out, a qdisc
// slower than the NIC behind it: datagrams leave at rate bytes a second,
// and one that finds limit bytes waiting is dropped. The drop is reported
// to the endpoint after the send, as the UDP driver reports ENOBUFS, unless
// silent is set, as a host that does not ask for send errors. With
// unreported above 0, that many drops in a row of every eight go
// unreported, as some of a real qdisc's do.
type hostQueue struct {
	link.Port
	fluidQueue
	sim        *clock.Sim
	ep         *Endpoint
	silent     bool
	unreported int
	drops      int
}

// fluidQueue is a queue that lets out rate bytes a second and holds limit
// bytes.
type fluidQueue struct {
	rate    float64
	limit   int
	backlog float64
	at      clock.Time
}

// admit takes size bytes at now. It reports how long they wait to leave,
// and whether they fit.
func (q *fluidQueue) admit(now clock.Time, size int) (time.Duration, bool) {
	q.backlog = math.Max(0, q.backlog-q.rate*now.Sub(q.at).Seconds())
	q.at = now
	if q.backlog+float64(size) > float64(q.limit) {
		return 0, false
	}
	q.backlog += float64(size)
	return time.Duration(q.backlog / q.rate * 1e9), true
}

func (q *hostQueue) Send(batch []link.Datagram) {
	for i := range batch {
		d := batch[i]
		wait, ok := q.admit(q.sim.Now(), d.Size())
		if !ok {
			q.drops++
			if !q.silent && q.drops%8 >= q.unreported {
				c := d
				c.Data = append([]byte(nil), d.Data...)
				q.sim.After(0, clock.Func(func() { q.ep.LocalDrop(&c) }))
			}
			continue
		}
		q.sim.After(wait, clock.Func(func() { q.Port.Send([]link.Datagram{d}) }))
	}
}

// localDropRun WRITEs 16 MiB from host 0, whose own queue lets out
// 1 GB/s and holds 64 KiB, to host 1 on a 100 Gb/s fabric, and returns the
// sender's statistics, its paths' timeouts and moves, and the queue.
func localDropRun(t *testing.T, silent bool) (SenderStats, uint64, uint64, *hostQueue) {
	return localDropRunWith(t, silent, Config{Paths: 8})
}

// localDropRunWith is localDropRun with the endpoints' configuration cfg.
func localDropRunWith(t *testing.T, silent bool, cfg Config) (SenderStats, uint64, uint64, *hostQueue) {
	return localDropRunUnreported(t, silent, 0, cfg)
}

// localDropRunUnreported is localDropRunWith with unreported drops of
// every eight left unreported (hostQueue).
func localDropRunUnreported(t *testing.T, silent bool, unreported int, cfg Config) (SenderStats, uint64, uint64, *hostQueue) {
	st, timeouts, moves, q, _ := writeThroughHostQueue(t, twoHostFabric(2), netip.Addr{}, &hostQueue{fluidQueue: fluidQueue{rate: 1e9, limit: 64 << 10},
		silent: silent, unreported: unreported}, cfg)
	return st, timeouts, moves, q
}

// A sender faster than its own host's queue on the way out, told of each
// datagram the host drops (link.LocalDropHandler), resends it at once,
// blames no path and cuts its rate, so the host drops a few packets, not a
// stream of them. Told nothing, the same sender keeps overflowing the
// queue, and its paths time out.
func TestLocalDropsSlowTheSender(t *testing.T) {
	told, toldTimeouts, toldMoves, q := localDropRun(t, false)
	silent, silentTimeouts, _, sq := localDropRun(t, true)
	t.Logf("told: %d packets, %d resent, %d dropped by the host, %d cuts, %d timeouts, %d moves", told.Packets, told.Retransmits, q.drops, told.HostCuts, toldTimeouts, toldMoves)
	t.Logf("silent: %d packets, %d resent, %d dropped by the host, %d timeouts", silent.Packets, silent.Retransmits, sq.drops, silentTimeouts)
	if told.LocalDrops == 0 || told.HostCuts == 0 || told.LocalDrops > uint64(q.drops) {
		t.Errorf("%d drops taken and %d cuts for %d dropped", told.LocalDrops, told.HostCuts, q.drops)
	}
	if toldTimeouts != 0 || toldMoves != 0 {
		t.Errorf("%d timeouts and %d moves: a host's drops blamed the paths", toldTimeouts, toldMoves)
	}
	if told.Retransmits*20 > told.Packets {
		t.Errorf("%d of %d packets resent: want under 5%%", told.Retransmits, told.Packets)
	}
	if silent.Retransmits < 5*told.Retransmits {
		t.Errorf("resent %d told and %d silent: want the silent host's at least 5 times", told.Retransmits, silent.Retransmits)
	}
}

// A plane whose own queue on the way out is slower, a qdisc of 1 Gb/s on
// plane 1 of two planes of 10 Gb/s, drops that plane's packets alone.
// Once its drops show the queue is its own, they limit that plane and not
// the connection: plane 0 carries the rest, the WRITE takes about what
// plane 0 alone would take, and the host drops few packets. Before, the
// connection's one rate was cut from its windows' rate, far above what
// its links let it send; the cuts did little, and the queue dropped a
// large share of plane 1's packets.
func TestSlowPlaneQueueHoldsBackItsPlaneAlone(t *testing.T) {
	fc := twoHostFabric(2)
	fc.Uplink.Rate, fc.Downlink.Rate = 10e9, 10e9
	slow := &hostQueue{fluidQueue: fluidQueue{rate: 1e9 / 8, limit: 64 << 10}}
	st, timeouts, moves, q, took := writeThroughHostQueue(t, fc, netem.Addr(1, 0), slow, Config{Paths: 8})
	ports := q.ep.ports
	t.Logf("%v: %d packets, %d resent, %d dropped by the host, %d connection cuts, %d plane cuts, plane 1's limit %.3g B/s, %d timeouts, %d moves",
		took, st.Packets, st.Retransmits, q.drops, st.HostCuts, st.PlaneCuts, ports.queue[1].host.limitRate, timeouts, moves)
	if !ports.queue[1].own || ports.queue[0].own || st.PlaneCuts == 0 {
		t.Errorf("plane queues found own: %v, %v, with %d plane cuts: want plane 1's alone", ports.queue[0].own, ports.queue[1].own, st.PlaneCuts)
	}
	if timeouts != 0 || moves != 0 {
		t.Errorf("%d timeouts and %d moves: a host's drops blamed the paths", timeouts, moves)
	}
	if d := q.drops; d*20 > int(st.Packets) {
		t.Errorf("%d of %d packets dropped by the host: want under 5%%", d, st.Packets)
	}
	// Plane 0 alone carries 16 MiB at 10 Gb/s in 13.4 ms of payload time.
	alone := time.Duration(16<<20) * time.Second / (10e9 / 8)
	if took > alone*11/10 {
		t.Errorf("the WRITE took %v: want under 1.1 times the %v plane 0 alone needs", took, alone)
	}
}

// A queue that both planes pass, of 1 Gb/s on two planes of 10 Gb/s,
// drops whichever plane's packets come when it is full. The connection's
// one rate holds the drops down at first. Over a long transfer, runs of
// drops on one plane alone come by chance, and a plane may come to count
// the queue as its own: its limit then holds it to its part of the queue,
// as flows share a link, and the transfer still goes at the queue's rate.
func TestSharedQueueOfTwoPlanes(t *testing.T) {
	fc := twoHostFabric(2)
	fc.Uplink.Rate, fc.Downlink.Rate = 10e9, 10e9
	shared := &hostQueue{fluidQueue: fluidQueue{rate: 1e9 / 8, limit: 64 << 10}}
	st, timeouts, moves, q, took := writeThroughHostQueue(t, fc, netip.Addr{}, shared, Config{Paths: 8})
	ports := q.ep.ports
	t.Logf("%v: %d packets, %d resent, %d dropped by the host, %d connection cuts, %d plane cuts, planes found own %v %v, %d timeouts, %d moves",
		took, st.Packets, st.Retransmits, q.drops, st.HostCuts, st.PlaneCuts, ports.queue[0].own, ports.queue[1].own, timeouts, moves)
	if st.HostCuts == 0 {
		t.Error("the connection's rate was never cut")
	}
	if d := q.drops; d*12 > int(st.Packets) || moves != 0 {
		t.Errorf("%d of %d packets dropped by the host, %d moves: want under 8%% and none", d, st.Packets, moves)
	}
	// The queue lets 16 MiB of payload out in 134 ms, and the packets'
	// headers take a few per cent more.
	ideal := time.Duration(16<<20) * time.Second / (1e9 / 8)
	if took > ideal*5/4 {
		t.Errorf("the WRITE took %v: want under 1.25 times the %v the queue needs", took, ideal)
	}
}

// The host's limit falls to a fraction of the rate sent at a drop, at most
// once a span and further for a drop soon after a cut, grows back fast to
// near the rate of the last drop and slowly beyond it while nothing drops,
// and goes once it is well above what the connection asks for. The rate
// sent is the limit or what the connection asked for; before a limit, what
// it was measured to send where that is less.
func TestHostRate(t *testing.T) {
	var h hostRate
	h.lift()
	ms := int64(time.Millisecond)
	near := func(got, want float64) bool { return math.Abs(got-want) <= want*1e-9 }
	// send sends at asked, or the limit where that is less, in steps of a
	// tenth of a span until to, and returns the last limit.
	var at int64
	send := func(to int64, asked float64) float64 {
		var got float64
		for ; at <= to; at += ms / 10 {
			got = h.limit(at, int(min(asked, h.limitRate)*1e-4), asked)
		}
		return got
	}
	if got := send(ms, 100e6); got != 100e6 {
		t.Fatalf("no limit before a drop: %v", got)
	}
	if !h.dropped(clock.Time(ms+ms/2)) || !near(h.limitRate, hostCut*100e6) {
		t.Fatalf("after a drop: limit %v, want %v", h.limitRate, hostCut*100e6)
	}
	if h.dropped(clock.Time(ms + 3*ms/4)) {
		t.Error("cut twice within a span")
	}
	if got := send(5*ms/2, 100e6); !near(got, hostNear*100e6) {
		t.Errorf("a span later: %v, want back to %v", got, hostNear*100e6)
	}
	if got := send(7*ms/2, 100e6); !near(got, hostNear*100e6*hostGrowth) {
		t.Errorf("two spans later: %v, want %v", got, hostNear*100e6*hostGrowth)
	}
	first := at
	if !h.dropped(clock.Time(first)) {
		t.Fatal("a drop a span after the cut not taken")
	}
	send(first+ms/2, 100e6)
	if h.dropped(clock.Time(at)) {
		t.Fatal("cut twice within a span")
	}
	send(first+ms+ms/2, 100e6)
	sent := min(h.limitRate, h.asked)
	if !h.dropped(clock.Time(at)) || !near(h.limitRate, sent*hostCutAgain) {
		t.Errorf("after a drop soon after a cut: %v, want %v of the %v sent", h.limitRate, hostCutAgain, sent)
	}
	for at += 2 * ms; h.limited(); {
		send(at+ms, 50e6)
		if at > 200*ms {
			t.Fatalf("still limited at %v by %v, asked 50e6", time.Duration(at), h.limitRate)
		}
	}

	// Windows that ask for more than the host lets the connection send set
	// no limit: the cut is from the rate measured, but from no less than a
	// quarter of the rate asked, as a span far below it was one the
	// connection spent waiting.
	send(at+5*ms, 40e6)
	h.asked = 100e6
	if !h.dropped(clock.Time(at)) || !near(h.limitRate, hostCut*40e6) {
		t.Errorf("asked 100e6, sending 40e6: a drop left %v, want %v", h.limitRate, hostCut*40e6)
	}
	h.lift()
	send(at+5*ms, 40e6)
	h.asked = 1e9
	if !h.dropped(clock.Time(at)) || !near(h.limitRate, hostCut*hostAskedShare*1e9) {
		t.Errorf("asked 1e9, sending 40e6: a drop left %v, want %v", h.limitRate, hostCut*hostAskedShare*1e9)
	}

	for i := 0; i < 100; i++ {
		h.dropped(clock.Time(at + int64(2*i+2)*ms))
	}
	if h.limitRate != hostFloor {
		t.Errorf("after a hundred cuts: %v, want the floor %v", h.limitRate, float64(hostFloor))
	}
}

// drainingHost stands for a host that drains its receive buffer slower
// than its link brings datagrams: they are read at rate bytes a second,
// and one that finds limit bytes waiting is lost. The loss is reported to
// the endpoint with the next datagram read, as the UDP driver reports
// SO_RXQ_OVFL, unless silent is set.
type drainingHost struct {
	fluidQueue
	sim    *clock.Sim
	ep     *Endpoint
	silent bool
	lost   int
	unsaid int
}

func (s *drainingHost) Receive(d *link.Datagram, at clock.Time) {
	wait, ok := s.admit(at, d.Size())
	if !ok {
		s.lost++
		s.unsaid++
		return
	}
	c := *d
	c.Data = append([]byte(nil), d.Data...)
	s.sim.After(wait, clock.Func(func() {
		if s.unsaid > 0 && !s.silent {
			s.ep.Overflowed(s.unsaid)
		}
		s.unsaid = 0
		s.ep.Receive(&c, s.sim.Now())
	}))
}

// overflowRun has 4 hosts WRITE 4 MiB each at once to host 0, which reads
// its receive buffer of 512 KiB at 20 Gb/s behind links of 100 Gb/s and
// was given no inbound capacity. It returns the senders' resends and
// timeouts, the receiver's statistics and the buffer.
func overflowRun(t *testing.T, silent bool) (resent, timeouts uint64, st EndpointStats, rx *drainingHost) {
	fc := twoHostFabric(2)
	fc.Hosts = 5
	n := newNet(t, fc, Config{Paths: 8})
	rx = &drainingHost{fluidQueue: fluidQueue{rate: 2.5e9, limit: 512 << 10}, sim: n.sim, ep: n.hosts[0].ep, silent: silent}
	n.fab.Host(0).Attach(rx)
	var pairs []*pair
	var srcs, dsts []*memreg.Region
	for h := 1; h <= 4; h++ {
		pr := n.connect(h, 0)
		src := pr.ha.region(t, 4<<20, uint64(h), memreg.LocalWrite)
		dst := pr.hb.region(t, 4<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
		if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 4 << 20}, RKey: dst.Key()}); err != nil {
			t.Fatal(err)
		}
		pairs, srcs, dsts = append(pairs, pr), append(srcs, src), append(dsts, dst)
	}
	done := func() bool {
		for _, pr := range pairs {
			if len(pr.ra.done) == 0 {
				return false
			}
		}
		return true
	}
	if !n.run(10*time.Second, done) {
		t.Fatal("the WRITEs did not complete")
	}
	for i, pr := range pairs {
		if pr.ra.done[0].Status != StatusOK || digest(srcs[i].Bytes()) != digest(dsts[i].Bytes()) {
			t.Fatalf("sender %d: %+v, or its data differs", i+1, pr.ra.done[0])
		}
		resent += pr.a.SenderStats().Retransmits
		for _, p := range pr.a.Telemetry() {
			timeouts += p.Timeouts
		}
	}
	return resent, timeouts, n.hosts[0].ep.Stats(), rx
}

// A receiver that drains slower than its senders send, and learns of what
// its full receive buffer lost (link.OverflowHandler), lowers the inbound
// capacity its rate hints share to what it drains, though it was given
// none: the senders slow down and resend a little. Told nothing, it gives
// no hints, and the senders keep overflowing it.
func TestOverflowsTeachTheInboundCapacity(t *testing.T) {
	toldResent, toldTimeouts, st, rx := overflowRun(t, false)
	silentResent, silentTimeouts, _, srx := overflowRun(t, true)
	t.Logf("told: %d resent, %d timeouts, %d lost in the buffer, %d cuts", toldResent, toldTimeouts, rx.lost, st.CapacityCuts)
	t.Logf("silent: %d resent, %d timeouts, %d lost in the buffer", silentResent, silentTimeouts, srx.lost)
	if st.Overflows != uint64(rx.lost) || st.CapacityCuts == 0 {
		t.Errorf("%d overflows counted and %d cuts for %d lost", st.Overflows, st.CapacityCuts, rx.lost)
	}
	if toldTimeouts != 0 || toldResent*5 > silentResent {
		t.Errorf("resent %d told, %d timeouts, and %d silent: want no timeout and the silent receiver's resends at least 5 times", toldResent, toldTimeouts, silentResent)
	}
}

// In baseline mode a packet the host dropped is gone back to, as for a
// NAK, and the transfer completes.
func TestLocalDropsInBaselineMode(t *testing.T) {
	st, timeouts, _, q := localDropRunWith(t, false, Config{Paths: 1, Mode: proto.ModeBaseline})
	t.Logf("%d packets, %d resent, %d dropped by the host, %d timeouts", st.Packets, st.Retransmits, q.drops, timeouts)
	if st.LocalDrops == 0 {
		t.Errorf("%d drops taken for %d dropped", st.LocalDrops, q.drops)
	}
}

// A host that reports half of its drops and loses the rest in silence, as
// a real qdisc loses some, loses them in runs on one path at a time. That
// path's loss stands out, but it is the host's: no path moves to a new
// route while the host's drops limit the rate (docs/cc.md). Without the
// rule two paths move.
func TestUnreportedHostDropsMoveNoPath(t *testing.T) {
	st, timeouts, moves, q := localDropRunUnreported(t, false, 4, Config{Paths: 8})
	t.Logf("%d packets, %d resent, %d dropped by the host (%d reported), %d timeouts, %d moves", st.Packets, st.Retransmits, q.drops, st.LocalDrops, timeouts, moves)
	if st.LocalDrops == 0 || st.LocalDrops == uint64(q.drops) {
		t.Fatalf("%d of %d drops reported: want some and not all", st.LocalDrops, q.drops)
	}
	if moves != 0 || st.LossRepaths != 0 {
		t.Errorf("%d moves, %d for loss: a host's drops moved paths", moves, st.LossRepaths)
	}
}

// In the authenticated mode too, the sender opens each datagram its host
// hands back as dropped and resends it at once, blaming no path.
func TestLocalDropsInTheAuthenticatedMode(t *testing.T) {
	psk, _ := credentialPair(t, auth.MethodPSK, 0)
	told, timeouts, moves, q := localDropRunWith(t, false, Config{Paths: 8, Auth: psk})
	if told.LocalDrops == 0 || told.LocalDrops > uint64(q.drops) || timeouts != 0 || moves != 0 {
		t.Errorf("%d drops taken for %d dropped, %d timeouts, %d moves", told.LocalDrops, q.drops, timeouts, moves)
	}
}

// A plane's own limit grows while the plane sends at it, even one so slow
// that a span holds a single packet, and stays where it is while the plane
// sends well below it: a limit that grew unused would not stop the next
// burst.
func TestPlaneLimitGrowsOnlyWhileItBinds(t *testing.T) {
	n := newNICPorts(2, nil, 4096)
	q := &n.queue[1]
	q.own = true
	q.host.cutFrom(0, 2e6)
	start := q.host.limitRate
	now := clock.Time(0)
	for now < clock.Time(200*time.Millisecond) {
		now = now.Add(time.Duration(4096 / q.host.limitRate * 1e9)) // one packet at the limit
		n.sent(1, 4096, now)
	}
	grown := q.host.limitRate
	if grown < 2*start {
		t.Errorf("sent at the limit for 200 ms: limit %.3g from %.3g, want it at least doubled", grown, start)
	}
	for end := now.Add(200 * time.Millisecond); now < end; {
		now = now.Add(time.Duration(4 * 4096 / grown * 1e9)) // at a quarter of it
		n.sent(1, 4096, now)
	}
	if q.host.limitRate != grown {
		t.Errorf("sent at a quarter of the limit: limit %.3g, want it held at %.3g", q.host.limitRate, grown)
	}
	if !n.ready(0, now) || n.limited(0) {
		t.Error("plane 0, whose queue is not its own, is held back")
	}
}
