package udp

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// inMsg is one received message. It holds a datagram, or with GRO several
// of one size that the kernel joined, the last of which may be shorter.
type inMsg struct {
	buf   []byte // the message read, buf[:n]
	n     int
	oob   []byte // the ancillary data, oob[:oobn]
	oobn  int
	src   netip.AddrPort
	trunc bool // longer than buf, so the kernel cut it
}

// batchReader reads a batch of messages from one socket into msgs. On Linux
// it is recvmmsg in mmsg_linux.go, and elsewhere golang.org/x/net's batch
// reader in mmsg_other.go. It returns how many messages it filled.
type batchReader interface {
	read(msgs []inMsg) (int, error)
}

// read is a receive socket's goroutine. It reads a batch and hands it to
// the loop, then reads the next into a second batch while the loop delivers
// the first.
func (d *Driver) read(s *socket, r link.Receiver, size int) {
	defer d.wg.Done()
	batches := [2]*inBatch{newInBatch(d, s, r, size), newInBatch(d, s, r, size)}
	for k := 0; ; k ^= 1 {
		b := batches[k]
		select {
		case <-b.done: // the loop is through with it
		case <-d.closed:
			return
		}
		n, err := b.reader.read(b.msgs)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			b.done <- struct{}{} // a transient error, so try again, not at once
			time.Sleep(time.Millisecond)
			continue
		}
		b.n = n
		d.loop.Post(b.deliver)
	}
}

// inBatch is one batch of received messages on its way to the loop.
type inBatch struct {
	d       *Driver
	s       *socket
	r       link.Receiver
	msgs    []inMsg
	reader  batchReader // reads into msgs
	n       int
	done    chan struct{}
	deliver func()        // b.deliverNow, bound once
	dg      link.Datagram // the datagram handed to the receiver, kept here so that it is not allocated each time
}

func newInBatch(d *Driver, s *socket, r link.Receiver, size int) *inBatch {
	b := &inBatch{d: d, s: s, r: r, msgs: make([]inMsg, size), done: make(chan struct{}, 1)}
	bufSize := d.cfg.MaxDatagram
	switch {
	case s.gro:
		bufSize = groMax // the kernel joins up to 64 KiB
	case s.local.Port() != d.cfg.Port:
		bufSize = min(bufSize, sourcePortDatagram)
	}
	for i := range b.msgs {
		b.msgs[i].buf = make([]byte, bufSize)
		b.msgs[i].oob = make([]byte, oobSpace)
	}
	b.reader = newBatchReader(s, b.msgs)
	b.deliver = b.deliverNow
	b.done <- struct{}{}
	return b
}

// groMax is the size of a GRO receive buffer, the largest UDP payload.
const groMax = 65535

// sourcePortDatagram is the largest datagram a source-port socket takes.
// Peers send everything to the receive port. What comes back to a source
// port is a PROBE_REPLY or a CLOSE of tens of bytes, so its buffers are
// small. A pool of hundreds of ports must not hold hundreds of full-size
// batches. A longer datagram there is counted in Stats.Truncated and
// dropped.
const sourcePortDatagram = 512

// deliverNow runs on the loop goroutine. What the receiver sends in reply
// to the whole batch waits in Send until the end of the loop's turn.
func (b *inBatch) deliverNow() {
	select {
	case <-b.d.closed:
		b.done <- struct{}{} // closed while this batch waited, so deliver nothing
		return
	default:
	}
	now := b.d.loop.Now()
	for i := range b.msgs[:b.n] {
		b.deliverMsg(&b.msgs[i], now)
	}
	b.done <- struct{}{}
}

// deliverMsg hands one message's datagrams to the receiver. With GRO, each
// segment the kernel joined goes as its own datagram.
func (b *inBatch) deliverMsg(m *inMsg, now clock.Time) {
	st := &b.d.stats
	anc := parseAncillary(m.oob[:m.oobn])
	if anc.hasDrop && anc.drops != b.s.drops {
		lost := anc.drops - b.s.drops // modulo 2^32
		st.KernelDrops += uint64(lost)
		b.s.drops = anc.drops
		if b.d.overflow != nil {
			b.d.overflow.Overflowed(int(min(lost, 1<<30)))
		}
	}
	seg := m.n
	if anc.segment > 0 {
		seg = anc.segment
	}
	count := 1
	if seg > 0 {
		count = (m.n + seg - 1) / seg
	}
	st.Received += uint64(count)
	if count > 1 {
		st.Coalesced += uint64(count)
	}
	if m.trunc || seg > b.d.cfg.MaxDatagram || seg > len(m.buf) || !m.src.IsValid() {
		st.Truncated += uint64(count) // longer than MaxDatagram, cut or refused, so dropped
		return
	}
	var ecn link.ECN
	var dscp uint8
	if anc.hasTOS {
		ecn, dscp = link.ECN(anc.tos&3), anc.tos>>2
		st.ECNSeen += uint64(count)
	}
	for off := 0; ; off += seg {
		b.dg = link.Datagram{Src: m.src, Dst: b.s.local, ECN: ecn, DSCP: dscp, Data: m.buf[off:min(off+seg, m.n)]}
		b.r.Receive(&b.dg, now)
		if seg == 0 || off+seg >= m.n {
			break
		}
	}
	b.dg.Data = nil
}
