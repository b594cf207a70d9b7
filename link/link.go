// Package link is the seam between protocol engines and whatever carries
// their packets, be it the emulator in netem, UDP sockets or one day a NIC.
// An engine sends batches of datagrams through a Port and has datagrams
// pushed to its Receiver. It never blocks on a read, so the same engine runs
// in virtual time and on real sockets.
//
// Buffer ownership is explicit. A buffer comes from Port.Buffer and belongs
// to the caller until it hands it to Port.Send. From then on it belongs to
// the port, the emulator or driver, which recycles it after the datagram is
// delivered or dropped. A buffer passed to Receiver.Receive is valid only
// during that call.
package link

import (
	"net/netip"

	"github.com/mroce/mroce/clock"
)

// ECN is the two-bit ECN field of the IP header, defined in RFC 3168.
type ECN uint8

const (
	NotECT ECN = 0b00
	ECT1   ECN = 0b01
	ECT0   ECN = 0b10
	CE     ECN = 0b11
)

func (e ECN) String() string {
	return [...]string{"Not-ECT", "ECT(1)", "ECT(0)", "CE"}[e&3]
}

// Datagram is one UDP datagram and the IP header fields the transport uses.
// The plane a datagram travels is the one its source address belongs to,
// and its UDP source port is the path's ECMP entropy.
type Datagram struct {
	Data []byte
	// Pad is how many bytes the datagram carries on the wire after Data
	// without their being materialized. They are a simulation's placeholder
	// payload and trailer. Only the emulator carries them, and every other
	// port drops a datagram with Pad set and counts it.
	Pad      int32
	ECN      ECN
	DSCP     uint8 // 0..63
	Src, Dst netip.AddrPort
}

// Size is the datagram's length on the wire, Data and Pad together.
func (d *Datagram) Size() int { return len(d.Data) + int(d.Pad) }

// Port sends datagrams on behalf of one host.
type Port interface {
	// Buffer returns an empty buffer of length 0 with capacity for the
	// largest datagram the port carries. It belongs to the caller until it
	// is passed to Send.
	Buffer() []byte
	// Send takes a batch of datagrams whose Data came from Buffer. The port
	// owns every buffer from then on. The caller may reuse the slice itself
	// as soon as Send returns. Send never calls the port's receiver back:
	// a port reports refusals and drops (TooBigHandler, LocalDropHandler)
	// later, from its own flush.
	Send(batch []Datagram)
}

// Receiver is where a port pushes the datagrams that arrive for a host, one
// call each, with the arrival time on the port's clock. d and d.Data are
// valid only during the call.
type Receiver interface {
	Receive(d *Datagram, at clock.Time)
}

// TooBigHandler is a Receiver that wants to know when a datagram it sent
// did not fit its path. The kernel refused it as larger than the path MTU,
// since DF is set and nothing is fragmented. A port that can tell, such as
// the UDP driver, calls TooBig with the datagram on the receiver's
// goroutine. d is valid only during the call.
type TooBigHandler interface {
	Receiver
	TooBig(d *Datagram)
}

// LocalDropHandler is a Receiver that wants to know when the local host
// dropped a datagram it sent before it left, because a queue on its way
// out was full (ENOBUFS on Linux: the qdisc's or the device's). The loss is
// the sender's own doing, not the network's, and says it sends faster than
// its host can. A port that can tell, such as the UDP driver, calls
// LocalDrop with the datagram on the receiver's goroutine. d is valid only
// during the call.
type LocalDropHandler interface {
	Receiver
	LocalDrop(d *Datagram)
}

// OverflowHandler is a Receiver that wants to know when datagrams for it
// arrived and were lost before it read them, because the port's receive
// buffer was full (SO_RXQ_OVFL on Linux). It receives slower than its
// senders send. A port that can tell, such as the UDP driver, calls
// Overflowed with the number lost since the last call, on the receiver's
// goroutine.
type OverflowHandler interface {
	Receiver
	Overflowed(lost int)
}

// ReceiverFunc adapts a function to a Receiver.
type ReceiverFunc func(d *Datagram, at clock.Time)

// Receive calls f.
func (f ReceiverFunc) Receive(d *Datagram, at clock.Time) { f(d, at) }
