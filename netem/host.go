package netem

import (
	"net/netip"

	"github.com/mroce/mroce/link"
)

// Host is one host's NIC ports. It is the link.Port through which the host
// sends, and the place its Receiver is attached.
type Host struct {
	fab  *Fabric
	id   int
	p    *proc
	recv link.Receiver
}

// ID is the host's index.
func (h *Host) ID() int { return h.id }

// Addr is the host's address on plane p.
func (h *Host) Addr(p int) netip.Addr { return Addr(p, h.id) }

// Attach sets the receiver datagrams for this host are pushed to. Without
// one, they are delivered and discarded.
func (h *Host) Attach(r link.Receiver) {
	h.recv = r
}

// Buffer returns an empty buffer with capacity Config.MaxDatagram.
func (h *Host) Buffer() []byte { return h.fab.buffer(h.p) }

// HeaderBuffer returns an empty buffer with capacity HeaderBufferLen. It
// suits a small control packet, or a datagram whose payload is padding
// given by link.Datagram.Pad.
func (h *Host) HeaderBuffer() []byte { return h.p.headerBuffer() }

// HeaderBufferLen is the capacity of a header buffer.
func (h *Host) HeaderBufferLen() int { return HeaderBufferLen }

// HeaderBufferLen is the capacity of a host's header buffers. It holds any
// header of a data packet, or an ACK of up to four records.
const HeaderBufferLen = 256

// Send injects datagrams from this host. Each Src must be one of this
// host's addresses, and it picks the plane. Send takes ownership of every
// Data buffer. A datagram larger than MaxDatagram, or with a source that is
// not this host's or a destination on another plane, is dropped and counted
// in NoRoute.
func (h *Host) Send(batch []link.Datagram) {
	f := h.fab
	for i := range batch {
		d := &batch[i]
		p, sh, ok1 := f.locate(d.Src.Addr())
		q, dh, ok2 := f.locate(d.Dst.Addr())
		if !ok1 || !ok2 || sh != h.id || p != q || d.Pad < 0 || int(d.Pad) > f.cfg.MaxDatagram-len(d.Data) {
			h.p.nextPacket++
			h.p.noRoute++
			f.recycle(h.p, d.Data)
			continue
		}
		pkt := f.newPacket(h.p)
		pkt.d = *d
		f.route(pkt, p, sh, dh)
		pkt.link(0).enqueue(pkt)
	}
}

func (f *Fabric) buffer(p *proc) []byte {
	if n := len(p.freeBufs); n > 0 {
		b := p.freeBufs[n-1]
		p.freeBufs = p.freeBufs[:n-1]
		return b[:0]
	}
	return make([]byte, 0, f.cfg.MaxDatagram)
}

func (p *proc) headerBuffer() []byte {
	if n := len(p.freeHeaders); n > 0 {
		b := p.freeHeaders[n-1]
		p.freeHeaders = p.freeHeaders[:n-1]
		return b[:0]
	}
	return make([]byte, 0, HeaderBufferLen)
}

func (f *Fabric) recycle(p *proc, b []byte) {
	switch {
	case cap(b) >= f.cfg.MaxDatagram:
		p.freeBufs = append(p.freeBufs, b[:0])
	case cap(b) == HeaderBufferLen:
		p.freeHeaders = append(p.freeHeaders, b[:0])
	}
}
