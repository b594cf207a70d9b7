// Package pcapio puts mroce packets into pcap files and takes them out of
// captures, so that they can be looked at with Wireshark or tshark and so that
// captures of real traffic can be decoded with `mroce decode --pcap`.
//
// WritePackets writes a classic pcap file (microsecond timestamps, link type
// Ethernet) in which every packet is the payload of an Ethernet/IPv4/UDP
// frame with fixed addresses, so that the file is byte-for-byte reproducible:
//
//	Ethernet  02:00:00:00:00:01 -> 02:00:00:00:00:02, EtherType IPv4
//	IPv4      192.0.2.1 -> 192.0.2.2 (TEST-NET-1), TTL 64, Identification 0,
//	          Don't Fragment set, DSCP as docs/spec.md section 11 defaults it
//	          (26 for data, ACK and NACK, 48 for CNP, 0 otherwise) and ECN
//	          ECT(0) for data packets, Not-ECT for the rest, header checksum
//	UDP       source port 49152+i (packet i, from 0, modulo 16384),
//	          destination port proto.DefaultPort (4797), checksum
//	time      2026-01-01T00:00:00Z plus i milliseconds
//
// A packet is a data packet when its type byte (byte 1) is a data type
// (proto.Type.IsData); payloads too short to have one count as control.
//
// Reader reads pcap and pcapng files with Ethernet (VLAN tags included),
// Linux cooked (SLL and SLL2), raw IP, IPv4, IPv6 and BSD loopback link types,
// and yields the UDP datagrams to or from one port. It needs no libpcap.
package pcapio

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mroce/mroce/proto"
)

// The fixed frame fields of WritePackets (see the package comment).
var (
	srcMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	dstMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
	srcIP  = net.IPv4(192, 0, 2, 1).To4()
	dstIP  = net.IPv4(192, 0, 2, 2).To4()
	// baseTime is the timestamp of the first packet; packet i is i ms later.
	baseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

const (
	firstSrcPort = 49152 // the first port of the dynamic range
	srcPortCount = 65536 - firstSrcPort
	ttl          = 64
	// snaplen is large enough for the largest UDP datagram with its headers.
	snaplen = 262144
	// maxPayload is the largest UDP payload an IPv4 packet can hold.
	maxPayload = 65535 - 20 - 8
	// udpChecksumOffset is where the UDP checksum is in a frame: after the
	// Ethernet (14 bytes) and IPv4 (20 bytes) headers, 6 bytes into UDP.
	udpChecksumOffset = 14 + 20 + 6
)

// WritePackets writes a pcap file to w holding one Ethernet/IPv4/UDP frame per
// payload, in order, as the package comment describes. The same payloads
// always give the same bytes.
func WritePackets(w io.Writer, payloads [][]byte) error {
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(snaplen, layers.LinkTypeEthernet); err != nil {
		return fmt.Errorf("pcap header: %w", err)
	}
	buf := gopacket.NewSerializeBuffer()
	for i, payload := range payloads {
		frame, err := encodeFrame(buf, i, payload)
		if err != nil {
			return fmt.Errorf("packet %d: %w", i, err)
		}
		ci := gopacket.CaptureInfo{
			Timestamp:     baseTime.Add(time.Duration(i) * time.Millisecond),
			CaptureLength: len(frame),
			Length:        len(frame),
		}
		if err := pw.WritePacket(ci, frame); err != nil {
			return fmt.Errorf("packet %d: %w", i, err)
		}
	}
	return nil
}

// encodeFrame lays out frame i around payload in buf and returns its bytes,
// valid until buf is used again.
func encodeFrame(buf gopacket.SerializeBuffer, i int, payload []byte) ([]byte, error) {
	if len(payload) > maxPayload {
		return nil, fmt.Errorf("%d bytes is more than a UDP datagram over IPv4 holds (%d)", len(payload), maxPayload)
	}
	var tos uint8 // DSCP and ECN as docs/spec.md section 11 defaults them
	if len(payload) >= 2 {
		t := proto.Type(payload[1])
		tos = proto.DefaultDSCP(t) << 2
		if t.IsData() {
			tos |= uint8(ECT0)
		}
	}
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{
		Version:  4,
		TOS:      tos,
		Flags:    layers.IPv4DontFragment,
		TTL:      ttl,
		Protocol: layers.IPProtocolUDP,
		SrcIP:    srcIP,
		DstIP:    dstIP,
	}
	udp := &layers.UDP{
		SrcPort: layers.UDPPort(firstSrcPort + i%srcPortCount),
		DstPort: layers.UDPPort(proto.DefaultPort),
	}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		return nil, err
	}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		return nil, err
	}
	frame := buf.Bytes()
	// A UDP checksum that computes to 0 is sent as 0xffff: over IPv4, 0 means
	// "no checksum" (RFC 768). gopacket leaves it 0.
	if sum := frame[udpChecksumOffset:]; sum[0] == 0 && sum[1] == 0 {
		sum[0], sum[1] = 0xff, 0xff
	}
	return frame, nil
}
