package sim

import (
	"fmt"
	"time"

	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// Links are a scenario's links and queues, as its flags or traffic file
// set them. They give every link's propagation delay, every switch
// queue's DCTCP marking threshold and buffer, and the largest payload a
// data packet carries.
type Links struct {
	Delay        time.Duration
	ECNThreshold int // bytes, 0 for no marking
	// ECNMax, when above ECNThreshold, makes marking linear on dequeue,
	// from none at ECNThreshold to every packet at ECNMax bytes
	// (netem.ECNRamp). Zero keeps DCTCP's step at ECNThreshold.
	ECNMax int
	Buffer int // bytes
	MTU    int // bytes, 0 for DefaultMTU
	// SharedBuffer, when above 0, is the bytes of packet memory each switch
	// shares among its queues under a dynamic threshold of SharedAlpha
	// (netem.SharedBuffer), 1 when 0. Each queue still holds at most
	// Buffer.
	SharedBuffer int
	SharedAlpha  float64
}

// shared is the switches' shared buffer the links give, or nil.
func (l Links) shared() *netem.SharedBuffer {
	if l.SharedBuffer == 0 {
		return nil
	}
	return &netem.SharedBuffer{Bytes: l.SharedBuffer, Alpha: l.SharedBufferAlpha()}
}

// SharedBufferAlpha is SharedAlpha, or 1 when it is 0.
func (l Links) SharedBufferAlpha() float64 {
	if l.SharedAlpha == 0 {
		return 1
	}
	return l.SharedAlpha
}

// queue is the switch queue the links give, of limit bytes.
func (l Links) queue(limit int) netem.QueueConfig {
	if l.ECNMax > 0 {
		return netem.QueueConfig{Limit: limit, ECNRamp: &netem.ECNRamp{Min: l.ECNThreshold, Max: l.ECNMax}}
	}
	return netem.QueueConfig{Limit: limit, ECNThreshold: l.ECNThreshold}
}

// DefaultLinks are the links of every scenario in docs/results.md. They
// have a 1 µs delay, marking at 200 KiB, 16 MiB buffers and 4 KiB packets,
// and no buffer shared between a switch's queues.
func DefaultLinks() Links {
	return Links{Delay: time.Microsecond, ECNThreshold: 200 << 10, Buffer: 16 << 20, MTU: DefaultMTU}
}

// MaxDelay bounds a link's delay. Four delays make a base round trip,
// here 40 ms, far beyond a data center's. The engines the scenarios run
// give up on a connection without progress for a second.
const MaxDelay = 10 * time.Millisecond

// Validate says what is wrong with the links, if anything. It refuses an
// MTU or a delay out of range, a marking threshold below zero and a
// buffer that cannot hold one full packet.
func (l Links) Validate() error {
	p := sizeFor(l.MTU)
	switch {
	case l.MTU != 0 && (l.MTU < MinMTU || l.MTU > MaxMTU):
		return fmt.Errorf("mtu %d: want %d to %d", l.MTU, MinMTU, MaxMTU)
	case l.Delay < 0 || l.Delay > MaxDelay:
		return fmt.Errorf("delay %v: want 0 to %v", l.Delay, MaxDelay)
	case l.ECNThreshold < 0:
		return fmt.Errorf("ECN threshold %d bytes: want 0 (no marking) or more", l.ECNThreshold)
	case l.ECNMax != 0 && l.ECNMax <= l.ECNThreshold:
		return fmt.Errorf("ECN ramp %d to %d bytes: want the top above the threshold, or 0 for a step", l.ECNThreshold, l.ECNMax)
	case l.Buffer < p.maxPacket():
		return fmt.Errorf("buffer of %d bytes: want at least one full packet, %d bytes", l.Buffer, p.maxPacket())
	case l.SharedBuffer != 0 && l.SharedBuffer < p.maxPacket():
		return fmt.Errorf("shared buffer of %d bytes: want 0 (none) or at least one full packet, %d bytes", l.SharedBuffer, p.maxPacket())
	case !(l.SharedAlpha >= 0 && l.SharedAlpha <= 1024):
		return fmt.Errorf("shared buffer alpha %g: want 0 (for 1) to 1024", l.SharedAlpha)
	case l.SharedAlpha != 0 && l.SharedBuffer == 0:
		return fmt.Errorf("shared buffer alpha %g: given without a shared buffer", l.SharedAlpha)
	}
	return nil
}

// DefaultMTU is the largest payload a data packet carries unless a
// scenario is told otherwise. It is RoCE's path MTU of 4096 bytes.
const DefaultMTU = 4096

// MinMTU and MaxMTU bound a scenario's MTU. MinMTU is RoCE's smallest
// path MTU, and MaxMTU the largest payload a 9,000-byte jumbo frame
// carries as a WRITE.
const (
	MinMTU = 256
	MaxMTU = 8192
)

// PacketName names the packets of an MTU by their payload, for a
// scenario's title. It gives "4 KiB" for 4096 bytes and "1500-byte" for
// 1500. An MTU of 0 is DefaultMTU.
func PacketName(mtu int) string { return sizeFor(mtu).String() }

// String names the packets by their payload, "4 KiB" for 4096 bytes.
func (p packetSize) String() string {
	if p.mtu%1024 == 0 {
		return fmt.Sprintf("%d KiB", p.mtu>>10)
	}
	return fmt.Sprintf("%d-byte", p.mtu)
}

// writeOverhead is what a WRITE packet adds to its payload, the mroce
// header and the trailer of docs/spec.md sections 5.1 and 5.11.
var writeOverhead = func() int {
	h, _ := proto.HeaderLen(proto.TypeWrite, 0)
	return h + proto.TrailerLen
}()

// packetSize is what a scenario's MTU makes of its packets.
type packetSize struct{ mtu int }

// sizeFor is the packets of an MTU. An MTU of 0 is DefaultMTU.
func sizeFor(mtu int) packetSize {
	if mtu == 0 {
		mtu = DefaultMTU
	}
	return packetSize{mtu}
}

// maxPacket is the largest packet, a full WRITE. It is the engines'
// MaxPacket and the fabric's largest datagram.
func (p packetSize) maxPacket() int { return p.mtu + writeOverhead }

// wire is what a full packet takes on a link, with netem's per-datagram
// overhead for headers, preamble and gap.
func (p packetSize) wire() int { return p.maxPacket() + netem.DefaultOverhead }

// serialization is how long a full packet takes on a link of rate
// bits/s, rounded down to the nanosecond. A link carries the remainder
// to the next packet, so one packet may take a nanosecond more.
func (p packetSize) serialization(rate int64) time.Duration {
	return time.Duration(float64(p.wire()*8) / float64(rate) * 1e9)
}

// payloadShare is the part of a link's rate that full packets' payload
// takes.
func (p packetSize) payloadShare() float64 { return float64(p.mtu) / float64(p.wire()) }
