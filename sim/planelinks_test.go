package sim

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// A plane with links of its own rate counts at that rate in a host's
// capacity, and its links run at it: one 8 MiB flow over 2 planes, one at
// half rate, takes about as long as 1.5 planes take it. A plane with a
// longer delay changes the capacity in nothing.
func TestPlaneLinks(t *testing.T) {
	o := DefaultFabric(2)
	o.Hosts = 2
	flows := []Flow{{Src: 0, Dst: 1, Bytes: 8 << 20}}
	even, err := RunFlows(o, flows, 0)
	if err != nil {
		t.Fatal(err)
	}
	o.PlaneLinks = []PlaneLink{{Plane: 1, Rate: 50e9}}
	half, err := RunFlows(o, flows, 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(half.HostCapacity/even.HostCapacity-0.75) > 1e-9 {
		t.Fatalf("capacity %v against %v, want 0.75 of it", half.HostCapacity, even.HostCapacity)
	}
	if r := float64(half.FCT[0]) / float64(even.FCT[0]); r < 1.2 || r > 1.6 {
		t.Errorf("the flow took %v with a plane at half rate, %v without: %.2fx, want about 1.33x", half.FCT[0], even.FCT[0], r)
	}
	o.PlaneLinks = []PlaneLink{{Plane: 1, Delay: 10 * time.Microsecond}}
	long, err := RunFlows(o, flows, 0)
	if err != nil {
		t.Fatal(err)
	}
	if long.HostCapacity != even.HostCapacity || long.FCT[0] <= even.FCT[0] {
		t.Errorf("a longer plane: capacity %v (want %v), FCT %v (want above %v)", long.HostCapacity, even.HostCapacity, long.FCT[0], even.FCT[0])
	}
}

// An all-to-all of one-path connections over 4 planes, one at half rate,
// keeps 0.9 of the capacity that remains: each host deals its paths to
// the planes in proportion to their ports' rates, so the half-rate plane
// carries a seventh of the connections, 3 of each host's 21. Dealt in
// turn, a quarter of them sat on it at half the others' rate, and the run
// waited for them.
func TestOnePathConnectionsShareAHalfRatePlane(t *testing.T) {
	o := DefaultPlanes()
	o.Fabric.Hosts, o.Fabric.Paths, o.FlowBytes, o.Planes = 22, 1, 256<<10, []int{4}
	o.Fabric.PlaneLinks = []PlaneLink{{Plane: 0, Rate: 50e9}}
	res, err := Planes(o)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Rows[0]; r.OfCapacity < 0.9 {
		t.Errorf("%.3f of the capacity that remains, want at least 0.9 (FCT p50 %v, p99 %v)", r.OfCapacity, r.FCTP50, r.FCTP99)
	}
}

// Plane lines of a traffic file, and what is wrong with bad ones.
func TestParseTrafficPlanes(t *testing.T) {
	tr, err := ParseTraffic(strings.NewReader("planes 4\nplane 2 rate-gbps 50\nplane 3 delay 10us\nplane 1 buffer-kib 64\n0->1 size 1"))
	if err != nil {
		t.Fatal(err)
	}
	if pl := tr.Fabric.PlaneLinks; len(pl) != 3 || pl[0] != (PlaneLink{Plane: 2, Rate: 50e9}) || pl[1] != (PlaneLink{Plane: 3, Delay: 10 * time.Microsecond}) ||
		pl[2] != (PlaneLink{Plane: 1, Buffer: 64 << 10}) {
		t.Fatalf("plane links %+v", pl)
	}
	for _, c := range []struct{ text, msg string }{
		{"plane 2 rate-gbps\n0->1 size 1", "want plane P rate-gbps R"},
		{"plane 9 rate-gbps 50\n0->1 size 1", `plane "9": want 0 to 7`},
		{"plane 1 speed 50\n0->1 size 1", "want rate-gbps, delay or buffer-kib"},
		{"plane 1 buffer-kib 2\n0->1 size 1", "plane 1 buffer of 2048 bytes: want at least one full packet"},
		{"plane 1 delay 0\n0->1 size 1", "want a duration above 0"},
		{"planes 2\nplane 3 rate-gbps 50\n0->1 size 1", "plane 3: there are 2 planes"},
	} {
		if _, err := ParseTraffic(strings.NewReader(c.text)); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.text, err, c.msg)
		}
	}
}

// A plane whose switch queues hold less drops where the fabric's do not:
// an 8:1 incast over 2 planes resends nothing with 16 MiB queues, and
// resends what overflows when plane 1's hold 64 KiB; every flow completes.
func TestPlaneBuffer(t *testing.T) {
	o := DefaultFabric(2)
	o.Hosts = 9
	var flows []Flow
	for h := 1; h < 9; h++ {
		flows = append(flows, Flow{Src: h, Dst: 0, Bytes: 4 << 20})
	}
	deep, err := RunFlows(o, flows, 0)
	if err != nil {
		t.Fatal(err)
	}
	o.PlaneLinks = []PlaneLink{{Plane: 1, Buffer: 64 << 10}}
	shallow, err := RunFlows(o, flows, 0)
	if err != nil {
		t.Fatal(err)
	}
	if deep.Retransmits != 0 || shallow.Retransmits == 0 || deep.Failed+shallow.Failed != 0 {
		t.Fatalf("resent %d with deep queues and %d with plane 1's of 64 KiB, %d and %d flows failed: want none, some, and no failures",
			deep.Retransmits, shallow.Retransmits, deep.Failed, shallow.Failed)
	}
}

// With StartJitter each flow is posted at its Start plus a time from the
// seed within the jitter: different seeds give different starts, the same
// seed the same. Without it every flow is posted at its Start.
func TestStartJitter(t *testing.T) {
	o := DefaultFabric(1)
	o.Hosts = 8
	var flows []Flow
	for h := 1; h < 8; h++ {
		flows = append(flows, Flow{Src: h, Dst: 0, Bytes: 64 << 10, Start: 5 * time.Microsecond})
	}
	starts := func(seed uint64, jitter time.Duration) []time.Duration {
		o.Seed, o.StartJitter = seed, jitter
		r, err := RunFlows(o, flows, 0)
		if err != nil || r.Failed != 0 {
			t.Fatalf("seed %d: %v, %d failed", seed, err, r.Failed)
		}
		return r.Started
	}
	for i, s := range starts(1, 0) {
		if s != flows[i].Start {
			t.Fatalf("no jitter: flow %d posted at %v, want %v", i, s, flows[i].Start)
		}
	}
	const jitter = 10 * time.Microsecond
	a, b, again := starts(1, jitter), starts(2, jitter), starts(1, jitter)
	if !slices.Equal(a, again) || slices.Equal(a, b) {
		t.Fatalf("seed 1 %v, seed 2 %v, seed 1 again %v: want seed 1 twice the same and seed 2 apart", a, b, again)
	}
	for i, s := range append(a, b...) {
		if s < flows[i%len(flows)].Start || s >= flows[i%len(flows)].Start+jitter {
			t.Errorf("flow %d posted at %v, want within [%v, %v)", i%len(flows), s, flows[i%len(flows)].Start, flows[i%len(flows)].Start+jitter)
		}
	}
}
