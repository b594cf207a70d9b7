package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/netem"
)

// Two connections whose only paths share one link each get half of it,
// both together and path by path. Where one of them has a second path
// over an idle link, both can have their whole line together, but fair
// sharing among paths gives the other half the shared link.
func TestRouteBoundsByHand(t *testing.T) {
	// Links: 0 and 1 the hosts' uplinks, 2 the shared link, 3 an idle one.
	capacity := []float64{100, 100, 100, 100}
	for _, c := range []struct {
		name         string
		conns        []boundConn
		together     float64
		fairA, fairB float64
	}{
		{"one shared link", []boundConn{{line: 100, paths: [][]int{{0, 2}}}, {line: 100, paths: [][]int{{1, 2}}}}, 0.5, 0.5, 0.5},
		{"one has a way around", []boundConn{{line: 100, paths: [][]int{{0, 2}, {0, 3}}}, {line: 100, paths: [][]int{{1, 2}}}}, 1, 1, 0.5},
		{"two paths on one route", []boundConn{{line: 100, paths: [][]int{{0, 2}, {0, 2}}}, {line: 100, paths: [][]int{{1, 2}}}}, 0.5, 2.0 / 3, 1.0 / 3},
	} {
		fair := pathFair(c.conns, capacity)
		if math.Abs(fair[0]-c.fairA) > 1e-9 || math.Abs(fair[1]-c.fairB) > 1e-9 {
			t.Errorf("%s: path-fair shares %v, want %g and %g", c.name, fair, c.fairA, c.fairB)
		}
		lower, upper, rates := together(c.conns, capacity, fair)
		if lower > c.together+1e-9 || lower < c.together*(1-TogetherTolerance) || upper < c.together-1e-9 {
			t.Errorf("%s: together %g .. %g, want %g within %g", c.name, lower, upper, c.together, TogetherTolerance)
		}
		checkCarries(t, c.name, c.conns, capacity, lower, rates)
	}
}

// On the fat tree of the Ultra Ethernet simulator's reference permutation
// (128 hosts, k = 8, host h to h + 64, 8 paths a connection, seed 1) the
// hashed routes let every flow have its whole line at once, as a linear
// program over the same routes finds (scipy's linprog, HiGHS). Shared
// fairly path by path, as windows run per path converge to, the same
// links leave the slowest flow 0.65 of its line (the same water-filling
// written independently). The routes are the same for any size of flow.
func TestRouteBoundsOfTheFatTreePermutation(t *testing.T) {
	f, err := os.Open("../testdata/traffic/fattree-permutation-16mb.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	traffic, err := ParseTraffic(f)
	if err != nil {
		t.Fatal(err)
	}
	for i := range traffic.Flows {
		traffic.Flows[i].Bytes = 64 << 10
	}
	traffic.Fabric.Bounds = true
	res, err := RunFlows(traffic.Fabric, traffic.Flows, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := res.Bounds
	if b == nil || len(b.PathFair) != 128 {
		t.Fatalf("bounds %+v, want 128 connections", b)
	}
	if b.Moved != 0 {
		t.Errorf("%d paths moved in a run without loss", b.Moved)
	}
	if b.Together < 1-TogetherTolerance || b.Together > 1 {
		t.Errorf("together %g, want 1 within %g", b.Together, TogetherTolerance)
	}
	if math.Abs(b.PathFair[0]-0.65) > 0.005 {
		t.Errorf("path-fair slowest %g, want 0.65", b.PathFair[0])
	}
	for _, s := range b.PathFair {
		if s > 1+1e-9 {
			t.Errorf("a path-fair share of %g is more than a line", s)
		}
	}
}

// On random routes the bounds keep their order: a fair share path by path
// is one way to carry every flow at once, so no connection's is above
// what all can have together unless every connection's is, and the
// computation's two bounds are within its tolerance.
func TestRouteBoundsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gaveUp := 0
	for trial := range 100 {
		links := 4 + rng.IntN(12)
		capacity := make([]float64, links)
		for l := range capacity {
			capacity[l] = float64(1 + rng.IntN(4))
		}
		conns := make([]boundConn, 1+rng.IntN(6))
		for i := range conns {
			conns[i].line = float64(1 + rng.IntN(4))
			for range 1 + rng.IntN(4) {
				route := []int{}
				for l := range links {
					if rng.IntN(3) == 0 {
						route = append(route, l)
					}
				}
				if len(route) == 0 {
					route = append(route, rng.IntN(links))
				}
				conns[i].paths = append(conns[i].paths, route)
			}
		}
		fair := pathFair(conns, capacity)
		lower, upper, rates := together(conns, capacity, fair)
		if upper < lower*(1-1e-9) {
			t.Fatalf("trial %d: together at least %g and at most %g", trial, lower, upper)
		}
		if least := slices.Min(fair); upper < least*(1-1e-9) {
			t.Fatalf("trial %d: together at most %g, below the path-fair shares' least %g, which all have at once", trial, upper, least)
		}
		if upper > lower*(1+TogetherTolerance) {
			gaveUp++
		}
		checkCarries(t, fmt.Sprint("trial ", trial), conns, capacity, lower, rates)
	}
	// Random routes of small, uneven capacities close slowly; the bounds
	// stay bounds, further apart.
	if gaveUp > 25 {
		t.Errorf("%d of 100 trials gave up before their bounds came within %g", gaveUp, TogetherTolerance)
	}
}

// checkCarries fails the test unless rates fit every link and give each
// connection at least share of its line.
func checkCarries(t *testing.T, name string, conns []boundConn, capacity []float64, share float64, rates [][]float64) {
	t.Helper()
	load := make([]float64, len(capacity))
	for i, c := range conns {
		carried := 0.0
		for k, route := range c.paths {
			if rates[i][k] < 0 {
				t.Fatalf("%s: connection %d path %d at %g", name, i, k, rates[i][k])
			}
			carried += rates[i][k]
			for _, l := range route {
				load[l] += rates[i][k]
			}
		}
		if carried < share*c.line*(1-1e-9) {
			t.Fatalf("%s: connection %d carries %g, under its share %g of %g", name, i, carried, share, c.line)
		}
	}
	for l, c := range capacity {
		if load[l] > c*(1+1e-9) {
			t.Fatalf("%s: link %d carries %g over its %g", name, l, load[l], c)
		}
	}
}

// Faults change the links while the flows run, and the bounds take one
// fabric: asked for both, the run says so.
func TestRouteBoundsRefuseFaults(t *testing.T) {
	o := DefaultFabric(2)
	o.Bounds = true
	o.Faults = []netem.Fault{{At: time.Microsecond, Kind: netem.PlaneDown, Plane: 1}}
	if _, err := RunFlows(o, Permutation(o.Hosts, 1, 4096), 0); err == nil || !strings.Contains(err.Error(), "faults") {
		t.Errorf("bounds with faults: %v", err)
	}
}
