package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/pathmgr"
)

// traceLog keeps the events of one connection.
type traceLog struct {
	conn uint32
	evs  []TraceEvent
}

func (l *traceLog) Trace(ev TraceEvent) {
	if ev.Conn == l.conn || l.conn == 0 {
		l.evs = append(l.evs, ev)
	}
}

func (l *traceLog) count(k TraceKind, match func(TraceEvent) bool) int {
	n := 0
	for _, ev := range l.evs {
		if ev.Kind == k && (match == nil || match(ev)) {
			n++
		}
	}
	return n
}

// TestTracerSeesEveryDecision checks that the tracer hears of every packet
// the sender sends and of every transmission acknowledged or declared lost,
// as the counters count them, in time order. Every loss is resent unless
// its DSN was acknowledged another way.
func TestTracerSeesEveryDecision(t *testing.T) {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.02}
	log := &traceLog{}
	n := newNet(t, fc, Config{Paths: 8, Tracer: log, InboundCapacity: 10e9})
	pr := n.connect(0, 1)
	log.conn, log.evs = pr.a.ID(), nil
	const size = 8 << 20
	src := pr.ha.region(t, size, 3, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("the transfer did not complete intact")
	}
	st := pr.a.SenderStats()
	var acked, lost uint64
	for _, tel := range pr.a.Telemetry() {
		acked += tel.Acked
		lost += tel.Lost
	}
	if got := log.count(TraceSent, nil); uint64(got) != st.Packets {
		t.Errorf("%d sent events, %d packets sent", got, st.Packets)
	}
	if got := log.count(TraceSent, func(ev TraceEvent) bool { return ev.Retransmit }); uint64(got) != st.Retransmits {
		t.Errorf("%d resent events, %d retransmissions", got, st.Retransmits)
	}
	if got := log.count(TraceAcked, nil); uint64(got) != acked {
		t.Errorf("%d acked events, %d acknowledged", got, acked)
	}
	if got := log.count(TraceLost, nil); uint64(got) != lost || lost == 0 {
		t.Errorf("%d lost events, %d declared lost (2%% loss must lose some)", got, lost)
	}
	if log.count(TraceWindow, nil) == 0 || log.count(TraceHint, nil) == 0 {
		t.Error("no window or hint changes traced")
	}
	ackedAt := map[uint32]int{} // each DSN's first acknowledgment, by event index
	for i, ev := range log.evs {
		if i > 0 && ev.At < log.evs[i-1].At {
			t.Fatalf("event %d at %v, before event %d at %v", i, ev.At, i-1, log.evs[i-1].At)
		}
		if _, ok := ackedAt[ev.DSN]; ev.Kind == TraceAcked && !ok {
			ackedAt[ev.DSN] = i
		}
	}
	for i, ev := range log.evs {
		if ev.Kind != TraceLost {
			continue
		}
		if a, ok := ackedAt[ev.DSN]; ok && a < i {
			continue // delivered another way before this transmission was given up
		}
		resent := false
		for _, later := range log.evs[i+1:] {
			if later.Kind == TraceSent && later.DSN == ev.DSN && later.Retransmit {
				resent = true
				break
			}
		}
		if !resent {
			t.Fatalf("DSN %d lost on path %d (%v) at %v and never resent", ev.DSN, ev.Path, ev.Loss, ev.At)
		}
	}
	if s := log.evs[0].String(); !strings.Contains(s, "sent psn") {
		t.Errorf("the first event reads %q", s)
	}
}

// TestTracerSeesAPlaneFail checks that a failed plane's paths are traced
// going DOWN and back, and what they had in flight traced lost with the
// plane.
func TestTracerSeesAPlaneFail(t *testing.T) {
	skipUnderRace(t)
	fc := fourPlanes()
	fc.Faults = []netem.Fault{{At: 100 * time.Microsecond, Kind: netem.PlaneDown, Plane: 1},
		{At: time.Millisecond, Kind: netem.Repair, Plane: 1}}
	log := &traceLog{}
	n := newNet(t, fc, Config{Paths: 8, MPL: time.Millisecond, Tracer: log})
	pr := n.connect(0, 1)
	log.conn, log.evs = pr.a.ID(), nil
	const size = 64 << 20
	src := pr.ha.region(t, size, 5, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatal("not complete")
	}
	for _, path := range []int{1, 5} { // the paths on plane 1
		down := log.count(TracePath, func(ev TraceEvent) bool { return ev.Path == path && ev.To == pathmgr.Down })
		back := log.count(TracePath, func(ev TraceEvent) bool {
			return ev.Path == path && ev.From == pathmgr.AssumedBad && ev.To == pathmgr.Good
		})
		if down != 1 || back != 1 {
			t.Errorf("path %d: %d transitions to DOWN and %d back to GOOD, want 1 each", path, down, back)
		}
	}
	if log.count(TraceLost, func(ev TraceEvent) bool { return ev.Loss == LossPlaneDown }) == 0 {
		t.Error("nothing in flight was lost with the plane")
	}
	if log.count(TracePath, func(ev TraceEvent) bool { return ev.Path%4 != 1 }) != 0 {
		t.Error("a path on a healthy plane changed state")
	}
}

// countTracer counts events and keeps none.
type countTracer struct{ n int }

func (c *countTracer) Trace(TraceEvent) { c.n++ }

// TestTracerAllocatesNothing checks that with a tracer the engine still
// allocates nothing per packet. An event is a value handed over, not kept.
func TestTracerAllocatesNothing(t *testing.T) {
	skipUnderRace(t)
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.01}
	fc.MaxDatagram = 4160
	tr := &countTracer{}
	n := newNet(t, fc, Config{Paths: 8, Tracer: tr})
	pr := n.connect(0, 1)
	const size = 256 << 20
	src := pr.ha.region(t, size, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
	n.run(2*time.Millisecond, func() bool { return false })
	before := tr.n
	allocs := testing.AllocsPerRun(50, func() { n.run(20*time.Microsecond, func() bool { return false }) })
	if tr.n-before < 10000 {
		t.Fatalf("only %d events traced in the stretch", tr.n-before)
	}
	if allocs != 0 {
		t.Fatalf("%.2f allocations per 20 µs stretch with a tracer", allocs)
	}
}
