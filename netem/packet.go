package netem

import (
	"github.com/mroce/mroce/link"
)

// packet is a datagram inside the fabric. It is its own arrival event.
type packet struct {
	// What a hop reads comes first, in the packet's first cache line: the
	// route, the hop and the datagram's size and mark (docs/results.md,
	// simulator speed).
	fab *Fabric
	// The route holds the links' ids, and hop indexes the link the packet
	// is on or arriving from.
	route     [6]uint32
	ingress   uint32 // 1 + the id of the link it arrived on at its current node, for PFC, or 0
	hops, hop uint8
	// crossed says the packet arrives in another process than its link's.
	// That link decided when the packet left that it would not fail under it.
	crossed bool
	d       link.Datagram
	id      uint64
	// _ makes a packet 192 bytes, a size class whose objects all start on
	// a cache line; at 144 bytes they would straddle lines.
	_ [48]byte
}

// link is the link of route[hop].
func (pkt *packet) link(hop uint8) *Link { return pkt.fab.links[pkt.route[hop]] }

// pausable is the link the packet arrived on at its current node, when that
// node may pause it with PFC, and nil otherwise. Every hop of a datagram
// asks, so in a fabric without PFC it reads no link.
func (pkt *packet) pausable() *Link {
	if !pkt.fab.pfc || pkt.ingress == 0 {
		return nil
	}
	if in := pkt.fab.links[pkt.ingress-1]; in.pfc {
		return in
	}
	return nil
}

func (f *Fabric) newPacket(p *proc) *packet {
	var pkt *packet
	if n := len(p.freePackets); n > 0 {
		pkt = p.freePackets[n-1]
		p.freePackets = p.freePackets[:n-1]
	} else {
		pkt = &packet{fab: f}
	}
	p.nextPacket++
	pkt.id = uint64(p.idx)<<40 | p.nextPacket
	pkt.hop = 0
	pkt.ingress = 0
	pkt.crossed = false
	return pkt
}

func (f *Fabric) freePacket(p *proc, pkt *packet) {
	f.recycle(p, pkt.d.Data)
	pkt.d = link.Datagram{}
	p.freePackets = append(p.freePackets, pkt)
}

// clone copies a packet for duplication, with a buffer and an id of its own.
func (f *Fabric) clone(p *proc, pkt *packet) *packet {
	c := f.newPacket(p)
	id := c.id
	*c = *pkt
	c.id = id
	buf := f.buffer(p)
	if cap(pkt.d.Data) == HeaderBufferLen {
		buf = p.headerBuffer()
	}
	c.d.Data = append(buf, pkt.d.Data...)
	return c
}

// next is the process the packet arrives in at the far end of route[hop].
// That is the next link's process, or the destination host's.
func (pkt *packet) next() *proc {
	if pkt.hop+1 < pkt.hops {
		return pkt.link(pkt.hop + 1).p
	}
	return pkt.fab.hosts[pkt.link(pkt.hop).to].p
}

// Fire is the packet's arrival at the far end of route[hop].
func (pkt *packet) Fire() {
	f := pkt.fab
	from := pkt.link(pkt.hop)
	if pkt.crossed {
		pkt.crossed = false // from belongs to another process and must not be read here
	} else if from.dropIfFailed(pkt) { // the link failed while the datagram was on its wire
		return
	}
	pkt.hop++
	if pkt.hop == pkt.hops {
		h := f.hosts[from.to]
		now := h.p.sched.Now()
		f.record(from, pkt, Delivered, 0, now)
		h.p.delivered++
		if h.recv != nil {
			h.recv.Receive(&pkt.d, now)
		}
		f.freePacket(h.p, pkt)
		return
	}
	pkt.ingress = uint32(from.id) + 1
	pkt.link(pkt.hop).enqueue(pkt)
}
