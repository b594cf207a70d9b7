// The path MTU search (spec section 6.7), after RFC 8899's datagram
// PLPMTUD. A connection starts with packets of Config.BasePacket, a size
// every path is expected to carry, and learns for each plane the largest
// packet that crosses it from padded PROBEs and their replies. New packets
// are cut to the smallest size every plane has carried, so that any path
// may carry, and resend, any packet.

package engine

import (
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

const (
	// mtuProbeBit marks the ProbeIDs of MTU probes. Path probes count
	// below it (pathmgr.Path.NewProbe).
	mtuProbeBit = 1 << 31
	// mtuTries is how many probes of one size go unanswered before the size
	// is taken as too big, RFC 8899's MAX_PROBES. One lost probe must not
	// end the search.
	mtuTries = 3
	// mtuGranularity is how close the search brings the largest size known
	// to fit and the smallest known not to before it stops.
	mtuGranularity = 16
)

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
	tries     int        // probes of the size sent
	due       clock.Time // when the PROBE in flight is taken as lost
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
	m := &mtuSearch{planes: make([]planeMTU, len(c.remote))}
	for i := range m.planes {
		m.planes[i] = planeMTU{confirmed: c.sendMax, limit: c.maxPacket}
	}
	m.timer = c.ep.clock.NewTimer(c.onMTUTimer)
	c.mtu = m
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
		if p.trying == 0 {
			overhead := 28 // IPv4 and UDP
			if c.ep.cfg.Planes[plane].Is6() {
				overhead = 48
			}
			p.trying, p.tries = p.next(c.maxPacket, overhead), 0
		}
		if p.trying != 0 && p.due == 0 {
			c.sendMTUProbe(plane, now)
		}
		if p.trying != 0 && p.due != 0 && (due == 0 || p.due < due) {
			due = p.due
		}
	}
	if due != 0 {
		m.timer.Reset(due)
	} else if c.searching() {
		// Some plane waits for a path in service.
		m.timer.Reset(now.Add(c.ep.cfg.BadProbeMax))
	}
}

// searching reports whether some plane's search is not over.
func (c *Conn) searching() bool {
	for i := range c.mtu.planes {
		if c.mtu.planes[i].trying != 0 {
			return true
		}
	}
	return false
}

// sendMTUProbe sends a PROBE of the plane's size under test on a path of
// the plane in service, padded to that size (spec section 5.10).
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
	p.probeID = mtuProbeBit | c.ep.random32() // not guessed by one who knows the connection id
	p.tries++
	p.due = now.Add(path.rtoAfter(0))
	hlen, _ := proto.HeaderLen(proto.TypeProbe, 0)
	var pkt proto.Packet
	c.build(&pkt, proto.TypeProbe, 0, p.trying-hlen-proto.TrailerLen)
	clear(pkt.Payload)
	pkt.Common.SetDstConnID(c.peerID)
	pkt.Common.SetPathID(path.ID())
	pkt.Common.SetEpoch(path.Epoch())
	pkt.Probe().SetProbeID(p.probeID)
	c.snd.stats.MTUProbes++
	c.emit(&pkt, plane, path.Port())
}

// onMTUTimer resends each PROBE taken as lost, up to mtuTries of a size,
// and takes a size with none answered as too big.
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
		p.due = 0
		if p.tries >= mtuTries {
			c.refuseMTU(p)
		}
	}
	c.probeMTUs()
	c.ep.flush()
}

// refuseMTU takes the plane's size under test as too big.
func (c *Conn) refuseMTU(p *planeMTU) {
	p.limit = p.trying - 1
	p.trying, p.due, p.probeID = 0, 0, 0
}

// onMTUProbeReply takes the reply to an MTU probe: its size crossed the
// plane, and the next size is tried.
func (c *Conn) onMTUProbeReply(id uint32) {
	if c.mtu == nil {
		return
	}
	for plane := range c.mtu.planes {
		p := &c.mtu.planes[plane]
		if p.trying == 0 || p.probeID != id {
			continue
		}
		p.confirmed = p.trying
		p.trying, p.due, p.probeID = 0, 0, 0
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
			c.refuseMTU(p)
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
// exactly what the original did (spec section 6.5).
func (c *Conn) setSendMax(size int) {
	c.sendMax = size
	hlen, _ := proto.HeaderLen(proto.TypeWrite, 0)
	c.snd.mss = float64(size - hlen - proto.TrailerLen)
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
