package engine

import (
	"net/netip"
	"slices"
	"testing"
)

// Paths are dealt to planes in proportion to their ports' rates: of 14
// paths over ports of 50, 100, 100 and 100, the half-rate port gets 2 and
// the others 4 each, each run of 7 holds every plane, and the first goes
// on a full-rate port. A plane that
// sat out takes no run of paths on its return. With equal rates the
// endpoint deals in turn, as without rates.
func TestPathsDealtByPortRate(t *testing.T) {
	e := &Endpoint{cfg: Config{Planes: make([]netip.Addr, 4), PortRates: []float64{50, 100, 100, 100}}}
	if !e.unequalPorts() {
		t.Fatal("ports of 50 and 100 taken as equal")
	}
	all := []int{0, 1, 2, 3}
	count := make([]int, 4)
	var order []int
	for range 14 {
		p := e.dealByRate(all, nil)
		count[p]++
		order = append(order, p)
	}
	if !slices.Equal(count, []int{2, 4, 4, 4}) {
		t.Fatalf("dealt %v (in order %v), want 2, 4, 4, 4", count, order)
	}
	if order[0] == 0 {
		t.Errorf("the first path went on the half-rate port (in order %v)", order)
	}
	for _, run := range [][]int{order[:7], order[7:]} {
		for p := range 4 {
			if !slices.Contains(run, p) {
				t.Errorf("plane %d missing from the run %v", p, run)
			}
		}
	}
	// Plane 3 sits out for 12 paths, then returns: it takes its share
	// from then on, not the 3 or 4 it missed at once.
	for range 12 {
		if e.dealByRate([]int{0, 1, 2}, nil) == 3 {
			t.Fatal("a plane not known was dealt to")
		}
	}
	var back []int
	for range 7 {
		back = append(back, e.dealByRate(all, nil))
	}
	if n := len(slices.DeleteFunc(slices.Clone(back), func(p int) bool { return p != 3 })); n > 2 {
		t.Errorf("plane 3 took %d of the 7 paths after its return (%v), want its share of about 2", n, back)
	}

	equal := &Endpoint{cfg: Config{Planes: make([]netip.Addr, 4), PortRates: []float64{100, 100, 100, 100}}}
	if equal.unequalPorts() {
		t.Fatal("equal ports taken as unequal")
	}
	if none := (&Endpoint{cfg: Config{Planes: make([]netip.Addr, 4), PortRates: []float64{50, 100}}}); none.unequalPorts() {
		t.Fatal("ports with rates for two planes of four dealt by rate")
	}
}

// A connection with more paths than planes puts its whole rounds on every
// plane, and deals the rest by rate, each to a plane of its own: over 7
// connections of 6 paths on ports of 50, 100, 100 and 100, the 14 paths
// beyond the rounds go 2, 4, 4, 4.
func TestWholeRoundsOnEveryPlane(t *testing.T) {
	e := &Endpoint{cfg: Config{Planes: make([]netip.Addr, 4), PortRates: []float64{50, 100, 100, 100}}}
	rest := make([]int, 4)
	for range 7 {
		c := &Conn{ep: e, initiator: true, paths: 6, known: 0b1111, remote: make([]netip.Addr, 4)}
		planes := c.dealtPlanes()
		for p := range 4 {
			if planes(p) != p {
				t.Fatalf("path %d on plane %d: the first round goes on every plane", p, planes(p))
			}
		}
		if planes(4) == planes(5) {
			t.Fatalf("paths 4 and 5 both on plane %d", planes(4))
		}
		rest[planes(4)]++
		rest[planes(5)]++
	}
	if !slices.Equal(rest, []int{2, 4, 4, 4}) {
		t.Fatalf("the paths beyond the rounds went %v, want 2, 4, 4, 4", rest)
	}
}
