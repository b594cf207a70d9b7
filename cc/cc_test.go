package cc

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// DCTCP's rules against hand-computed values.
func TestWindowRules(t *testing.T) {
	w := NewWindow(WindowParams{Initial: 10, Min: 1, Max: 100, G: 1.0 / 16}, 100)
	// Additive increase takes W=10 with 5 acked to 10.5.
	w.OnAck(5, 0, 99, 110)
	if !near(w.Value(), 10.5) {
		t.Fatalf("after 5 acks at W=10: %v, want 10.5", w.Value())
	}
	// A mark with alpha 1 halves the window, from 10.5 to 5.25.
	w.OnAck(1, 1, 101, 110)
	if !near(w.Value(), 5.25) {
		t.Fatalf("after the first mark: %v, want 5.25", w.Value())
	}
	// The round ended at PSN 100, which through 101 covers. Alpha becomes
	// 15/16 + 1/16 × (1 marked of 6 acked) = 0.9375 + 0.0104166.. = 0.947916..
	if want := 15.0/16 + 1.0/16*(1.0/6); !near(w.Alpha(), want) {
		t.Fatalf("alpha %v, want %v", w.Alpha(), want)
	}
	// PSN 110 was next at the cut. A mark on a packet sent before it, in
	// the new round, does not cut again: it tells of the queue the cut
	// answers.
	w.OnAck(1, 1, 102, 112)
	if !near(w.Value(), 5.25) {
		t.Fatalf("a mark of a packet sent before the cut cut again: %v, want 5.25", w.Value())
	}
	// Once a packet sent after the cut is acknowledged, a mark cuts again.
	want := 5.25 * (1 - w.Alpha()/2)
	w.OnAck(1, 1, 110, 112)
	if !near(w.Value(), want) {
		t.Fatalf("a mark after the cut's window: %v, want %v", w.Value(), want)
	}
	// More marks before PSN 112, next at that cut, do not cut again, and
	// unmarked acks grow.
	w.OnAck(1, 1, 111, 114)
	if !near(w.Value(), want) {
		t.Fatalf("a second mark in one window cut again: %v", w.Value())
	}
	w.OnAck(2, 0, 111, 114)
	if !near(w.Value(), want+2/want) {
		t.Fatalf("growth after marks: %v, want %v", w.Value(), want+2/want)
	}
	// A timeout trims to the minimum. The window is never below it or above
	// the maximum.
	w.OnTimeout()
	if w.Value() != 1 || w.Packets() != 1 {
		t.Fatalf("after a timeout: %v", w.Value())
	}
	for i := 0; i < 10000; i++ {
		w.OnAck(1, 0, 200, 300)
	}
	if w.Value() != 100 {
		t.Fatalf("capped at %v, want 100", w.Value())
	}
}

// TestCutOnceAWindowOfData checks that after a cut no mark cuts again
// until an ACK record covers the PSN that was next at the cut, whether or
// not a round ended meanwhile, across the PSNs' wrap.
func TestCutOnceAWindowOfData(t *testing.T) {
	start := uint32(0xFFFFFFF0) // the PSNs wrap at 2^32 within the test
	w := NewWindow(WindowParams{Initial: 16, Min: 1, Max: 100, G: 1.0 / 16}, start+4)
	// A mark mid-round, with PSN start+20 next: the round ends at start+4,
	// which this record does not cover.
	w.OnAck(1, 1, start+2, start+20)
	cut := w.Value()
	if !near(cut, 8) {
		t.Fatalf("first mark: %v, want 8", cut)
	}
	// The round ends (start+4 covered) and a new one runs to start+22, but
	// the records up to start+19 report packets sent before the cut.
	for psn := start + 4; psn != start+20; psn++ {
		w.OnAck(1, 1, psn, start+22)
		if w.Value() != cut {
			t.Fatalf("a mark of PSN %#x, sent before the cut, cut again: %v", psn, w.Value())
		}
	}
	// The record that covers start+20, the first packet sent after the
	// cut, may cut.
	alpha := w.Alpha()
	w.OnAck(1, 1, start+20, start+22)
	if want := cut * (1 - alpha/2); !near(w.Value(), want) {
		t.Fatalf("a mark after the cut's window: %v, want %v", w.Value(), want)
	}
}

// TestWindowUnderOnePacket checks the window below one packet: a mark cuts
// it as above one, down to Min and no lower; an unmarked report grows it
// by an eighth of a packet for each packet acknowledged, not 1/W; it
// spaces its path's packets by the round trip over W (Gap); a timeout
// leaves it where it is. Held to whole packets, it is raised to one and no
// cut takes it lower; released, marks take it under one again.
func TestWindowUnderOnePacket(t *testing.T) {
	if DefaultWindow.Min != 1.0/16 {
		t.Fatalf("the default window's floor is %v, want 1/16 of a packet", DefaultWindow.Min)
	}
	w := NewWindow(WindowParams{Initial: 1, Min: 1.0 / 16, Max: 64, G: 1.0 / 16}, 0)
	if w.Gap(10*time.Microsecond) != 0 {
		t.Fatalf("a window of one packet spaces its packets by %v, want 0", w.Gap(10*time.Microsecond))
	}
	// Alpha 1: the first mark halves the window, to half a packet, which
	// still lets one packet be in flight and sends it every 2 round trips.
	psn := uint32(0)
	w.OnAck(1, 1, psn, psn+1)
	if !near(w.Value(), 0.5) || w.Packets() != 1 || w.Gap(10*time.Microsecond) != 20*time.Microsecond {
		t.Fatalf("after the first mark: %v, %d packets, a gap of %v; want 0.5, 1 and 20µs", w.Value(), w.Packets(), w.Gap(10*time.Microsecond))
	}
	psn++
	w.OnAck(1, 0, psn, psn+1)
	if !near(w.Value(), 0.625) {
		t.Fatalf("an unmarked packet at half a packet: %v, want 0.625", w.Value())
	}
	// Marks cut it once a window of data, a packet here, down to Min.
	for range 100 {
		psn++
		want := max(1.0/16, w.Value()*(1-w.Alpha()/2))
		w.OnAck(1, 1, psn, psn+1)
		if !near(w.Value(), want) {
			t.Fatalf("a mark at PSN %d: %v, want %v", psn, w.Value(), want)
		}
	}
	if w.Value() != 1.0/16 || w.Gap(10*time.Microsecond) != 160*time.Microsecond {
		t.Fatalf("after many marks: %v and a gap of %v, want 1/16 and 160µs", w.Value(), w.Gap(10*time.Microsecond))
	}
	w.OnTimeout()
	if w.Value() != 1.0/16 {
		t.Fatalf("a timeout at 1/16 of a packet took the window to %v", w.Value())
	}
	// Held to whole packets, it is raised to one, and a mark leaves it there.
	w.WholePackets(true)
	if w.Value() != 1 {
		t.Fatalf("held to whole packets: %v, want 1", w.Value())
	}
	psn++
	w.OnAck(1, 1, psn, psn+1)
	if w.Value() != 1 || w.Gap(10*time.Microsecond) != 0 {
		t.Fatalf("a mark on a window held to whole packets: %v, a gap of %v; want 1 and 0", w.Value(), w.Gap(10*time.Microsecond))
	}
	// Released, the next mark takes it under one packet.
	w.WholePackets(false)
	psn++
	w.OnAck(1, 1, psn, psn+1)
	if w.Value() >= 1 {
		t.Fatalf("a mark on a released window of one packet: %v, want under 1", w.Value())
	}
	// A timeout takes a larger window to one packet, Min or no Min.
	w.Raise(10)
	w.OnTimeout()
	if w.Value() != 1 {
		t.Fatalf("a timeout at 10 packets: %v, want 1", w.Value())
	}
}

// Alpha converges to the marked fraction over rounds of steady marking.
func TestAlphaConverges(t *testing.T) {
	w := NewWindow(DefaultWindow, 0)
	psn := uint32(0)
	for round := 0; round < 200; round++ {
		for i := 0; i < 10; i++ {
			m := 0
			if i < 3 {
				m = 1
			}
			psn++
			w.OnAck(1, m, psn, psn+10)
		}
	}
	if math.Abs(w.Alpha()-0.3) > 0.01 {
		t.Fatalf("alpha %v after 200 rounds at 30%% marked", w.Alpha())
	}
}

func TestPacer(t *testing.T) {
	var p Pacer
	if ok, _ := p.Ready(0); !ok {
		t.Fatal("a new pacer is not ready")
	}
	p.Sent(0, 1000, 1e9) // 1000 bytes at 1 GB/s take 1 µs
	if ok, at := p.Ready(500); ok || at != 1000 {
		t.Fatalf("ready at %v", at)
	}
	p.Sent(1000, 1000, 1e9)
	if _, at := p.Ready(1000); at != 2000 {
		t.Fatalf("next at %v, want 2000", at)
	}
	// Idle time is not banked.
	p.Sent(10000, 1000, 1e9)
	if _, at := p.Ready(10000); at != 11000 {
		t.Fatalf("after idle: next at %v, want 11000", at)
	}
	p.Sent(11000, 1000, math.Inf(1))
	if ok, _ := p.Ready(11000); !ok {
		t.Fatal("unpaced sender held back")
	}
}

// A sender that waited for the pacer and ran late makes up the packets of
// the time it lost, back to back, up to the limit; one that was idle does
// not, and neither does a send after OnTime.
func TestPacerLate(t *testing.T) {
	burst := func(p *Pacer, now int64) int {
		n := 0
		for ok, _ := p.Ready(now); ok; ok, _ = p.Ready(now) {
			p.Sent(now, 1000, 1e9) // 1 µs a packet
			n++
		}
		return n
	}
	var p Pacer
	p.Sent(0, 1000, 1e9) // next at 1000
	p.Late(11000, time.Millisecond)
	if n := burst(&p, 11000); n != 11 {
		t.Fatalf("a wake 10 µs late sent %d packets at once, want 11: the 10 it owed and its own", n)
	}
	p.OnTime()
	if _, at := p.Ready(11000); at != 12000 {
		t.Fatalf("after the making up: next at %v, want 12000", at)
	}
	p.Late(1012000, 5*time.Microsecond) // a millisecond late, 5 µs made up
	if n := burst(&p, 1012000); n != 6 {
		t.Fatalf("a wake limited to 5 µs sent %d packets at once, want 6", n)
	}
	p.OnTime()
	var q Pacer
	q.Sent(0, 1000, 1e9)
	if n := burst(&q, 50000); n != 1 {
		t.Fatalf("a sender idle for 49 µs sent %d packets at once, want 1", n)
	}
}

func TestRate(t *testing.T) {
	// Two paths of 40 KB windows with RTTs of 10 µs and 20 µs give
	// 4e9 + 2e9 B/s, paced 1.25 × faster.
	got := Rate(WindowRate([]PathRate{{40000, 10 * time.Microsecond}, {40000, 20 * time.Microsecond}}), math.Inf(1))
	if !near(got, 7.5e9) {
		t.Fatalf("rate %v, want 7.5e9", got)
	}
	if got := Rate(WindowRate([]PathRate{{40000, 10 * time.Microsecond}, {40000, 20 * time.Microsecond}}), 1e9); got != 1e9 {
		t.Fatalf("hinted rate %v, want 1e9", got)
	}
	if got := Rate(WindowRate([]PathRate{{40000, 0}}), math.Inf(1)); !math.IsInf(got, 1) {
		t.Fatalf("no RTT sample: %v", got)
	}
	if got := Rate(WindowRate([]PathRate{{40000, 0}}), 1e9); got != 1e9 {
		t.Fatalf("no RTT sample, hinted: %v, want the hint", got)
	}
	// A path without a sample yet counts at the fastest sampled path's RTT,
	// not as nothing. That gives 4e9 + 4e9 + 2e9 B/s.
	got = Rate(WindowRate([]PathRate{{40000, 10 * time.Microsecond}, {40000, 0}, {40000, 20 * time.Microsecond}}), math.Inf(1))
	if !near(got, 12.5e9) {
		t.Fatalf("a path not yet sampled: rate %v, want 12.5e9", got)
	}
}

// Max-min fair shares against hand-computed values.
func TestWaterLevel(t *testing.T) {
	for _, c := range []struct {
		demands  []float64
		capacity float64
		level    float64
	}{
		{nil, 100, 100},
		{[]float64{1000, 1000, 1000, 1000}, 100, 25}, // four greedy get a quarter each
		{[]float64{10, 1000, 1000}, 100, 45},         // beside one small, the others split the rest
		{[]float64{10, 20, 1000}, 100, 70},           // two small
		{[]float64{10, 20, 30}, 100, 70},             // nobody greedy, so the largest may take 70
		{[]float64{50, 50}, 100, 50},                 // exactly full
		{[]float64{0, 0, 1000, 1000, 1000}, 90, 30},  // idle senders cost nothing
	} {
		if got := waterLevel(append([]float64(nil), c.demands...), c.capacity); !near(got, c.level) {
			t.Errorf("demands %v capacity %v: level %v, want %v", c.demands, c.capacity, got, c.level)
		}
	}
}

func TestAllocator(t *testing.T) {
	a := NewAllocator(AllocParams{Capacity: 1e9, Horizon: time.Microsecond})
	// Backlogs in bytes over a 1 µs horizon make 1 MiB about 1e12 B/s,
	// capped at the capacity, so the sender is greedy.
	if a.Share(1) != 1e9 {
		t.Fatal("a stranger's share is the capacity")
	}
	a.Observe(1, 1<<20, 4096, 0)
	if a.Share(1) != 1e9 {
		t.Fatalf("one sender: %v", a.Share(1))
	}
	a.Observe(2, 1<<20, 4096, 100)
	a.Observe(3, 1<<20, 4096, 200)
	a.Observe(4, 1<<20, 4096, 300)
	if a.Share(1) != 2.5e8 || a.Share(4) != 2.5e8 {
		t.Fatalf("four greedy senders: %v", a.Share(1))
	}
	// Sender 4 is done with 0 bytes left. It wants nothing, and the others
	// get a third each.
	if a.Observe(4, 0, 4096, 400) == false || !near(a.Share(1), 1e9/3) {
		t.Fatalf("a sender finishing: %v", a.Share(1))
	}
	// A sender paced at its share, here a 4 KiB packet every 12 µs, is not
	// forgotten between two packets, though the horizon is 1 µs.
	a.Observe(1, 1<<20, 4096, 10_000)
	if a.Senders() != 4 {
		t.Fatalf("senders between packets: %d", a.Senders())
	}
	// One silent for eight of its packets leaves.
	a.Observe(1, 1<<20, 4096, 200_000)
	if a.Senders() != 1 || a.Share(1) != 1e9 {
		t.Fatalf("after the others went silent: %d senders, share %v", a.Senders(), a.Share(1))
	}
	a.Leave(1)
	if a.Senders() != 0 {
		t.Fatal("Leave")
	}
}

// A demand that drifts by small steps still moves the allocation once it
// has moved by a tenth from what the allocation used.
func TestAllocatorFollowsDrift(t *testing.T) {
	a := NewAllocator(AllocParams{Capacity: 100e6, Horizon: time.Second})
	a.Observe(1, 1e9, 4096, 0) // greedy
	a.Observe(2, 10e6, 4096, 0)
	for d := 10e6; d <= 45e6; d *= 1.05 {
		a.Observe(2, uint64(d), 4096, 1)
	}
	if lv := a.Share(1); lv > 60e6 {
		t.Fatalf("level %v after sender 2's demand rose to ~45e6 in 5%% steps: want about 55e6", lv)
	}
}

// A sender's NIC is shared by demands given as rates. One connection held
// below the equal share by its receiver leaves the rest to the others.
func TestAllocatorObserveDemand(t *testing.T) {
	a := NewAllocator(AllocParams{Capacity: 100, Horizon: time.Second})
	a.ObserveDemand(1, math.Inf(1), 4096, 0) // no limit of its own, so the capacity
	a.ObserveDemand(2, 1000, 4096, 0)
	a.ObserveDemand(3, 10, 4096, 0)
	if !near(a.Share(1), 45) || !near(a.Share(2), 45) {
		t.Fatalf("shares %v %v, want 45: connection 3 uses 10", a.Share(1), a.Share(2))
	}
	if a.ObserveDemand(3, 1000, 4096, 1) == false || !near(a.Share(1), 100.0/3) {
		t.Fatalf("connection 3 greedy too: %v, want a third", a.Share(1))
	}
	a.Leave(2)
	if !near(a.Share(1), 50) {
		t.Fatalf("connection 2 left: %v, want half", a.Share(1))
	}
}

// A capacity that changes, as a receiver learns from its buffer's
// overflows, moves the level at once: the greedy share the new capacity,
// a demand above it counts as the capacity, and a greedy sender's next
// packet asks for a larger one.
func TestAllocatorSetCapacity(t *testing.T) {
	a := NewAllocator(AllocParams{Capacity: 100, Horizon: time.Second})
	a.ObserveDemand(1, math.Inf(1), 4096, 0)
	a.ObserveDemand(2, 30, 4096, 0)
	if !near(a.Share(1), 70) {
		t.Fatalf("share %v, want 70", a.Share(1))
	}
	if !a.SetCapacity(40) || !near(a.Share(1), 20) || a.Capacity() != 40 {
		t.Fatalf("at 40: share %v, capacity %v, want 20 and 40", a.Share(1), a.Capacity())
	}
	a.SetCapacity(1000)
	a.ObserveDemand(1, math.Inf(1), 4096, 1) // its next packet asks for the new capacity
	if !near(a.Share(1), 970) {
		t.Fatalf("at 1000: share %v, want 970", a.Share(1))
	}
}

// With Quiet set, as for a host's own NIC, a connection paced far below the
// level is not forgotten between two of its packets, as a receiver would
// forget a sender. It is forgotten only after Quiet.
func TestAllocatorQuiet(t *testing.T) {
	a := NewAllocator(AllocParams{Capacity: 1e9, Horizon: time.Microsecond, Quiet: time.Millisecond})
	a.ObserveDemand(1, 1e6, 4096, 0) // a 4 KiB packet every 4 ms
	a.ObserveDemand(2, 1e9, 4096, 0)
	a.ObserveDemand(2, 1e9, 4096, 500_000) // 0.5 ms on
	if a.Senders() != 2 {
		t.Fatalf("connection 1 forgotten after 0.5 ms of a 1 ms Quiet: %d left", a.Senders())
	}
	a.ObserveDemand(2, 1e9, 4096, 2_000_000)
	if a.Senders() != 1 {
		t.Fatalf("connection 1 kept after 2 ms of a 1 ms Quiet: %d left", a.Senders())
	}
}

// A Member is its id without the lookups. Two allocators fed the same
// packets, one by id and one through members, give the same shares at
// every step, through joining, expiring, joining again and leaving.
func TestAllocatorMemberIsItsID(t *testing.T) {
	byID := NewAllocator(AllocParams{Capacity: 1e9, Horizon: time.Microsecond})
	byMember := NewAllocator(AllocParams{Capacity: 1e9, Horizon: time.Microsecond})
	members := []*Member{byMember.Member(0), byMember.Member(1), byMember.Member(2)}
	step := func(what string, id, bytes int, now int64, leave bool) {
		t.Helper()
		m := members[id]
		var a, b bool
		switch {
		case leave:
			byID.Leave(uint32(id))
			m.Leave()
		default:
			a = byID.Observe(uint32(id), uint64(bytes), 4096, now)
			b = m.Observe(uint64(bytes), 4096, now)
		}
		if a != b || byID.Senders() != byMember.Senders() {
			t.Fatalf("%s: changed %v / %v, senders %d / %d", what, a, b, byID.Senders(), byMember.Senders())
		}
		for i, m := range members {
			if x, y := byID.Share(uint32(i)), m.Share(); x != y {
				t.Fatalf("%s: connection %d's share %v by id, %v as a member", what, i, x, y)
			}
		}
	}
	if members[0].Share() != 1e9 {
		t.Fatal("a member that never joined: not the whole capacity")
	}
	step("0 joins", 0, 1<<20, 0, false)
	step("1 joins", 1, 1<<20, 100, false)
	step("2 wants little", 2, 100, 200, false)
	step("2 greedy", 2, 1<<20, 300, false)
	step("0 and 1 expire", 2, 1<<20, 300_000, false)
	if byMember.Senders() != 1 {
		t.Fatalf("%d senders after two went silent", byMember.Senders())
	}
	step("0 joins again", 0, 1<<20, 300_100, false)
	step("2 leaves", 2, 0, 300_200, true)
	step("2 leaves again", 2, 0, 300_300, true)
	step("2 joins again", 2, 1<<20, 300_400, false)
}

// DCQCN's rules against hand-computed values.
func TestDCQCN(t *testing.T) {
	p := DefaultDCQCN(100e9 / 8) // 12.5 GB/s
	d := NewDCQCN(p, 0)
	if d.Rate(0) != 12.5e9 {
		t.Fatalf("start %v", d.Rate(0))
	}
	// The first CNP with alpha 1 halves, so rt = 12.5e9 and rc = 6.25e9.
	// Alpha becomes 255/256 + 1/256 = 1.
	d.OnCNP(0)
	if d.Rate(0) != 6.25e9 || d.alpha != 1 {
		t.Fatalf("after a CNP: rate %v alpha %v", d.Rate(0), d.alpha)
	}
	// 55 µs later alpha decays once, and one timer event recovers halfway,
	// so rc = (12.5e9 + 6.25e9) / 2.
	if got := d.Rate(55000); !near(got, 9.375e9) || !near(d.alpha, 255.0/256) {
		t.Fatalf("after 55 µs: rate %v alpha %v", got, d.alpha)
	}
	// Four more timer events of fast recovery approach the target.
	want := 9.375e9
	for i := 0; i < 4; i++ {
		want = (12.5e9 + want) / 2
	}
	if got := d.Rate(5 * 55000); !near(got, want) {
		t.Fatalf("after 5 events: %v, want %v", got, want)
	}
	// A second CNP cuts by alpha/2 from there.
	a := d.alpha
	r := d.Rate(5 * 55000)
	d.OnCNP(5 * 55000)
	if !near(d.Rate(5*55000), r*(1-a/2)) {
		t.Fatalf("second CNP: %v, want %v", d.Rate(5*55000), r*(1-a/2))
	}
	// After F = 5 timer events of fast recovery, the sixth is additive. The
	// target, the rate at the second CNP, grows by R_AI.
	t0 := int64(5 * 55000)
	target := d.rt
	for i := int64(1); i <= 5; i++ {
		d.Rate(t0 + i*55000)
	}
	if d.rt != target {
		t.Fatalf("fast recovery moved the target: %v, want %v", d.rt, target)
	}
	d.Rate(t0 + 6*55000)
	if !near(d.rt, target+p.RAI) {
		t.Fatalf("additive increase: target %v, want %v", d.rt, target+p.RAI)
	}
	// The floor holds.
	d3 := NewDCQCN(p, 0)
	for i := 0; i < 100; i++ {
		d3.OnCNP(0)
	}
	if d3.Rate(0) != p.MinRate {
		t.Fatalf("floor %v", d3.Rate(0))
	}
}

// A gap taken at a low rate shrinks when the rate rises.
func TestPacerFaster(t *testing.T) {
	var p Pacer
	p.Sent(0, 1000, 1) // 1000 bytes at 1 B/s take 1000 s
	p.Faster(1e9)
	if ok, at := p.Ready(1000); !ok || at != 1000 {
		t.Fatalf("after the rate rose: ready at %v", at)
	}
}

// An hour of idleness costs no work, and senseless parameters take defaults.
func TestDCQCNIdleAndParams(t *testing.T) {
	d := NewDCQCN(DefaultDCQCN(12.5e9), 0)
	d.OnCNP(0)
	start := time.Now()
	if r := d.Rate(int64(time.Hour)); r != 12.5e9 {
		t.Fatalf("after an hour: %v", r)
	}
	if time.Since(start) > time.Second {
		t.Fatal("an hour of idle time took seconds to apply")
	}
	z := NewDCQCN(DCQCNParams{LineRate: 1e9}, 0) // zero periods would loop forever
	z.OnCNP(0)
	if r := z.Rate(int64(time.Millisecond)); !(r > 0 && r <= 1e9) {
		t.Fatalf("defaulted parameters: rate %v", r)
	}
}

// A receiver recomputes its shares without allocating on the packets of
// senders whose demand moves, as a draining backlog does packet by packet.
func TestAllocatorRecomputesWithoutAllocating(t *testing.T) {
	// Every sender wants less than an equal share, 1 MiB over the horizon
	// being 10^10 bytes/s of 10^12. Each move of a demand moves the level.
	a := NewAllocator(AllocParams{Capacity: 1e12, Horizon: 100 * time.Microsecond})
	for id := uint32(0); id < 64; id++ { // an all-to-all of 65 hosts
		a.Observe(id, 1<<20, 4096, 0)
	}
	backlog := uint64(1 << 20)
	recomputed := 0
	if n := testing.AllocsPerRun(1000, func() {
		backlog = backlog * 7 / 8 // a tenth and more below the last, so recomputed
		if backlog < 4096 {
			backlog = 1 << 20
		}
		if a.Observe(3, backlog, 4096, 1) {
			recomputed++
		}
	}); n != 0 {
		t.Fatalf("%.1f allocations an observation", n)
	}
	if recomputed < 1000 {
		t.Fatalf("the shares changed on %d observations of 1,001: the test did not recompute on each", recomputed)
	}
}

// The allocator walks its flows as a list beside its map. Flows join, leave
// or expire, by id or as a member. The test uses the same ids both ways,
// which a connection should not do but which must not leave a flow in one
// and not the other. Through all of it the list holds exactly the map's
// flows, each knowing its place, and the level is the water level of the
// map's demands.
func TestAllocatorListIsTheMap(t *testing.T) {
	a := NewAllocator(AllocParams{Capacity: 1e9, Horizon: time.Microsecond})
	members := make([]*Member, 40)
	for i := range members {
		members[i] = a.Member(uint32(i))
	}
	rng := rand.New(rand.NewPCG(7, 8))
	now := int64(0)
	for op := 0; op < 5000; op++ {
		now += rng.Int64N(400)
		if rng.IntN(200) == 0 {
			now += 2_000_000 // a silence some flows do not survive
		}
		i := rng.IntN(len(members))
		bytes := uint64(rng.IntN(1 << 16))
		level, expired := a.level, a.lastExpire
		switch rng.IntN(6) {
		case 0:
			members[i].Leave()
		case 1:
			a.Leave(uint32(i))
		case 2, 3:
			a.Observe(uint32(i), bytes, 4096, now)
		default:
			members[i].Observe(bytes, 4096, now)
		}
		if len(a.active) != len(a.flows) {
			t.Fatalf("op %d: %d flows listed, %d in the map", op, len(a.active), len(a.flows))
		}
		var demands []float64
		for k, f := range a.active {
			if f.at != k || a.flows[f.id] != f || !f.in {
				t.Fatalf("op %d: flow %d listed at %d says %d, in the map %v", op, f.id, k, f.at, a.flows[f.id] == f)
			}
			demands = append(demands, f.used)
			quiet := max(int64(a.p.Horizon), int64(8*float64(f.bytes)/level*1e9))
			if a.lastExpire != expired && now-f.lastSeen > quiet {
				t.Fatalf("op %d: flow %d silent for %d ns survived an expiry (quiet %d)", op, f.id, now-f.lastSeen, quiet)
			}
		}
		if len(demands) > 0 && a.level != waterLevel(demands, a.p.Capacity) {
			t.Fatalf("op %d: level %v, the map's demands give %v", op, a.level, waterLevel(demands, a.p.Capacity))
		}
	}
}

// A grant grows a window by a packet for each packet acknowledged
// without a mark. A mark still cuts it, and without a grant the increase
// is additive. A hold stops additive increase, not a grant's.
func TestGrantGrowsAPacketPerPacket(t *testing.T) {
	p := WindowParams{Initial: 10, Min: 1, Max: 200, G: 1.0 / 16}
	psn := uint32(100)
	// round acknowledges one window of packets, the last one marked when
	// mark is set, and ends the round.
	round := func(w *Window, mark bool) {
		n := w.Packets()
		for i := 0; i < n; i++ {
			marked := 0
			if mark && i == n-1 {
				marked = 1
			}
			psn++
			w.OnAck(1, marked, psn, psn+uint32(n))
		}
	}
	for _, c := range []struct {
		name        string
		grant, hold bool
		mark        bool
		least, most float64 // the window after four rounds
	}{
		{"granted", true, false, false, 150, 200},
		{"granted, a mark a round", true, false, true, 1, 40},
		{"no grant", false, false, false, 10, 15},
		{"held", false, true, false, 10, 10},
		{"held, a mark a round", false, true, true, 1, 9},
		{"held and granted", true, true, false, 150, 200},
	} {
		w := NewWindow(p, psn+1)
		w.Grant(c.grant)
		w.Hold(c.hold)
		for range 4 {
			round(w, c.mark)
		}
		if v := w.Value(); v < c.least || v > c.most {
			t.Errorf("%s: window %.1f after four rounds, want %v to %v", c.name, v, c.least, c.most)
		}
	}
}
