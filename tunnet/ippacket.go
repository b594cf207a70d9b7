package tunnet

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/mroce/mroce/link"
)

// A TUN device carries IP packets. The emulator reads from them the
// 5-tuple that picks an ECMP path and the ECN field that queues may set to
// CE. The one change it makes is setting that field.

const (
	protoTCP = 6
	protoUDP = 17
)

// Errors of parseIP. A packet that is not a whole IPv4 header is counted
// and not forwarded.
var (
	errShort   = errors.New("tunnet: shorter than an IPv4 header")
	errVersion = errors.New("tunnet: not IPv4")
	errHeader  = errors.New("tunnet: IPv4 header length out of range")
	errLength  = errors.New("tunnet: IPv4 total length does not match the packet")
)

// ipInfo is what the emulator needs of a packet.
type ipInfo struct {
	src, dst netip.AddrPort // with ports only for TCP and UDP, and 0 otherwise
	ecn      link.ECN
	dscp     uint8
}

// parseIP reads an IPv4 packet's addresses and ECN field, and its TCP or
// UDP ports when the packet is not a later fragment and holds them. IPv6
// is not carried, since the emulated planes are IPv4, netem's
// 10.plane.host.host.
func parseIP(b []byte) (ipInfo, error) {
	var in ipInfo
	if len(b) < 20 {
		return in, errShort
	}
	if b[0]>>4 != 4 {
		return in, errVersion
	}
	ihl := int(b[0]&0x0F) * 4
	if ihl < 20 || ihl > len(b) {
		return in, errHeader
	}
	if total := int(binary.BigEndian.Uint16(b[2:4])); total != len(b) {
		return in, errLength
	}
	in.ecn, in.dscp = link.ECN(b[1]&3), b[1]>>2
	src, dst := netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	var sport, dport uint16
	fragOffset := binary.BigEndian.Uint16(b[6:8]) & 0x1FFF
	if l4 := b[ihl:]; (b[9] == protoTCP || b[9] == protoUDP) && fragOffset == 0 && len(l4) >= 4 {
		sport, dport = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
	}
	in.src, in.dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	return in, nil
}

// UDPPayload is the payload of the UDP datagram in IPv4 packet b. The
// emulator's datagrams carry whole IP packets, and a tap uses UDPPayload to
// read what a UDP protocol sent. ok is false for anything else, such as
// TCP, fragments or bad headers.
func UDPPayload(b []byte) (payload []byte, ok bool) {
	if _, err := parseIP(b); err != nil || b[9] != protoUDP || binary.BigEndian.Uint16(b[6:8])&0x3FFF != 0 {
		return nil, false
	}
	ihl := int(b[0]&0x0F) * 4
	if len(b) < ihl+8 {
		return nil, false
	}
	return b[ihl+8:], true
}

// setECN writes ecn into the header of an IPv4 packet b that parseIP
// accepted. It updates the header checksum incrementally, as RFC 1624
// describes, so that the receiving kernel sees the mark a queue set.
func setECN(b []byte, ecn link.ECN) {
	old := binary.BigEndian.Uint16(b[0:2])
	b[1] = b[1]&^3 | byte(ecn&3)
	updated := binary.BigEndian.Uint16(b[0:2])
	sum := uint32(^binary.BigEndian.Uint16(b[10:12])) + uint32(^old) + uint32(updated)
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	binary.BigEndian.PutUint16(b[10:12], ^uint16(sum))
}

// headerChecksum computes an IPv4 header's checksum field from scratch.
func headerChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(h[i : i+2]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}
