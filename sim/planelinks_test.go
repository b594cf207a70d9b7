package sim

import (
	"math"
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

// Plane lines of a traffic file, and what is wrong with bad ones.
func TestParseTrafficPlanes(t *testing.T) {
	tr, err := ParseTraffic(strings.NewReader("planes 4\nplane 2 rate-gbps 50\nplane 3 delay 10us\n0->1 size 1"))
	if err != nil {
		t.Fatal(err)
	}
	if pl := tr.Fabric.PlaneLinks; len(pl) != 2 || pl[0] != (PlaneLink{Plane: 2, Rate: 50e9}) || pl[1] != (PlaneLink{Plane: 3, Delay: 10 * time.Microsecond}) {
		t.Fatalf("plane links %+v", pl)
	}
	for _, c := range []struct{ text, msg string }{
		{"plane 2 rate-gbps\n0->1 size 1", "want plane P rate-gbps R"},
		{"plane 9 rate-gbps 50\n0->1 size 1", `plane "9": want 0 to 7`},
		{"plane 1 speed 50\n0->1 size 1", "want rate-gbps or delay"},
		{"plane 1 delay 0\n0->1 size 1", "want a duration above 0"},
		{"planes 2\nplane 3 rate-gbps 50\n0->1 size 1", "plane 3: there are 2 planes"},
	} {
		if _, err := ParseTraffic(strings.NewReader(c.text)); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.text, err, c.msg)
		}
	}
}
