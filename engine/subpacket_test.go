package engine

import (
	"math"
	"testing"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/netem"
)

// TestWindowsUnderOnePacketHoldTheQueue: a connection of 64 paths crosses
// a 10 Gb/s link that marks at 32 KiB, while its receiver grants it its
// whole 100 Gb/s NIC, so its windows and not the hint must hold it to the
// link. A round trip there holds a few packets. Windows of a whole packet
// a path keep 64 in flight, most of them queued at the link whatever it
// marks; under one packet they follow the marks, and the queue stays near
// the threshold. The WRITE takes as long either way: the link is full.
func TestWindowsUnderOnePacketHoldTheQueue(t *testing.T) {
	run := func(whole bool) (queue int, took time.Duration) {
		wholePacketWindows = whole
		defer func() { wholePacketWindows = false }()
		fc := twoHostFabric(1)
		fc.Downlink.Rate = 10e9
		fc.Downlink.Queue.ECNThreshold = 32 << 10
		cfg := Config{Paths: 64, PortRates: []float64{portPayload}, InboundCapacity: portPayload}
		n := newNet(t, fc, cfg)
		var bottleneck *netem.Link
		for _, l := range n.fab.Links() {
			if l.Kind() == netem.Downlink && l.To() == 1 {
				bottleneck = l
			}
		}
		pr := n.connect(0, 1)
		start := n.sim.Now()
		pr.postWrite(t, 2048) // 8 MiB, 6.9 ms at 10 Gb/s
		// The queue's mean over the second half of the WRITE, read every
		// microsecond: the first windows' burst is long gone by then.
		from, next := start.Add(3500*time.Microsecond), start
		var sum, samples int
		done := func() bool {
			for now := n.sim.Now(); next <= now; next = next.Add(time.Microsecond) {
				if next >= from {
					sum += bottleneck.QueueBytes()
					samples++
				}
			}
			return len(pr.ra.done) == 1
		}
		if !n.run(time.Second, done) || pr.ra.done[0].Status != StatusOK {
			t.Fatalf("whole packets %v: the WRITE did not complete: %+v", whole, pr.ra.done)
		}
		return sum / max(samples, 1), n.sim.Now().Sub(start)
	}
	sub, subTook := run(false)
	whole, wholeTook := run(true)
	t.Logf("under one packet: the link's queue held %d KiB on average, the WRITE took %v; whole packets: %d KiB, %v",
		sub>>10, subTook, whole>>10, wholeTook)
	if sub*2 > whole {
		t.Errorf("the queue held %d KiB with windows under one packet and %d KiB with whole packets: want under half", sub>>10, whole>>10)
	}
	if subTook > wholeTook*21/20 {
		t.Errorf("the WRITE took %v with windows under one packet, %v with whole packets: want within 5%%", subTook, wholeTook)
	}
}

// The paths' windows fall under one packet only where the endpoint knows
// what its NIC sends, its ports' rates or else its OutboundCapacity, and
// the receiver sends hints and grants at least half of that. Where it
// grants less, its link is the bottleneck and its hint answers the queue
// there; without hints windows under a packet would not converge to fair
// shares; and without the NIC's rate, as on the kernel path, a gap would
// be as late as its timers.
func TestSubPacketWindowsOnlyUnderAHintOfTheNIC(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		nic  float64 // 0: not known, and never under one packet
	}{
		{"ports' rates", Config{PortRates: []float64{portPayload}, OutboundCapacity: 10 * portPayload}, portPayload},
		{"outbound capacity", Config{OutboundCapacity: portPayload}, portPayload},
		{"line rate alone", Config{LineRate: portPayload}, 0},
		{"nothing", Config{}, 0},
	} {
		c.cfg.Paths = 4
		n := newNet(t, twoHostFabric(1), c.cfg)
		pr := n.connect(0, 1)
		n.writeWhole(t, pr, 1<<20)
		s := &pr.a.snd
		for _, h := range []struct {
			hint float64
			want bool
		}{{portPayload, true}, {portPayload / 2, true}, {portPayload/2 - 1, false}, {math.Inf(1), false}} {
			s.hint = h.hint // +Inf: no hint
			want := h.want && c.nic > 0
			if got := s.subPacketWindows(); got != want {
				t.Errorf("%s: hint %.4g: windows under one packet %v, want %v", c.name, h.hint, got, want)
			}
		}
	}
}

// A window under one packet is raised to one at the next ACK record of its
// path where the receiver grants less than half of what the NIC sends, and
// left under one where it grants the NIC.
func TestWindowUnderOnePacketRaisedUnderAHintBelowTheNIC(t *testing.T) {
	for _, c := range []struct {
		inbound float64
		whole   bool
	}{{portPayload, false}, {portPayload / 4, true}} {
		n := newNet(t, twoHostFabric(1), Config{Paths: 1, PortRates: []float64{portPayload}, InboundCapacity: c.inbound})
		pr := n.connect(0, 1)
		n.writeWhole(t, pr, 64<<10) // an RTT sample and a hint
		p := pr.a.snd.paths[0]
		*p.cwin = *cc.NewWindow(cc.WindowParams{Initial: 0.25, Min: 1.0 / 16, Max: 64, G: 1.0 / 16}, p.next)
		p.windowChanged()
		pr.postWrite(t, 1)
		if !n.run(time.Second, func() bool { return len(pr.ra.done) == 2 }) || pr.ra.done[1].Status != StatusOK {
			t.Fatalf("inbound %.4g: the WRITE did not complete: %+v", c.inbound, pr.ra.done)
		}
		if got := p.cwin.Value(); (got >= 1) != c.whole {
			t.Errorf("a receiver granting %.4g of a NIC of %.4g: the window is %v after an ACK, want whole packets %v", c.inbound, float64(portPayload), got, c.whole)
		}
	}
}

// A path whose window is under one packet sends a packet a least RTT / W
// after its last. With one path, a quarter of a packet and nothing in
// flight, only its gap's end wakes the sender (waitForPort): each packet
// leaves a least RTT over its window after the one before, the window
// having grown by an eighth of a packet at the ACK between them.
func TestPathUnderOnePacketWakesItsSender(t *testing.T) {
	// Unpaced, so that the gap alone spaces the packets.
	n := newNet(t, twoHostFabric(1), Config{Paths: 1, PortRates: []float64{portPayload}, InboundCapacity: portPayload, NoPacing: true})
	pr := n.connect(0, 1)
	n.writeWhole(t, pr, 64<<10) // an RTT sample and a hint
	p := pr.a.snd.paths[0]
	*p.cwin = *cc.NewWindow(cc.WindowParams{Initial: 0.25, Min: 1.0 / 16, Max: 64, G: 1.0 / 16}, p.next)
	p.windowChanged()
	type send struct {
		at     clock.Time
		window float64
		rtt    time.Duration
	}
	var sends []send
	last := p.lastSent
	pr.postWrite(t, 5)
	if !n.run(time.Second, func() bool {
		if p.lastSent != last {
			last = p.lastSent
			sends = append(sends, send{last, p.cwin.Value(), p.RTT.Min})
		}
		return len(pr.ra.done) == 2
	}) || pr.ra.done[1].Status != StatusOK {
		t.Fatalf("the WRITE under one packet did not complete: %+v", pr.ra.done)
	}
	if len(sends) < 4 {
		t.Fatalf("%d sends seen, want at least 4", len(sends))
	}
	for i := 1; i < len(sends); i++ {
		// The gap of the window it left at, to the nanosecond the clock
		// rounds it to.
		gap := sends[i].at.Sub(sends[i-1].at)
		want := time.Duration(float64(sends[i].rtt) / sends[i].window)
		t.Logf("a packet %v after the last, at a window of %.3f and a least RTT of %v: want %v", gap, sends[i].window, sends[i].rtt, want)
		if gap < want || gap > want+time.Nanosecond {
			t.Errorf("a packet %v after the last: want %v", gap, want)
		}
	}
}
