// The path MTU search (spec section 6.7), after RFC 8899's datagram
// PLPMTUD. A connection starts with packets of Config.BasePacket, a size
// every path is expected to carry, and learns for each plane the largest
// packet that crosses it from padded PROBEs and their replies. New packets
// are cut to the smallest size every plane has carried, so that any path
// may carry, and resend, any packet. A plane that comes to carry less, as
// a refusal by the local host or unanswered padded PROBEs show, is
// searched again, and with RECUT what was cut too large is resent smaller
// (recut, dsn.go).

package engine

import (
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

const (
	// mtuProbeBit marks the ProbeIDs of MTU probes, below those of plane
	// probes (planeProbeBits). Path probes count below it
	// (pathmgr.Path.NewProbe).
	mtuProbeBit = 1 << 31
	// mtuTries is how many probes of one size go unanswered before the size
	// is taken as too big, RFC 8899's MAX_PROBES. One lost probe must not
	// end the search. Only a probe whose unpadded companion was answered
	// counts: random loss takes both sizes alike, a path MTU only the
	// larger. mtuChecks is the count for a size the plane carried before
	// (verifyMTU), where a wrong verdict costs every packet its size.
	// mtuPairs bounds the pairs sent for one size, in units of the count.
	mtuTries  = 3
	mtuChecks = 6
	mtuPairs  = 4
	// mtuWaits is how many times a pair whose PROBEs are both still out
	// has its wait doubled before it counts as unanswered: behind a long
	// queue a path's round trip can outgrow its timer, and a reply that
	// comes late is still an answer.
	mtuWaits = 3
	// mtuGranularity is how close the search brings the largest size known
	// to fit and the smallest known not to before it stops.
	mtuGranularity = 16
)

// defaultBasePacket is the size a plane whose MTU fell starts its search
// again from when Config.BasePacket is not set: RFC 8899's BASE_PLPMTU.
const defaultBasePacket = 1200

// linkMTUs are common link MTUs, largest first. Once the ceiling proved
// too big, the search tries those below it before it bisects, since a
// path's MTU is most often one of them.
var linkMTUs = [...]int{9000, 1500, 1280}

// planeMTU is the search on one plane.
type planeMTU struct {
	confirmed int // the largest packet a PROBE of that size carried, or BasePacket
	limit     int // the largest that may fit: below the smallest size refused, at most MaxPacket
	trying    int // the size of the PROBE in flight, 0 when none
	probeID   uint32
	companion uint32     // the unpadded PROBE sent with it
	heard     bool       // the companion was answered
	tries     int        // probes of the size unanswered while their companions were
	pairs     int        // probes of the size sent
	sentAt    clock.Time // when the pair in flight went
	waits     int        // times its wait was doubled
	due       clock.Time // when the PROBE in flight is taken as lost
	// verifying is set while the PROBE in flight checks that the plane
	// still carries the size packets are cut to (verifyMTU).
	verifying bool
	// raiseAt is when a search that ended below MaxPacket starts again, 0
	// for never (Config.PathMTURaise).
	raiseAt clock.Time
}

// mtuSearch is a connection's search, over all its planes.
type mtuSearch struct {
	planes []planeMTU
	timer  clock.Timer
}

// startMTUSearch begins the search when the connection's packets start
// below the negotiated MaxPacket. The sender calls it once it is equipped,
// since only sending needs it, and establish once the connection is up.
func (c *Conn) startMTUSearch() {
	if c.mtu != nil || c.sendMax >= c.maxPacket || c.state != Established || c.snd.paths == nil {
		return // done, not needed, or too early: establish calls again
	}
	c.newMTUSearch()
	c.probeMTUs()
}

// newMTUSearch gives the connection a search in which every plane has
// carried the packets sent so far.
func (c *Conn) newMTUSearch() {
	m := &mtuSearch{planes: make([]planeMTU, len(c.remote))}
	for i := range m.planes {
		m.planes[i] = planeMTU{confirmed: c.sendMax, limit: c.maxPacket}
	}
	m.timer = c.ep.clock.NewTimer(c.onMTUTimer)
	c.mtu = m
}

// mtuFell takes a packet of size bytes that the local host refused as too
// big for plane: the plane carries less than it has shown, as when its
// route comes to cross a tunnel. It reports false when the connection
// cannot go on: without RECUT, the packets already cut at the old size
// could never be resent, and below MinMTU nothing fits. Otherwise the
// plane's search starts again below the size refused, from the base size
// every path is expected to carry; new packets are cut to fit and resends
// cut smaller (spec section 6.7).
func (c *Conn) mtuFell(plane, size int) bool {
	if !c.recut || plane >= len(c.remote) || size-1 < proto.MinMTU {
		return false
	}
	if c.mtu == nil {
		c.newMTUSearch()
	}
	if size > c.mtu.planes[plane].limit {
		return true // known too big already, as for the rest of a refused batch
	}
	c.lowerMTU(plane, size)
	c.probeMTUs()
	return true
}

// lowerMTU takes size as too big for plane, which had carried it, and
// starts the plane's search again from the base size, or from half the
// largest size left where even the base size was refused.
func (c *Conn) lowerMTU(plane, size int) {
	p := &c.mtu.planes[plane]
	p.limit = min(p.limit, size-1)
	p.confirmed = min(p.confirmed, c.basePacket())
	if p.confirmed > p.limit {
		p.confirmed = max(proto.MinMTU, p.limit/2)
	}
	p.trying, p.due, p.probeID, p.companion, p.verifying, p.raiseAt = 0, 0, 0, 0, false, 0
	c.snd.stats.MTUFalls++
	c.resize()
}

// basePacket is the size every path is expected to carry.
func (c *Conn) basePacket() int {
	if base := c.ep.cfg.BasePacket; base > 0 {
		return base
	}
	return defaultBasePacket
}

// verifyMTU checks, with a PROBE padded to the size packets are cut to
// now, that the plane still carries it. A path of the plane timed out and
// then answered its unpadded PROBE, and no packet of full size sent on
// the plane since has been acknowledged: small packets cross where data
// does not, which is what a path MTU that fell with no error sent back
// looks like (RFC 8899 section 4.3, black-hole detection). If mtuChecks
// such PROBEs go unanswered the plane's size is lowered, as a refusal
// lowers it (mtuFell). Only with RECUT: without it the packets already cut could
// not be resent smaller anyway.
func (c *Conn) verifyMTU(plane int) {
	if !c.recut || c.state != Established || c.sendMax <= c.basePacket() || plane >= len(c.remote) {
		return
	}
	if c.mtu == nil {
		c.newMTUSearch()
	}
	p := &c.mtu.planes[plane]
	if p.trying != 0 {
		c.probeMTUs() // a search tests the plane already; it may have waited for this path
		return
	}
	p.trying, p.tries, p.pairs, p.verifying = c.sendMax, 0, 0, true
	c.snd.stats.MTUChecks++
	c.probeMTUs()
}

// next is the size the plane's next PROBE tests, or 0 when the search is
// over. The ceiling comes first, since an interface's MTU is most often
// the path's; then the common link MTUs below what was refused; then the
// midpoint of what is left. ipOverhead is the IP and UDP headers of the
// plane's family.
func (p *planeMTU) next(maxPacket, ipOverhead int) int {
	switch {
	case p.limit <= p.confirmed:
		return 0
	case p.limit == maxPacket:
		return p.limit
	}
	for _, mtu := range linkMTUs {
		if size := mtu - ipOverhead; size > p.confirmed && size <= p.limit {
			return size
		}
	}
	if p.limit-p.confirmed < mtuGranularity {
		return 0
	}
	return (p.confirmed + p.limit + 1) / 2
}

// probeMTUs sends the next PROBE on each plane that has none in flight
// and a path in service, and arms the timer for the earliest to be lost.
// A plane with no path in service waits: its silence would say nothing of
// the size.
func (c *Conn) probeMTUs() {
	m := c.mtu
	if m == nil || c.state != Established {
		return
	}
	now := c.ep.clock.Now()
	var due clock.Time
	for plane := range m.planes {
		p := &m.planes[plane]
		if p.trying == 0 && p.raiseAt != 0 && p.raiseAt <= now {
			// The path may carry more now: every size above what it
			// carries is tried again.
			p.limit, p.raiseAt = c.maxPacket, 0
		}
		if p.trying == 0 {
			overhead := 28 // IPv4 and UDP
			if c.ep.cfg.Planes[plane].Is6() {
				overhead = 48
			}
			p.trying, p.tries, p.pairs = p.next(c.maxPacket, overhead), 0, 0
			if p.trying == 0 && p.raiseAt == 0 && p.confirmed < c.maxPacket && c.ep.cfg.PathMTURaise > 0 {
				p.raiseAt = now.Add(c.ep.cfg.PathMTURaise)
			}
		}
		if p.trying != 0 && p.due == 0 {
			c.sendMTUProbe(plane, now)
		}
		next := p.due
		switch {
		case p.trying == 0:
			next = p.raiseAt
		case p.due == 0:
			next = now.Add(c.ep.cfg.BadProbeMax) // the plane waits for a path in service
		}
		if next != 0 && (due == 0 || next < due) {
			due = next
		}
	}
	if due != 0 {
		m.timer.Reset(due)
	}
}

// sendMTUProbe sends a PROBE of the plane's size under test on a path of
// the plane in service, padded to that size (spec section 5.10), right
// after an unpadded companion. The companion goes first: behind a larger
// datagram a port could join the two into one offloaded send (GSO), which
// a path would then carry or drop whole.
func (c *Conn) sendMTUProbe(plane int, now clock.Time) {
	if !c.knows(plane) {
		return
	}
	var path *sendPath
	for _, q := range c.snd.paths {
		if q.Plane() == plane && q.InUse() {
			path = q
			break
		}
	}
	if path == nil {
		return
	}
	m := c.mtu
	p := &m.planes[plane]
	p.probeID = c.mtuProbeID() // not guessed by one who knows the connection id
	p.companion = c.mtuProbeID()
	p.heard = false
	p.pairs++
	p.sentAt, p.waits = now, 0
	p.due = now.Add(path.rtoAfter(0))
	hlen, _ := proto.HeaderLen(proto.TypeProbe, 0)
	for _, probe := range [2]struct {
		id  uint32
		pad int
	}{{p.companion, 0}, {p.probeID, p.trying - hlen - c.trailerLen()}} {
		var pkt proto.Packet
		c.build(&pkt, proto.TypeProbe, 0, probe.pad)
		clear(pkt.Payload)
		pkt.Common.SetDstConnID(c.peerID)
		pkt.Common.SetPathID(path.ID())
		pkt.Common.SetEpoch(path.Epoch())
		pkt.Probe().SetProbeID(probe.id)
		c.emit(&pkt, plane, path.Port())
	}
	c.snd.stats.MTUProbes++
}

// mtuProbeID is a new random ProbeID in the range of MTU probes.
func (c *Conn) mtuProbeID() uint32 { return mtuProbeBit | c.ep.random32()>>2 }

// isMTUProbe reports whether id is an MTU probe's.
func isMTUProbe(id uint32) bool { return id&planeProbeBits == mtuProbeBit }

// onMTUTimer resends each PROBE taken as lost, and takes a size as too big
// once mtuTries of its probes (mtuChecks for a size the plane carried)
// went unanswered while their companions were answered. A pair with
// neither answered waits longer first (mtuWaits). A plane that
// answers neither for mtuPairs times as many says nothing of the size:
// a search takes it as too big, as it would without companions, and a
// check ends with no change.
func (c *Conn) onMTUTimer() {
	if c.state != Established {
		return
	}
	now := c.ep.clock.Now()
	for plane := range c.mtu.planes {
		p := &c.mtu.planes[plane]
		if p.trying == 0 || p.due == 0 || p.due > now {
			continue
		}
		if !p.heard && p.waits < mtuWaits {
			p.waits++
			p.due = now.Add(now.Sub(p.sentAt))
			continue
		}
		p.due, p.companion = 0, 0
		if p.heard {
			p.tries++
		}
		need := mtuTries
		if p.verifying {
			need = mtuChecks
		}
		switch {
		case p.tries >= need:
			c.refuseMTU(plane)
		case p.pairs < mtuPairs*need:
		case p.verifying:
			p.trying, p.probeID, p.companion, p.verifying = 0, 0, 0, false
		default:
			c.refuseMTU(plane)
		}
	}
	c.probeMTUs()
	c.ep.flush()
}

// refuseMTU takes the plane's size under test as too big. If the plane
// had carried it, its MTU fell.
func (c *Conn) refuseMTU(plane int) {
	p := &c.mtu.planes[plane]
	if p.verifying {
		c.lowerMTU(plane, p.trying)
		return
	}
	p.limit = p.trying - 1
	p.trying, p.due, p.probeID, p.companion = 0, 0, 0, 0
}

// tooBig resends at once, cut to the size that fits now, a data packet the
// local host refused as too big. Its path carried nothing, so it is not
// blamed, and the rate is not cut: the host's queues did not drop it.
func (s *sender) tooBig(pkt *proto.Packet) {
	p, r := s.transmission(pkt)
	if r == nil {
		return
	}
	p.resolveLost(r, r.psn, LossLocal)
	p.advance()
	s.pump()
}

// onMTUProbeReply takes the reply to an MTU probe: its size crossed the
// plane, and the next size is tried.
func (c *Conn) onMTUProbeReply(id uint32) {
	if c.mtu == nil {
		return
	}
	for plane := range c.mtu.planes {
		p := &c.mtu.planes[plane]
		if p.trying != 0 && p.companion == id {
			// The padded PROBE went right after it on the same path, so
			// its reply, if it crossed, comes soon.
			p.heard = true
			now := c.ep.clock.Now()
			p.due = min(p.due, now.Add(max(c.ep.cfg.ProbeMin, now.Sub(p.sentAt)/4)))
			c.probeMTUs()
			return
		}
		if p.trying == 0 || p.probeID != id {
			continue
		}
		p.confirmed = max(p.confirmed, p.trying)
		p.trying, p.due, p.probeID, p.companion, p.verifying = 0, 0, 0, 0, false
		c.resize()
		c.probeMTUs()
		return
	}
}

// mtuProbeTooBig takes a PROBE the local host refused as larger than the
// path (link.TooBigHandler). Its size is too big at once, with no wait.
func (c *Conn) mtuProbeTooBig(id uint32) {
	if c.mtu == nil {
		return
	}
	for plane := range c.mtu.planes {
		if p := &c.mtu.planes[plane]; p.trying != 0 && p.probeID == id {
			c.refuseMTU(plane)
			c.probeMTUs()
			return
		}
	}
}

// resize sets the size of new packets to the smallest any plane the peer
// has an address on has carried. A plane out of service keeps it at what
// that plane last showed, so its paths may carry any packet when it is
// back. A plane whose address the connection learns later brings new
// packets down to what it has shown (setRemote) until its search shows
// more.
func (c *Conn) resize() {
	size := c.maxPacket
	for plane := range c.mtu.planes {
		if c.knows(plane) {
			size = min(size, c.mtu.planes[plane].confirmed)
		}
	}
	c.setSendMax(size)
}

// setSendMax sets the largest packet the connection sends from now on.
// Packets already given a DSN keep their size, because a resend carries
// exactly what the original did (spec section 6.5), unless a fall below
// them makes transmit recut them.
func (c *Conn) setSendMax(size int) {
	c.sendMax = size
	hlen, _ := proto.HeaderLen(proto.TypeWrite, 0)
	c.snd.mss = float64(size - hlen - c.trailerLen())
}

// PathMTU is the largest packet, as a UDP payload, that this side has seen
// cross each plane, and whether the search on it is over. Without a search
// (Config.BasePacket) every plane shows the negotiated MaxPacket.
func (c *Conn) PathMTU() []PlaneMTU {
	out := make([]PlaneMTU, len(c.remote))
	for i := range out {
		out[i] = PlaneMTU{Size: c.maxPacket, Done: true}
		if c.mtu != nil {
			p := &c.mtu.planes[i]
			out[i] = PlaneMTU{Size: p.confirmed, Done: p.trying == 0}
		} else if c.sendMax < c.maxPacket {
			out[i] = PlaneMTU{Size: c.sendMax}
		}
	}
	return out
}

// PlaneMTU is what the search knows of one plane.
type PlaneMTU struct {
	Size int  // the largest packet seen to cross it
	Done bool // the search is over
}
