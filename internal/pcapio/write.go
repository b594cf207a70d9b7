// Package pcapio puts mroce packets into pcap files and takes them out of
// captures, so that they can be looked at with Wireshark or tshark and so that
// captures of real traffic can be decoded with `mroce decode --pcap`.
//
// WritePackets writes a classic pcap file with microsecond timestamps and
// link type Ethernet. Every packet is the payload of an Ethernet/IPv4/UDP
// frame with fixed addresses, so that the file is the same byte for byte
// on every run.
//
//	Ethernet  02:00:00:00:00:01 -> 02:00:00:00:00:02, EtherType IPv4
//	IPv4      192.0.2.1 -> 192.0.2.2 of TEST-NET-1, TTL 64, Identification 0,
//	          Don't Fragment set, DSCP as docs/spec.md section 11 defaults it,
//	          26 for data, ACK and NACK, 48 for CNP and 0 otherwise,
//	          ECN ECT(0) for data packets and Not-ECT for the rest, header checksum
//	UDP       source port 49152+i for packet i from 0, modulo 16384,
//	          destination port proto.DefaultPort 4797, checksum
//	time      2026-01-01T00:00:00Z plus i milliseconds
//
// A packet is a data packet when its type byte, byte 1, is a data type by
// proto.Type.IsData. Payloads too short to have one count as control.
//
// Reader reads pcap and pcapng files of the link types Ethernet with or
// without VLAN tags, Linux cooked SLL and SLL2, raw IP, IPv4, IPv6 and BSD
// loopback, and yields the UDP datagrams to or from one port. It needs no
// libpcap.
package pcapio

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mroce/mroce/proto"
)

// The fixed frame fields of WritePackets, which the package comment lists.
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
	// udpChecksumOffset is where the UDP checksum is in a frame, 6 bytes
	// into UDP after 14 bytes of Ethernet and 20 of IPv4.
	udpChecksumOffset = 14 + 20 + 6
)

// WritePackets writes a pcap file to w holding one Ethernet/IPv4/UDP frame per
// payload, in order, as the package comment describes. The same payloads
// always give the same bytes.
func WritePackets(w io.Writer, payloads [][]byte) error {
	pw, err := NewWriter(w)
	if err != nil {
		return err
	}
	src, dst := netip.AddrFrom4([4]byte(srcIP)), netip.AddrFrom4([4]byte(dstIP))
	for i, payload := range payloads {
		var tos uint8 // DSCP and ECN as docs/spec.md section 11 defaults them
		ecn := NotECT
		if len(payload) >= 2 {
			t := proto.Type(payload[1])
			tos = proto.DefaultDSCP(t)
			if t.IsData() {
				ecn = ECT0
			}
		}
		err := pw.WriteDatagram(baseTime.Add(time.Duration(i)*time.Millisecond),
			netip.AddrPortFrom(src, uint16(firstSrcPort+i%srcPortCount)), netip.AddrPortFrom(dst, proto.DefaultPort),
			tos, ecn, payload)
		if err != nil {
			return fmt.Errorf("packet %d: %w", i, err)
		}
	}
	return nil
}

// Writer writes UDP datagrams into a classic pcap file of link type
// Ethernet with microsecond timestamps. Each goes in an Ethernet/IPv4 or
// Ethernet/IPv6 frame with its own addresses, ports, DSCP and ECN, which is
// what a capture of one link of the emulator or of a host needs.
type Writer struct {
	pw   *pcapgo.Writer
	buf  gopacket.SerializeBuffer
	snap int
}

// NewWriter writes the pcap file header to w.
func NewWriter(w io.Writer) (*Writer, error) { return NewWriterSnap(w, snaplen) }

// NewWriterSnap is NewWriter keeping at most snap bytes of each frame, its
// headers and the start of its payload, as a capture with a snap length
// does. That is enough to dissect every header of a long run without
// storing its data.
func NewWriterSnap(w io.Writer, snap int) (*Writer, error) {
	snap = min(max(snap, 64), snaplen)
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcap header: %w", err)
	}
	return &Writer{pw: pw, buf: gopacket.NewSerializeBuffer(), snap: snap}, nil
}

// WriteDatagram writes one datagram. src and dst must both be IPv4 or both IPv6.
func (w *Writer) WriteDatagram(ts time.Time, src, dst netip.AddrPort, dscp uint8, ecn ECN, payload []byte) error {
	frame, err := encodeFrame(w.buf, src, dst, dscp<<2|uint8(ecn)&3, payload)
	if err != nil {
		return err
	}
	kept := frame[:min(len(frame), w.snap)]
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(kept), Length: len(frame)}
	return w.pw.WritePacket(ci, kept)
}

// encodeFrame lays out an Ethernet/IP/UDP frame around payload in buf and
// returns its bytes, valid until buf is used again.
func encodeFrame(buf gopacket.SerializeBuffer, src, dst netip.AddrPort, tos uint8, payload []byte) ([]byte, error) {
	if len(payload) > maxPayload {
		return nil, fmt.Errorf("%d bytes is more than a UDP datagram over IPv4 holds (%d)", len(payload), maxPayload)
	}
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	var network gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC}
	checksumAt := udpChecksumOffset
	switch {
	case src.Addr().Is4() && dst.Addr().Is4():
		eth.EthernetType = layers.EthernetTypeIPv4
		s, d := src.Addr().As4(), dst.Addr().As4()
		ip := &layers.IPv4{Version: 4, TOS: tos, Flags: layers.IPv4DontFragment, TTL: ttl,
			Protocol: layers.IPProtocolUDP, SrcIP: net.IP(s[:]), DstIP: net.IP(d[:])}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		network = ip
	case src.Addr().Is6() && dst.Addr().Is6():
		eth.EthernetType = layers.EthernetTypeIPv6
		s, d := src.Addr().As16(), dst.Addr().As16()
		ip := &layers.IPv6{Version: 6, TrafficClass: tos, HopLimit: ttl, NextHeader: layers.IPProtocolUDP,
			SrcIP: net.IP(s[:]), DstIP: net.IP(d[:])}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		network = ip
		checksumAt = 14 + 40 + 6
	default:
		return nil, fmt.Errorf("addresses %v and %v are not of one IP version", src.Addr(), dst.Addr())
	}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, network, udp, gopacket.Payload(payload)); err != nil {
		return nil, err
	}
	frame := buf.Bytes()
	// A UDP checksum that computes to 0 is sent as 0xffff, because RFC 768
	// gives 0 the meaning "no checksum". gopacket leaves it 0.
	if sum := frame[checksumAt:]; sum[0] == 0 && sum[1] == 0 {
		sum[0], sum[1] = 0xff, 0xff
	}
	return frame, nil
}
