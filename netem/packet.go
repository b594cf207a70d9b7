package netem

import (
	"github.com/mroce/mroce/link"
)

// packet is a datagram inside the fabric. It is its own arrival event.
//
// What a hop reads (the route, the datagram's size and mark) is its first
// cache line, the route as the links' ids rather than pointers so that
// the datagram's first fields fit beside it (see link.Datagram): a large
// run has tens of thousands of packets in flight, and each one's arrival
// is the first touch of it in a while (TestPacketHopLine). The addresses,
// read at the ends, are the next line.
type packet struct {
	fab       *Fabric
	route     [4]uint32 // the links' ids (Fabric.links)
	ingress   uint32    // 1 + the id of the link it arrived on at its current node, for PFC; 0: none
	hops, hop uint8     // hop: index in route of the link it is on, or arriving from
	// crossed: it arrives in another process than its link's, which
	// decided when it left that the link would not fail under it.
	crossed bool
	d       link.Datagram
	id      uint64
	// 192 bytes in all: Go's allocation class of that size starts every
	// object on a cache line (136 bytes would straddle them).
	_ [56]byte
}

// link is the link of route[hop].
func (pkt *packet) link(hop uint8) *Link { return pkt.fab.links[pkt.route[hop]] }

// pausable is the link the packet arrived on at its current node when the
// node may pause it (PFC), else nil. In a fabric without PFC it reads no
// link: a datagram's every hop asks.
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

// clone copies a packet for duplication: its own buffer, its own id.
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

// next is the process the packet arrives in at the far end of route[hop]:
// the next link's, or the destination host's.
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
		pkt.crossed = false // from is another process's: not to be read here
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
