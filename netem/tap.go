package netem

import (
	"net/netip"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// Verdict is what happened to a datagram at a link.
type Verdict uint8

const (
	Queued    Verdict = iota + 1 // accepted into the link's queue
	Marked                       // accepted and marked CE
	Sent                         // finished its serialization on the link
	Delivered                    // handed to the destination host, on its downlink
	Dropped                      // TapEvent.Cause says why
)

func (v Verdict) String() string {
	switch v {
	case Queued:
		return "queued"
	case Marked:
		return "marked"
	case Sent:
		return "sent"
	case Delivered:
		return "delivered"
	case Dropped:
		return "dropped"
	}
	return "unknown"
}

// TapEvent is one link event as a tap sees it. It is the emulator's record
// of what it did to each datagram. Datagram and its Data are valid only
// during the tap call.
type TapEvent struct {
	At       clock.Time
	Link     *Link
	ID       uint64 // the datagram's id in the fabric, a duplicate having its own
	Datagram *link.Datagram
	Verdict  Verdict
	Cause    DropCause // for Dropped
}

// AddTap calls tap for every link event from now on, on the fabric's
// goroutine. Tests and judges read the emulator's records through taps,
// such as which datagrams a link dropped, marked or carried, without
// touching its state.
func (f *Fabric) AddTap(tap func(*TapEvent)) {
	if f.group != nil {
		panic("netem: taps on a fabric over processes would run on every core at once")
	}
	f.taps = append(f.taps, tap)
}

// AddHostTap calls tap for every link event from now on, with the host whose
// uplink or downlink the link is, or -1 for a link between switches. Over
// processes it is called on that host's process, on any core, beside the
// others'. The tap must touch only what is that host's, such as a count or a
// sample of its own, and it must be added between windows.
func (f *Fabric) AddHostTap(tap func(host int, e *TapEvent)) {
	f.hostTaps = append(f.hostTaps, tap)
}

// DatagramWriter is where a capture writes. internal/pcapio's Writer is one.
type DatagramWriter interface {
	WriteDatagram(ts time.Time, src, dst netip.AddrPort, dscp uint8, ecn link.ECN, payload []byte) error
}

// Capture records the datagrams that finish transmission on one link.
type Capture struct {
	err error
	n   int
}

// Err is the first write error, if any. The capture stops at it.
func (c *Capture) Err() error { return c.err }

// Packets is the number of datagrams written.
func (c *Capture) Packets() int { return c.n }

// CaptureLink writes every datagram that finishes transmission on l to w as
// it leaves the link, with ECN as marked. Each is stamped with origin plus
// its virtual time.
func (f *Fabric) CaptureLink(l *Link, w DatagramWriter, origin time.Time) *Capture {
	c := &Capture{}
	var padded []byte
	f.AddTap(func(e *TapEvent) {
		if e.Link != l || e.Verdict != Sent || c.err != nil {
			return
		}
		d := e.Datagram
		data := d.Data
		if d.Pad > 0 { // a placeholder's missing bytes are written as zeros
			padded = append(append(padded[:0], d.Data...), make([]byte, d.Pad)...)
			data = padded
		}
		c.err = w.WriteDatagram(origin.Add(time.Duration(e.At)), d.Src, d.Dst, d.DSCP, d.ECN, data)
		c.n++
	})
	return c
}
