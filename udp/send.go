// Sending: the batches the engine hands over, held to the end of the loop's
// turn and written with sendmmsg, GSO where the kernel segments, and the
// refusals and drops the kernel reports, handed back to the receiver after
// the flush.

package udp

import (
	"errors"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"

	"github.com/mroce/mroce/link"
)

// Buffer implements link.Port.
func (d *Driver) Buffer() []byte {
	if n := len(d.free); n > 0 {
		b := d.free[n-1]
		d.free = d.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, d.cfg.MaxDatagram)
}

// Send implements link.Port. It holds the datagrams until the end of the
// loop's turn, until Flush, or until a few batches are waiting. Everything
// the engine sends in one turn then goes out together, in fewer system
// calls and with longer runs for GSO to join.
func (d *Driver) Send(batch []link.Datagram) {
	for i := range batch {
		if batch[i].Pad != 0 {
			d.stats.Padded++
			if cap(batch[i].Data) >= d.cfg.MaxDatagram { // one of Buffer's, to reuse
				d.free = append(d.free, batch[i].Data)
			}
			continue
		}
		d.pending = append(d.pending, batch[i])
	}
	if len(d.pending) >= 4*d.cfg.Batch {
		d.sendPending() // the reports wait for Flush: Send never calls the receiver back
	}
}

// Flush sends what Send holds. The datagrams of each Src go out in one
// system call from that Src's socket, in their order. Datagrams of
// different sources, on different paths, need no order between them. An
// engine spraying over paths interleaves them, so grouping only runs of the
// same Src would cost a system call per datagram. The kernel copies each
// datagram, so its buffer is free again when Flush returns. The loop calls
// Flush at the end of every turn, and it runs on the loop goroutine only.
// Then it tells the receiver of the datagrams refused as too big or
// dropped on their way out, and sends what the receiver sent in answer,
// until nothing is left to tell.
func (d *Driver) Flush() {
	for {
		d.sendPending()
		if len(d.refused) == 0 && len(d.dropped) == 0 {
			return
		}
		if len(d.refused) > 0 {
			d.tellRefused()
		}
		if len(d.dropped) > 0 {
			d.tellDropped()
		}
	}
}

// sendPending sends what Send holds.
func (d *Driver) sendPending() {
	batch := d.pending
	for len(batch) > 0 {
		chunk := batch[:min(len(batch), len(d.out))]
		d.sendChunk(chunk)
		for i := range chunk {
			if cap(chunk[i].Data) >= d.cfg.MaxDatagram { // one of Buffer's, to reuse
				d.free = append(d.free, chunk[i].Data)
			}
			chunk[i].Data = nil
		}
		batch = batch[len(chunk):]
	}
	d.pending = d.pending[:0]
}

// sendChunk sends at most len(d.out) datagrams, grouped by source. With
// GSO, each run of one size to one destination goes in one message.
func (d *Driver) sendChunk(chunk []link.Datagram) {
	done := d.grouped[:len(chunk)]
	clear(done)
	for i := range chunk {
		if done[i] {
			continue
		}
		src := chunk[i].Src
		s := d.socks[src]
		n, msgs := 0, 0
		for j := i; j < len(chunk); j++ {
			if done[j] || chunk[j].Src != src {
				continue
			}
			done[j] = true
			n++
			if s == nil {
				continue
			}
			if !s.reaches(chunk[j].Dst) {
				d.stats.SendErrors++
				continue
			}
			if msgs > 0 && d.gso && d.slots[msgs-1].join(&chunk[j]) {
				continue
			}
			d.slots[msgs].start(&chunk[j])
			msgs++
		}
		if s == nil {
			d.stats.NoSocket += uint64(n)
			continue
		}
		for k := range msgs {
			d.slots[k].message(&d.out[k], s.v6)
		}
		d.write(s, d.out[:msgs], d.slots[:msgs])
	}
}

// write sends msgs, the messages of slots, from s. A message the kernel
// refuses is counted and dropped. One the host dropped for a full queue
// (ENOBUFS) is reported as dropped locally, every datagram of it. An error
// the socket held for an earlier datagram, an ICMP error, makes the
// message go again once. A refused GSO message turns GSO off and goes
// again as single datagrams.
func (d *Driver) write(s *socket, msgs []ipv4.Message, slots []slot) {
	retried := -1
	for sent := 0; sent < len(msgs); {
		ioRelease()
		n, err := s.batch.WriteBatch(msgs[sent:], 0)
		if err == nil {
			for k := sent; k < sent+n; k++ {
				d.stats.Sent += uint64(len(slots[k].bufs))
				if len(slots[k].bufs) > 1 {
					d.stats.Segmented += uint64(len(slots[k].bufs))
				}
			}
			d.stats.SendCalls++
			sent += n
			continue
		}
		// The first message of the rest was refused.
		sl := &slots[sent]
		switch {
		case errors.Is(err, syscall.ENOBUFS):
			d.droppedLocally(s, sl)
		case reportedLate(err) && retried != sent:
			d.drain(s)
			retried = sent
			continue // the error was an earlier datagram's
		case errors.Is(err, syscall.EMSGSIZE) && retried != sent:
			// An ICMP error that the path needs smaller packets is reported
			// at the next call, for whatever it sends. Once the queue is
			// empty a refusal is this message's own.
			d.drain(s)
			retried = sent
			continue
		case len(sl.bufs) > 1:
			// A GSO message's datagrams go one by one. If they pass where
			// the message was refused as invalid or failed in the device,
			// the kernel or device cannot segment, and GSO goes off.
			if d.resendSingly(s, sl) > 0 && (errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EINVAL)) {
				d.gso = false
				d.stats.GSOFallbacks++
			}
		case errors.Is(err, syscall.EMSGSIZE):
			d.refusedTooBig(s, sl.dst, sl.bufs[0])
			d.drain(s) // the kernel queued the refusal as an error too
		default:
			d.stats.SendErrors++
		}
		sent++
	}
}

// reportedLate reports whether a send error is one a socket holds for an
// earlier datagram and gives at its next call: an ICMP error from the
// network, reported because the socket asked for errors (IP_RECVERR).
func reportedLate(err error) bool {
	for _, e := range [...]syscall.Errno{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		syscall.EHOSTDOWN, syscall.EPROTO, syscall.ENOPROTOOPT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// drain empties s's error queue and counts what it held.
func (d *Driver) drain(s *socket) {
	var n int
	control(s.conn, func(fd int) error { n = drainErrors(fd); return nil })
	s.errorQueue.Add(uint64(n))
}

// droppedLocally counts the datagrams of a message the host dropped on
// their way out and keeps copies of them for the receiver, which is told
// after the flush. The copies go in buffers kept for that, so a host that
// drops often allocates nothing.
func (d *Driver) droppedLocally(s *socket, sl *slot) {
	d.stats.LocalDrops += uint64(len(sl.bufs))
	if d.localDrop == nil {
		return
	}
	for _, b := range sl.bufs {
		var buf []byte
		if n := len(d.dropBufs); n > 0 {
			buf, d.dropBufs = d.dropBufs[n-1][:0], d.dropBufs[:n-1]
		} else {
			buf = make([]byte, 0, d.cfg.MaxDatagram)
		}
		d.dropped = append(d.dropped, link.Datagram{Src: s.local, Dst: sl.dst, Data: append(buf, b...)})
	}
}

// tellDropped hands the datagrams dropped on their way out to the
// receiver, and keeps their buffers for the next. What the receiver sends
// in answer may flush and drop again, so the list is taken first.
func (d *Driver) tellDropped() {
	q := d.dropped
	d.dropped = nil
	for i := range q {
		d.localDrop.LocalDrop(&q[i])
		d.dropBufs = append(d.dropBufs, q[i].Data)
		q[i] = link.Datagram{}
	}
	if d.dropped == nil {
		d.dropped = q[:0]
	}
}

// refusedTooBig counts a datagram the kernel refused as larger than its
// path's MTU and tells the receiver. The engine then fails the connection
// with a clear error rather than resend the datagram for ever.
func (d *Driver) refusedTooBig(s *socket, dst netip.AddrPort, data []byte) {
	d.stats.TooBig++
	if d.tooBig != nil {
		// Told after the flush, since the engine may send a CLOSE in reply.
		d.refused = append(d.refused, link.Datagram{Src: s.local, Dst: dst, Data: append([]byte(nil), data...)})
	}
}

// tellRefused hands the datagrams refused as too big to the receiver.
func (d *Driver) tellRefused() {
	q := d.refused
	d.refused = nil
	for i := range q {
		d.tooBig.TooBig(&q[i])
	}
}

// resendSingly sends a refused GSO message's datagrams one at a time and
// returns how many went.
func (d *Driver) resendSingly(s *socket, sl *slot) int {
	one := &d.spare
	went := 0
	for _, b := range sl.bufs {
		one.bufs = append(one.bufs[:0], b)
		one.size, one.dst, one.tos = len(b), sl.dst, sl.tos
		one.message(&d.spareMsg[0], s.v6)
		ioRelease()
		if _, err := s.batch.WriteBatch(d.spareMsg[:], 0); err != nil {
			if errors.Is(err, syscall.EMSGSIZE) {
				d.refusedTooBig(s, sl.dst, b)
				d.drain(s)
			} else {
				d.stats.SendErrors++
			}
			continue
		}
		went++
		d.stats.Sent++
		d.stats.SendCalls++
	}
	return went
}

// slot is one outgoing message. It holds a datagram, or with GSO several of
// the same size to the same destination that the kernel cuts apart with
// UDP_SEGMENT. Its fields are kept between calls so that sending allocates
// nothing.
type slot struct {
	addr net.UDPAddr
	ip   [16]byte
	bufs [][]byte // the datagrams, gathered, with capacity maxSegments
	size int      // bytes in bufs
	tos  byte
	dst  netip.AddrPort
	oob  []byte
}

// maxDrain bounds the errors read off an error queue at one time, so that a
// flood of ICMP errors cannot hold the loop.
const maxDrain = 1024

// maxSegments bounds a GSO message. A 64 KiB UDP payload holds 15 datagrams
// of 4 KiB, and the kernel's limit is 64 segments.
const maxSegments = 16

// gsoMax is the largest UDP payload one GSO message may carry.
const gsoMax = 65000

// start makes sl send dg alone, for now.
func (sl *slot) start(dg *link.Datagram) {
	sl.bufs = append(sl.bufs[:0], dg.Data)
	sl.size, sl.dst, sl.tos = len(dg.Data), dg.Dst, byte(dg.DSCP)<<2|byte(dg.ECN&3)
}

// join adds dg to sl's segments if GSO can carry them together. That needs
// the same destination and TOS, and every segment but the last of one size.
func (sl *slot) join(dg *link.Datagram) bool {
	seg := len(sl.bufs[0])
	if len(sl.bufs) >= maxSegments || dg.Dst != sl.dst || byte(dg.DSCP)<<2|byte(dg.ECN&3) != sl.tos ||
		len(sl.bufs[len(sl.bufs)-1]) != seg || len(dg.Data) > seg || len(dg.Data) == 0 || sl.size+len(dg.Data) > gsoMax {
		return false
	}
	sl.bufs = append(sl.bufs, dg.Data)
	sl.size += len(dg.Data)
	return true
}

// message makes m send sl from a v4 or v6 socket.
func (sl *slot) message(m *ipv4.Message, v6 bool) {
	a := sl.dst.Addr()
	if v6 {
		sl.ip = a.As16() // a v4 peer from a v6 socket goes as v4-mapped
		sl.addr.IP = sl.ip[:16]
	} else {
		a4 := a.Unmap().As4()
		copy(sl.ip[:4], a4[:])
		sl.addr.IP = sl.ip[:4]
	}
	sl.addr.Port = int(sl.dst.Port())
	oob := sl.oob[:cap(sl.oob)]
	n := putTOS(oob, sl.tos, v6)
	if len(sl.bufs) > 1 {
		n += putSegment(oob[n:], len(sl.bufs[0]))
	}
	*m = ipv4.Message{Buffers: sl.bufs, OOB: oob[:n], Addr: &sl.addr}
}
