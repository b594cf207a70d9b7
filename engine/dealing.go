package engine

import "slices"

// dealtPlanes returns the plane of each path. The endpoint deals its
// initiated connections' paths to the planes it was given the peer's
// addresses on, in turn, so that connections with fewer paths than planes,
// or a number that the planes do not divide, spread over every plane
// together; where the planes divide every connection's paths, path i is on
// plane i. Where the ports' rates are known and differ, a connection's
// whole rounds of paths go on every plane, and the paths beyond them are
// dealt in proportion to the rates instead (dealByRate). An acceptor
// learns the peer's planes as packets arrive, and puts path i on plane
// i mod planes.
func (c *Conn) dealtPlanes() func(i int) int {
	all := len(c.ep.cfg.Planes)
	if !c.initiator {
		return func(i int) int { return i % all }
	}
	known := make([]int, 0, all)
	for p := range all {
		if c.knows(p) {
			known = append(known, p)
		}
	}
	if len(known) == 0 {
		return func(i int) int { return i % all }
	}
	if c.ep.unequalPorts() {
		// Whole rounds go on every plane, as the spray follows the ports'
		// rates within a connection; the paths beyond them are dealt by
		// rate, each to a plane of its own.
		planes := make([]int, c.paths)
		even := c.paths - c.paths%len(known)
		for i := range even {
			planes[i] = known[i%len(known)]
		}
		for i := even; i < c.paths; i++ {
			planes[i] = c.ep.dealByRate(known, planes[even:i])
		}
		return func(i int) int { return planes[i] }
	}
	first := c.ep.nextPlane % len(known)
	c.ep.nextPlane = (first + c.paths) % len(known)
	return func(i int) int { return known[(first+i)%len(known)] }
}

// unequalPorts reports whether every plane's port has a rate
// (Config.PortRates) and they are not all the same.
func (e *Endpoint) unequalPorts() bool {
	rates := e.cfg.PortRates
	return len(rates) >= len(e.cfg.Planes) && slices.Min(rates[:len(e.cfg.Planes)]) != slices.Max(rates[:len(e.cfg.Planes)])
}

// dealByRate deals one path to a plane of known but not taken, in
// proportion to the planes' port rates (stride scheduling): each plane
// keeps a pass that a path dealt to it advances by the fastest rate over
// its own, and the plane with the lowest pass takes the next path, the
// first after the last dealt on a tie. So a port at half the rate of the
// others gets half as many paths, and connections with fewer paths than
// planes are not held to a slow port's rate as often as to a fast one's.
// A pass starts at one such step, so that the fastest ports take the
// first paths: an endpoint's first connection of one path is not held to
// its slowest port.
// A plane that sat out (not in known) counts from the last pass dealt, so
// that it takes no run of paths on its return. taken must leave a plane of
// known.
func (e *Endpoint) dealByRate(known, taken []int) int {
	fastest := slices.Max(e.cfg.PortRates[:len(e.cfg.Planes)])
	if e.dealPass == nil {
		e.dealPass = make([]float64, len(e.cfg.Planes))
		for p := range e.dealPass {
			e.dealPass[p] = fastest / e.cfg.PortRates[p]
		}
	}
	best := -1
	for k := range known {
		p := known[(e.nextPlane+k)%len(known)]
		e.dealPass[p] = max(e.dealPass[p], e.dealtAt)
		if slices.Contains(taken, p) {
			continue
		}
		if best < 0 || e.dealPass[p] < e.dealPass[best] {
			best = p
		}
	}
	e.dealtAt = e.dealPass[best]
	e.dealPass[best] += fastest / e.cfg.PortRates[best]
	e.nextPlane = slices.Index(known, best) + 1
	return best
}
