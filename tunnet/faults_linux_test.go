package tunnet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/app/xfertest"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/tunnet"
)

// writer keeps WRITEs of one buffer in flight from host 0 to host 1 until
// stopped, and reads the connection's telemetry.
type writer struct {
	t *testing.T
	*xfertest.Pair
	out int // posted and not completed
}

func newWriter(t *testing.T, n *tunnet.Net, size int) *writer {
	t.Helper()
	a, b := openIn(t, n, 0, 4, 8), openIn(t, n, 1, 4, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pair, err := xfertest.Connect(ctx, a.Device(), b.Device(), b.Remote(), size, 4)
	if err != nil {
		t.Fatal(err)
	}
	return &writer{t: t, Pair: pair}
}

// keepBusy reaps completions, each of which must be OK, and posts WRITEs so
// that two are in flight.
func (w *writer) keepBusy() {
	wc := make([]endpoint.Completion, 8)
	k, err := w.CQ.Poll(wc)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, c := range wc[:k] {
		if c.Status != endpoint.StatusOK {
			w.t.Fatalf("completion %+v", c)
		}
		w.out--
	}
	for ; w.out < 2; w.out++ {
		if err := w.Post(1); err != nil {
			w.t.Fatal(err)
		}
	}
}

// drain waits for the WRITEs in flight.
func (w *writer) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wc := make([]endpoint.Completion, 8)
	for w.out > 0 {
		k, err := w.CQ.Wait(ctx, wc)
		if err != nil {
			w.t.Fatalf("%d WRITEs never completed: %v", w.out, err)
		}
		for _, c := range wc[:k] {
			if c.Status != endpoint.StatusOK {
				w.t.Fatalf("completion %+v", c)
			}
		}
		w.out -= k
	}
}

// onPlane sums the telemetry of the paths on plane p.
func onPlane(tel []endpoint.PathTelemetry, p int) (sent, ce uint64, states string) {
	for _, x := range tel {
		if x.Plane == p {
			sent += x.PacketsSent
			ce += x.CEMarks
			states += x.State.String()[:1]
		}
	}
	return sent, ce, states
}

// A plane is blackholed mid-transfer. Its links drop everything while the
// hosts' interfaces stay up, so only the transport can tell. The
// connection's paths on it time out and stop carrying data, and the WRITEs
// keep completing over the other planes. After the repair the plane's paths
// answer their probes and carry data again. The telemetry shows each step.
func TestBlackholedPlaneIsLeftAndRejoined(t *testing.T) {
	n := up(t, 2, 4, planes1G(0))
	w := newWriter(t, n, 4<<20)
	const plane = 1
	var steps []string
	last := ""
	watch := func(phase string, until func(sent uint64, states string) bool) uint64 {
		deadline := time.Now().Add(20 * time.Second)
		for {
			w.keepBusy()
			sent, _, states := onPlane(w.QP.Telemetry(), plane)
			if s := phase + ": " + states; s != last {
				steps = append(steps, fmt.Sprintf("%s (plane %d sent %d)", s, plane, sent))
				last = s
			}
			if until(sent, states) {
				return sent
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not reached in 20 s; steps %s", phase, strings.Join(steps, "; "))
			}
			time.Sleep(500 * time.Microsecond)
		}
	}
	watch("before", func(sent uint64, states string) bool { return sent > 200 }) // the plane carries data first
	n.Do(func(f *netem.Fabric) { f.ScheduleFault(0, netem.Fault{Kind: netem.PlaneBlackhole, Plane: plane}) })
	watch("blackholed", func(_ uint64, states string) bool { return !strings.ContainsAny(states, "GS") })
	var otherBefore uint64
	for p := 0; p < 4; p++ {
		if p != plane {
			s, _, _ := onPlane(w.QP.Telemetry(), p)
			otherBefore += s
		}
	}
	held := watch("blackholed", func(sent uint64, _ string) bool {
		var other uint64
		for p := 0; p < 4; p++ {
			if p != plane {
				s, _, _ := onPlane(w.QP.Telemetry(), p)
				other += s
			}
		}
		return other > otherBefore+2000 // the other planes carry on
	})
	n.Do(func(f *netem.Fabric) { f.ScheduleFault(0, netem.Fault{Kind: netem.Repair, Plane: plane}) })
	watch("repaired", func(sent uint64, states string) bool { return strings.Count(states, "G") == 2 && sent > held+200 })
	w.drain()
	t.Logf("plane %d's paths (G good, S skip, A assumed bad):\n%s", plane, strings.Join(steps, "\n"))
}

// ECN works end to end. A plane whose link to the receiver is slowed to
// 20 Mb/s, with step marking at a small queue, marks CE. The marks cross the
// receiving kernel, are counted by the receiver and come back in its ACKs,
// and the sender moves its traffic off that plane. The plane carries less
// than half as many packets as the others do on average, however fast the
// machine lets the sender go. The sender hears of at least 80% of the marks
// the slow link made, since the last ACKs may still be on their way, and
// never of more.
func TestCEMarksReachTheSenderAndSteerIt(t *testing.T) {
	fc := planes1G(0)
	const slow = 2
	fc.Overrides = []netem.Override{{Plane: slow, Match: netem.LinkMatch{Kind: netem.Downlink, Host: 2, Leaf: -1, Spine: -1},
		Link: netem.LinkConfig{Rate: 20e6, Delay: 5 * time.Microsecond, Queue: netem.QueueConfig{Limit: 4 << 20, ECNThreshold: 64 << 10}}}}
	n := up(t, 2, 4, fc)
	w := newWriter(t, n, 4<<20)
	deadline := time.Now().Add(20 * time.Second)
	var sent [4]uint64
	var ce [4]uint64
	for time.Now().Before(deadline) {
		w.keepBusy()
		var total uint64
		for p := range sent {
			sent[p], ce[p], _ = onPlane(w.QP.Telemetry(), p)
			total += sent[p]
		}
		if total > 20000 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.drain()
	var marked uint64
	n.Do(func(f *netem.Fabric) { marked = f.Downlink(slow, 2).Stats().CEMarks })
	var total uint64
	for _, s := range sent {
		total += s
	}
	t.Logf("packets per plane %v, CE marks reported per plane %v, marked by the slow link %d", sent, ce, marked)
	if marked == 0 || ce[slow] == 0 {
		t.Fatalf("the slow plane marked %d, the sender heard of %d", marked, ce[slow])
	}
	if others := float64(total-sent[slow]) / 3; float64(sent[slow]) > others/2 {
		t.Errorf("the slow plane carried %d packets, the others %.0f on average: the sender did not move off it", sent[slow], others)
	}
	if ce[slow] > marked || 5*ce[slow] < 4*marked {
		t.Errorf("the slow link marked %d packets, the sender heard of %d on that plane", marked, ce[slow])
	}
}
