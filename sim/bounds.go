package sim

import (
	"fmt"
	"math"
	"net/netip"
	"slices"

	"github.com/mroce/mroce/netem"
)

// What a run's routes allow its connections, whatever their congestion
// control does. A switch hashes each path's source port onto one of its
// links (spec section 6.3), so a connection of a few paths may find some
// of them on busy links and the rest on idle ones. Two rates frame what a
// controller makes of that: the most that every connection can carry at
// once, splitting its traffic over its paths as it likes, a ceiling for
// connections that start together and keep their routes; and what each
// gets where every link is shared max-min fairly among the paths that
// cross it, each path on its own, the static share that windows run per
// path and not per connection tend to (docs/results.md, "The permutation
// of 16 MB").

// RouteBounds are the rates the routes of a run's paths allow its
// connections, each as a share of the connection's line: the rates of its
// source host's uplinks, summed over the planes.
type RouteBounds struct {
	// Together is the largest share of its line that every connection can
	// carry at once, each splitting its traffic over its paths' routes as
	// it likes (a maximum concurrent flow). It is a feasible share, and
	// the optimum lies between it and TogetherMax, which are within
	// TogetherTolerance of each other unless the computation gave up.
	Together, TogetherMax float64
	// PathFair is each connection's share where every link is shared
	// max-min fairly among the paths that cross it, each path on its own,
	// sorted from the least. It is a static share, not a ceiling: flows
	// that end early leave their links to the others.
	PathFair []float64
	// Moved counts the paths that moved to another source port during the
	// run. The bounds take every path's last route.
	Moved int
}

// TogetherTolerance is how far below the optimum RouteBounds.Together may
// be.
const TogetherTolerance = 0.005

// boundConn is one connection's demand and its paths' routes, each a list
// of link indexes.
type boundConn struct {
	line  float64 // bits/s
	paths [][]int
}

// routeBounds reads each connection's paths and their routes at the end of
// a run and bounds what those routes allow.
func (r *flowRun) routeBounds() (*RouteBounds, error) {
	fab := r.w.fab
	index := map[*netem.Link]int{}
	var capacity []float64
	linkIndex := func(l *netem.Link) int {
		i, ok := index[l]
		if !ok {
			i = len(capacity)
			index[l] = i
			capacity = append(capacity, float64(l.Rate()))
		}
		return i
	}
	var conns []boundConn
	moved := 0
	for _, pair := range r.order {
		c := r.conns[pair]
		bc := boundConn{}
		for p := range r.o.Planes {
			bc.line += float64(fab.Uplink(p, pair.src).Rate())
		}
		for _, t := range c.Telemetry() {
			if !c.RemoteAddr(t.Plane).IsValid() {
				continue // no address of the peer on that plane, so no route to name
			}
			src := netip.AddrPortFrom(netem.Addr(t.Plane, pair.src), t.SrcPort)
			dst := netip.AddrPortFrom(c.RemoteAddr(t.Plane), c.RemotePort())
			route := fab.Route(src, dst)
			if route == nil {
				return nil, fmt.Errorf("bounds: path %d of %d->%d: no route from %v to %v", t.Path, pair.src, pair.dst, src, dst)
			}
			links := make([]int, len(route))
			for i, l := range route {
				links[i] = linkIndex(l)
			}
			bc.paths = append(bc.paths, links)
			if t.Repaths > 0 {
				moved++
			}
		}
		if len(bc.paths) > 0 {
			conns = append(conns, bc)
		}
	}
	fair := pathFair(conns, capacity)
	b := &RouteBounds{PathFair: fair, Moved: moved}
	b.Together, b.TogetherMax, _ = together(conns, capacity, fair)
	slices.Sort(b.PathFair)
	return b, nil
}

// pathFair returns each connection's share of its line where every path is
// given a max-min fair share of every link it crosses: all paths' rates
// rise together, and a path stops rising once a link it crosses is full.
func pathFair(conns []boundConn, capacity []float64) []float64 {
	type path struct {
		conn  int
		links []int
		rate  float64
		full  bool
	}
	var paths []*path
	for i, c := range conns {
		for _, l := range c.paths {
			if len(l) > 0 { // a route crosses at least a host's uplink
				paths = append(paths, &path{conn: i, links: l})
			}
		}
	}
	left := slices.Clone(capacity)
	rising := make([]int, len(capacity)) // the rising paths that cross each link
	for {
		clear(rising)
		n := 0
		for _, p := range paths {
			if !p.full {
				n++
				for _, l := range p.links {
					rising[l]++
				}
			}
		}
		if n == 0 {
			break
		}
		step, first := math.Inf(1), 0 // the rise that fills a link, and the link
		for l, k := range rising {
			if k > 0 && left[l]/float64(k) < step {
				step, first = left[l]/float64(k), l
			}
		}
		for l, k := range rising {
			left[l] -= step * float64(k)
		}
		left[first] = 0 // full, whatever the rounding, so that every round stops a path
		for _, p := range paths {
			if p.full {
				continue
			}
			p.rate += step
			for _, l := range p.links {
				if left[l] <= capacity[l]*1e-9 {
					p.full = true
				}
			}
		}
	}
	share := make([]float64, len(conns))
	for _, p := range paths {
		share[p.conn] += p.rate / conns[p.conn].line
	}
	return share
}

// together returns the largest share of its line that every connection can
// carry at once over its paths' routes, bounded from below and above, and
// a way to carry the lower: each path's rate in bits/s. It is Garg and
// Koenemann's approximation of the maximum concurrent flow, restricted to
// the given routes: each link has a length that grows with the flow routed
// over it, and each connection routes its demand, phase after phase, over
// its shortest route. Scaled down by the most any link carries over its
// capacity, what was routed is feasible, the lower bound; the links'
// weight over the demands' distance is an upper bound (linear
// programming's duality). It stops once they are within TogetherTolerance
// of each other, or after maxPhases. floor holds a feasible share for
// each connection and sets the demands' scale, so that the optimum is at
// least 1 in it.
func together(conns []boundConn, capacity []float64, floor []float64) (lower, upper float64, rates [][]float64) {
	const eps = 0.0025
	scale := math.Inf(1)
	for _, f := range floor {
		scale = min(scale, f)
	}
	if len(conns) == 0 || !(scale > 0) {
		return 0, 0, nil
	}
	length := make([]float64, len(capacity))
	for l, c := range capacity {
		length[l] = 1 / c
	}
	routed := make([][]float64, len(conns)) // by connection and path
	for i, c := range conns {
		routed[i] = make([]float64, len(c.paths))
	}
	load := make([]float64, len(capacity))
	distance := func(links []int) float64 {
		d := 0.0
		for _, l := range links {
			d += length[l]
		}
		return d
	}
	shortest := func(c boundConn) (path int, d float64) {
		d = distance(c.paths[0])
		for k, p := range c.paths[1:] {
			if dk := distance(p); dk < d {
				path, d = k+1, dk
			}
		}
		return path, d
	}
	// feasible is the share every connection has in what was routed,
	// scaled down to fit, and that scale.
	feasible := func() (share, fit float64) {
		over, least := 0.0, math.Inf(1)
		for l, c := range capacity {
			over = max(over, load[l]/c)
		}
		for i, c := range conns {
			least = min(least, sum(routed[i])/c.line)
		}
		return least / over, 1 / over
	}
	upper = math.Inf(1)
	for phase := 1; ; phase++ {
		weight, alpha := 0.0, 0.0
		for l, c := range capacity {
			weight += length[l] * c
		}
		for _, c := range conns {
			_, d := shortest(c)
			alpha += c.line * scale * d
		}
		upper = min(upper, weight/alpha*scale)
		if phase%16 == 0 {
			share, fit := feasible()
			if upper <= share*(1+TogetherTolerance) || phase >= maxPhases {
				for i := range routed {
					for k := range routed[i] {
						routed[i][k] *= fit
					}
				}
				return share, upper, routed
			}
		}
		for i, c := range conns {
			for left := c.line * scale; left > 0; {
				k, _ := shortest(c)
				amount := left
				for _, l := range c.paths[k] {
					amount = min(amount, capacity[l])
				}
				left -= amount
				routed[i][k] += amount
				for _, l := range c.paths[k] {
					load[l] += amount
					length[l] *= 1 + eps*amount/capacity[l]
				}
			}
		}
		// Lengths only matter relative to one another: keep the longest
		// near 1, within floating point's range, so that none underflows
		// to a length that could never grow again.
		if longest := slices.Max(length); longest > 1e100 {
			for l := range length {
				length[l] /= longest
			}
		}
	}
}

// sum is the sum of v.
func sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

// maxPhases bounds together's work where its bounds close slowly.
const maxPhases = 1 << 16
