// The receiver's acknowledgments. This file keeps the per-path records and
// sends ACKs, coalesced, with rate hints. It also answers probes (spec
// sections 5.5, 5.10 and 6.6).

package engine

import (
	"math"
	"net/netip"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// recvPath is the receiver's state of one of the peer's paths, which the
// path's ACK record reports (spec section 6.3).
type recvPath struct {
	// The epoch, the highest PSN recorded in it, and the 256 PSNs below.
	has     bool // a data packet was recorded
	epoch   uint8
	highest uint32
	bits    bitvec256

	ce     uint32     // CE-marked data packets, all epochs
	lastTS uint32     // the Timestamp of the latest arrival
	lastAt clock.Time // the latest arrival's time
	dirty  bool       // recorded something since the last ACK
	echoes uint8      // later ACKs its last record is still to be repeated in
}

// advances reports whether a data packet with PSN psn is after every one
// the path recorded, as a repeat of an old packet never is.
func (p *recvPath) advances(psn uint32) bool { return !p.has || proto.SeqLess(p.highest, psn) }

// record notes PSN psn of epoch e (spec section 6.3). It reports whether
// the arrival calls for an immediate ACK, because its PSN is not the one
// after the highest (spec section 6.6).
func (p *recvPath) record(e uint8, psn uint32) bool {
	switch {
	case !p.has:
		p.has, p.epoch, p.highest, p.bits = true, e, psn, bitvec256{}
		return false
	case e == p.epoch:
		if proto.SeqLess(p.highest, psn) {
			d := psn - p.highest
			p.bits.advance(d)
			p.highest = psn
			return d != 1
		}
		if k := p.highest - 1 - psn; psn != p.highest && k < 256 {
			p.bits.set(int(k))
		}
		return true
	case proto.SeqLess(p.highest, psn): // the sender repathed; tell it at once
		p.epoch, p.highest, p.bits = e, psn, bitvec256{}
		return true
	}
	return false // a late packet of an earlier route, not recorded
}

// observe feeds the sender's declared backlog to the endpoint's allocator.
// The allocator's share is the rate hint of this connection's ACKs.
func (r *receiver) observe(h proto.CommonHeader, size int, at clock.Time) {
	if r.share != nil && r.c.tp.hints() {
		r.share.Observe(proto.DecodeBacklog(h.Backlog()), size, int64(at))
	}
}

// hint is the rate hint for this connection's ACKs (spec section 5.5).
func (r *receiver) hint() uint64 {
	if r.share == nil || !r.c.tp.hints() {
		return proto.RateNoLimit // no limit, which the baseline always sends (spec section 10)
	}
	share := r.share.Share()
	if share >= float64(proto.RateNoLimit) {
		return proto.RateNoLimit // a capacity learned from overflows, grown past any rate
	}
	return max(1, uint64(share)) // 0 would mean stop
}

// noteArrival decides when to acknowledge a recorded data packet.
func (r *receiver) noteArrival(now bool, at clock.Time) {
	c := r.c
	// A gap longer than the longest retransmission timeout is an idle,
	// not a sender's pace: averaged in, it would put the quiet spell's
	// repeat (sendAck) after the sender's own timers for many packets.
	if gap := at.Sub(r.lastArrival); r.lastArrival != 0 && gap <= c.ep.cfg.RTOMax {
		r.gap += (gap - r.gap) / 8
	}
	r.lastArrival = at
	r.pending++
	switch {
	case now || r.pending >= c.ep.cfg.AckEvery:
		r.ackNow()
	case c.ackTimer.Deadline() == clock.Never || r.repeat:
		r.repeat = false
		c.ackTimer.Reset(at.Add(c.ep.cfg.AckDelay))
	}
}

func (r *receiver) ackNow() { r.sendAck(r.ackPlane, true) }

// sendAck sends ACKs that carry the records of every path that recorded
// data since the last ACK, and in the room left the records of the ACKs
// before it once more (pickRepeats). With records unset it sends one ACK
// with no records, the handshake's third message (spec section 8.1).
func (r *receiver) sendAck(plane int, records bool) {
	c := r.c
	if !c.knows(plane) {
		plane = c.firstPlane()
	}
	maxRecords := min(proto.MaxAckRecords, (c.sendMax-proto.CommonHeaderLen-proto.AckHeaderLen-c.trailerLen())/proto.AckRecordLen)
	now := c.ep.clock.Now()
	for first := true; first || records && len(r.dirty) > 0; first = false {
		n, repeats := 0, 0
		if records {
			n = min(len(r.dirty), maxRecords)
		}
		if records && first && r.repeatACKs > 0 {
			// Only the first ACK of a call: a later one would repeat
			// the records the ACK just before it carried.
			repeats = r.pickRepeats(maxRecords - n)
			if r.repeatACKs--; r.repeatACKs == 0 {
				r.endRepeats()
			}
		}
		var pkt proto.Packet
		c.build(&pkt, proto.TypeAck, n+repeats, 0)
		pkt.Common.SetDstConnID(c.peerID)
		ack := pkt.Ack()
		ack.SetCumDSN(r.dsn.cum)
		ack.SetRateHint(r.hint())
		if r.c.credits {
			cs, cl := r.credit()
			ack.SetCreditStream(cs)
			ack.SetCreditLimit(cl)
		}
		for i := 0; i < n+repeats; i++ {
			var id uint8
			if i < n {
				id = r.dirty[i]
				r.reported(id)
			} else {
				id = r.repeats[i-n]
			}
			p := &r.paths[id]
			rec := pkt.AckRecord(i)
			rec.SetPathID(id)
			rec.SetEpoch(p.epoch)
			rec.SetHighestPSN(p.highest)
			rec.SetCECount(p.ce)
			rec.SetEchoTimestamp(p.lastTS)
			rec.SetServiceTime(uint32(min(now-p.lastAt, 1<<32-1)))
			p.bits.write(rec)
		}
		r.dirty = r.dirty[:copy(r.dirty, r.dirty[n:])]
		// ACKs rotate over the source ports, so that they spread over the
		// plane's routes like the data they answer.
		r.ackPort = (r.ackPort + 1) % len(c.ep.cfg.SourcePorts)
		c.emit(&pkt, plane, c.ep.cfg.SourcePorts[r.ackPort])
		r.stats.AcksSent++
	}
	r.pending = 0
	c.ackTimer.Stop()
	if records {
		// If the sender goes quiet, send all the records once more. An ACK
		// lost at the tail of a transfer would otherwise cost a tail probe,
		// a resend of data that arrived. Quiet is a few of the sender's
		// usual gaps between packets: a sender paced to a small share
		// leaves gaps longer than AckDelay between all its packets, and
		// would draw a repeat after nearly every ACK. repeatAck disarms
		// this for its own ACK.
		r.repeat = true
		c.ackTimer.Reset(now.Add(ackRepeatAfter * max(c.ep.cfg.AckDelay, r.gap)))
	}
}

// ackRecordRepeats is how many later ACKs, room permitting, repeat a
// path's record while the receiver sees loss (pickRepeats). It is a
// variable so that a test can compare with none.
var ackRecordRepeats uint8 = 1

// sawLoss notes that the network loses this connection's packets: a PSN
// was skipped on a path (a packet this receiver refused skips one too).
// For the next repeatSpell ACKs, records are repeated (pickRepeats).
// Where data is lost, ACKs are lost too, and where nothing is lost a
// repeat would only cost bytes on the way back, which data in the other
// direction shares. A DSN that arrives twice is no such sign: a tail
// probe's copy on another plane arrives twice where nothing is lost.
func (r *receiver) sawLoss() { r.repeatACKs = repeatSpell }

// endRepeats drops the repeats still due when the spell of sawLoss ends,
// so that the next spell repeats only what it reports itself.
func (r *receiver) endRepeats() {
	for _, id := range r.echoing {
		r.paths[id].echoes = 0
	}
	r.echoing = r.echoing[:0]
}

// reported notes that path id's record goes in the ACK being built, new:
// it is no longer dirty, and while the receiver sees loss it is to be
// repeated in the next ACKs that have room for it.
func (r *receiver) reported(id uint8) {
	p := &r.paths[id]
	p.dirty = false
	if ackRecordRepeats == 0 || r.repeatACKs == 0 {
		return
	}
	if p.echoes == 0 {
		r.echoing = append(r.echoing, id)
	}
	p.echoes = max(r.echoes, ackRecordRepeats)
}

// recordEchoes is how many later ACKs repeat a record at a skip rate of
// skipRate: ackRecordRepeats, and more while the record and each repeat
// would all be lost more than repeatMiss of the time, up to
// maxRecordEchoes (spec section 6.6). A network that loses that much data
// loses about as much of the ACKs on their way back, and a record lost
// with all its repeats leaves its path to a timeout, which resends what
// arrived. Where only data is lost the repeats cost bytes on the way back
// alone.
func recordEchoes(skipRate float64) uint8 {
	k := ackRecordRepeats
	for k > 0 && k < maxRecordEchoes && math.Pow(skipRate, float64(k+1)) > repeatMiss {
		k++
	}
	return k
}

// maxRecordEchoes bounds recordEchoes. It is a variable so that a test can hold
// the repeats to ackRecordRepeats.
var maxRecordEchoes uint8 = 3

// pickRepeats fills r.repeats with at most room paths whose records went
// in an earlier ACK and are to be repeated, in the order they were first
// queued, and returns how many. A path that is dirty again goes with its
// new record instead. A repeat tells its path as it is now, as true as
// the first record (spec section 6.6).
func (r *receiver) pickRepeats(room int) int {
	r.repeats = r.repeats[:0]
	keep := r.echoing[:0]
	for _, id := range r.echoing {
		p := &r.paths[id]
		if !p.dirty && len(r.repeats) < room {
			r.repeats = append(r.repeats, id)
			p.echoes--
		}
		if p.echoes > 0 {
			keep = append(keep, id)
		}
	}
	r.echoing = keep
	return len(r.repeats)
}

// repeatAck sends the records of every path once more, after a quiet spell.
func (r *receiver) repeatAck() {
	for id := range r.paths {
		if p := &r.paths[id]; p.has && !p.dirty {
			p.dirty = true
			r.dirty = append(r.dirty, uint8(id))
		}
	}
	// These records are repeats themselves: none is queued to go again.
	spell := r.repeatACKs
	r.repeatACKs = 0
	r.sendAck(r.ackPlane, true)
	r.repeatACKs = spell
	r.repeat = false
	r.c.ackTimer.Stop()
}

// onProbe answers a PROBE over its own 5-tuple, reversed (spec section
// 5.10).
func (r *receiver) onProbe(pkt *proto.Packet, d *link.Datagram, plane int, at clock.Time) {
	c := r.c
	var out proto.Packet
	c.build(&out, proto.TypeProbeReply, 0, 0)
	out.Common.SetDstConnID(c.peerID)
	out.Common.SetPathID(pkt.Common.PathID())
	out.Common.SetEpoch(pkt.Common.Epoch())
	pr := out.ProbeReply()
	pr.SetProbeID(pkt.Probe().ProbeID())
	pr.SetEchoTimestamp(pkt.Common.Timestamp())
	pr.SetServiceTime(uint32(min(c.ep.clock.Now()-at, 1<<32-1)))
	data := c.seal(&out)
	if data == nil {
		return
	}
	c.ep.send(link.Datagram{
		Src:  netip.AddrPortFrom(c.ep.cfg.Planes[plane], d.Dst.Port()),
		Dst:  d.Src,
		DSCP: proto.DefaultDSCP(proto.TypeProbeReply),
		Data: data,
	})
}
