package bugs

import (
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// Port is an endpoint's port with bugs. What the endpoint sends passes
// through Send, and what arrives for it through the Receiver that Attach
// returns. A packet a bug rewrites is sealed again, so that its peer sees
// only the bug and not a bad CRC. Like the endpoint it serves, a Port is
// used from one goroutine.
type Port struct {
	inner link.Port
	bugs  Set
	// sent counts each path's data packets, for ReusePSN.
	sent map[pathKey]uint64
	// lastPSN is each path's newest data PSN, for ReusePSN.
	lastPSN map[pathKey]uint32
	// ce holds the first CECount each path's ACK records carried, for
	// IgnoreCE.
	ce map[pathKey]uint32
	// miscounted counts CE marks hidden from the receiver, for MiscountCE.
	miscounted uint64
}

// pathKey names one path of one connection by the connection id its
// packets carry.
type pathKey struct {
	conn uint32
	path uint8
}

// Wrap returns inner with bugs. With an empty set it changes nothing.
func Wrap(inner link.Port, bugs Set) *Port {
	return &Port{inner: inner, bugs: bugs, sent: map[pathKey]uint64{}, lastPSN: map[pathKey]uint32{},
		ce: map[pathKey]uint32{}}
}

// Buffer is the inner port's.
func (p *Port) Buffer() []byte { return p.inner.Buffer() }

// Send rewrites the batch as the bugs of the sending side say, then hands
// it to the inner port. A datagram a bug suppresses is not sent.
func (p *Port) Send(batch []link.Datagram) {
	kept := batch[:0]
	for i := range batch {
		if p.outgoing(&batch[i]) {
			kept = append(kept, batch[i])
		}
	}
	if len(kept) > 0 {
		p.inner.Send(kept)
	}
}

// outgoing applies the sending side's bugs to d; it reports whether d
// goes out.
func (p *Port) outgoing(d *link.Datagram) bool {
	var pkt proto.Packet
	if pkt.Decode(d.Data) != nil {
		return true // not a packet of ours to rewrite
	}
	h := pkt.Common
	switch t := h.Type(); {
	case t == proto.TypeAck && p.bugs.IgnoreSACKBit:
		for i := 0; i < int(pkt.Ack().RecordCount()); i++ {
			pkt.AckRecord(i).ClearReceived(0)
		}
		pkt.Seal()
	case t == proto.TypeNack && p.bugs.SkipKeyCheck && pkt.Nack().Code() == proto.NackBadKey:
		return false
	case t.IsData() && p.bugs.ReusePSN:
		k := pathKey{h.DstConnID(), h.PathID()}
		n := p.sent[k]
		p.sent[k] = n + 1
		if last, seen := p.lastPSN[k]; seen && n%64 == 63 && h.Flags()&proto.FlagRetransmit == 0 {
			h.SetPSN(last)
			pkt.Seal()
			return true
		}
		p.lastPSN[k] = h.PSN()
	}
	return true
}

// Attach returns the receiving side of the port for r. What the inner
// port delivers goes to it, and from it to r with the receiving side's
// bugs. The inner port's reports (TooBig, LocalDrop, Overflowed) pass
// through when r takes them.
func (p *Port) Attach(r link.Receiver) link.Receiver {
	return &receiver{p: p, next: r}
}

// MiscountedCE counts the CE marks MiscountCE hid from the receiver.
func (p *Port) MiscountedCE() uint64 { return p.miscounted }

type receiver struct {
	p    *Port
	next link.Receiver
}

func (r *receiver) Receive(d *link.Datagram, at clock.Time) {
	r.p.incoming(d)
	r.next.Receive(d, at)
}

// TooBig, LocalDrop and Overflowed pass the port's reports to the receiver
// above, where it takes them.
func (r *receiver) TooBig(d *link.Datagram) {
	if h, ok := r.next.(link.TooBigHandler); ok {
		h.TooBig(d)
	}
}

func (r *receiver) LocalDrop(d *link.Datagram) {
	if h, ok := r.next.(link.LocalDropHandler); ok {
		h.LocalDrop(d)
	}
}

func (r *receiver) Overflowed(lost int) {
	if h, ok := r.next.(link.OverflowHandler); ok {
		h.Overflowed(lost)
	}
}

// incoming applies the receiving side's bugs to d in place.
func (p *Port) incoming(d *link.Datagram) {
	var pkt proto.Packet
	err := pkt.Decode(d.Data)
	if err == proto.ErrBadCRC && p.bugs.AcceptBadCRC && pkt.DecodeNoCRC(d.Data) == nil {
		pkt.Seal() // taken as if the CRC were right
		err = nil
	}
	if err != nil {
		return
	}
	h := pkt.Common
	switch t := h.Type(); {
	case t == proto.TypeNack && p.bugs.IgnoreRetryAfter:
		if c := pkt.Nack().Code(); c == proto.NackRNR || c == proto.NackResource {
			pkt.Nack().SetRetryAfter(0)
			pkt.Seal()
		}
	case t == proto.TypeAck && p.bugs.IgnoreCE:
		for i := 0; i < int(pkt.Ack().RecordCount()); i++ {
			rec := pkt.AckRecord(i)
			k := pathKey{h.DstConnID(), rec.PathID()}
			first, seen := p.ce[k]
			if !seen {
				first = rec.CECount()
				p.ce[k] = first
			}
			rec.SetCECount(first)
		}
		pkt.Seal()
	case t.IsData() && p.bugs.MiscountCE && d.ECN == link.CE && h.PSN()%16 == 0:
		d.ECN = link.ECT0
		p.miscounted++
	}
}

// Wrapper makes a Port of below with the set's bugs and returns it with
// its Attach. It has the shape of software.Wrapper, which stands between
// a UDP host's engine and its sockets.
func (s Set) Wrapper(below link.Port) (link.Port, func(link.Receiver) link.Receiver) {
	p := Wrap(below, s)
	return p, p.Attach
}
