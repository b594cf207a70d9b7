package pcapio

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mroce/mroce/link"
)

// ECN is the 2-bit ECN field of an IP header, RFC 3168, as link defines it.
type ECN = link.ECN

const (
	NotECT = link.NotECT // not ECN-capable
	ECT1   = link.ECT1   // ECN-capable, the codepoint ECT(1)
	ECT0   = link.ECT0   // ECN-capable, ECT(0), which mroce marks its data packets with
	CE     = link.CE     // congestion experienced
)

// DSCPName returns the conventional name of a DSCP value, one of CS0-CS7,
// AF11-AF43, EF and VOICE-ADMIT, or "" when it has none.
func DSCPName(dscp uint8) string {
	switch {
	case dscp == 44:
		return "VOICE-ADMIT"
	case dscp == 46:
		return "EF"
	case dscp&7 == 0 && dscp < 64:
		return fmt.Sprintf("CS%d", dscp>>3)
	case dscp>>3 >= 1 && dscp>>3 <= 4 && dscp&1 == 0 && dscp&7 != 0:
		return fmt.Sprintf("AF%d%d", dscp>>3, dscp&7>>1)
	}
	return ""
}

// Datagram is one UDP datagram found in a capture.
type Datagram struct {
	Frame   int       // 1-based frame number in the file, as Wireshark counts
	Time    time.Time // capture timestamp
	Src     netip.Addr
	Dst     netip.Addr
	SrcPort uint16
	DstPort uint16
	DSCP    uint8 // the upper 6 bits of the IPv4 TOS or IPv6 traffic class
	ECN     ECN   // the lower 2 bits
	// Payload is the UDP payload as captured. It is shorter than Length when
	// the capture's snap length cut the frame.
	Payload []byte
	// Length is the payload length the UDP header states.
	Length int
}

// Truncated reports whether the capture holds less of the payload than the
// datagram carried.
func (d *Datagram) Truncated() bool { return len(d.Payload) < d.Length }

// Stats counts what a Reader has seen so far.
type Stats struct {
	Frames    int // frames read
	Datagrams int // datagrams returned by Next
	// Skipped counts the frames that are not IP or not UDP, UDP on other
	// ports, IP fragments, frames of an unsupported link type and frames too
	// damaged to decode. mroce never fragments, so a fragment is not its.
	Skipped int
}

// Reader reads the UDP datagrams to or from one port out of a pcap or pcapng
// capture.
type Reader struct {
	read  func() ([]byte, gopacket.CaptureInfo, layers.LinkType, error)
	port  uint16
	stats Stats
}

const (
	magicPcapng = 0x0a0d0d0a // pcapng section header block type, either byte order
	// linkTypeSLL2 is LINKTYPE_LINUX_SLL2, 276, the Linux cooked capture v2
	// that tcpdump -i any writes with libpcap 1.10 and later. gopacket
	// v1.1.19 does not know it. Its LinkType is a uint8, so pcapgo hands 276
	// over as 276 mod 256 = 20, a value no link type uses. For an
	// uncompressed pcap file NewReader reads the full value from the file
	// header. In pcapng, 20 is taken to be SLL2.
	linkTypeSLL2     = 276
	linkTypeSLL2Byte = layers.LinkType(linkTypeSLL2 & 0xff)
	sll2HeaderLen    = 20
)

// NewReader reads the file header of the pcap or pcapng capture r, which
// may be a gzip'ed pcap, and returns a Reader for the UDP datagrams whose
// source or destination port is port, or for every UDP datagram when port
// is 0.
func NewReader(r io.Reader, port uint16) (*Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("not a pcap or pcapng file: too short")
		}
		return nil, err
	}
	rd := &Reader{port: port}
	if binary.BigEndian.Uint32(magic) == magicPcapng {
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
		if err != nil {
			return nil, fmt.Errorf("pcapng: %w", err)
		}
		rd.read = func() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
			// With WantMixedLinkType, each packet comes with its
			// interface's link type.
			data, ci, err := ng.ReadPacketData()
			lt := layers.LinkType(0xff) // none, so the frame is skipped
			if len(ci.AncillaryData) > 0 {
				if l, ok := ci.AncillaryData[0].(layers.LinkType); ok {
					lt = l
				}
			}
			return data, ci, lt, err
		}
	} else {
		header, _ := br.Peek(24) // for the link type; shorter if gzip'ed or cut
		header = append([]byte(nil), header...)
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("not a pcap or pcapng file: %w", err)
		}
		lt := pr.LinkType() // the low byte of the file's link type
		full, known := pcapLinkType(header)
		if !known && lt == linkTypeSLL2Byte {
			full = linkTypeSLL2
		} else if !known {
			full = uint32(lt)
		}
		_, _, ok := frameDecoder(nil, lt)
		if !ok || full == uint32(linkTypeSLL2Byte) || (full > 0xff && full != linkTypeSLL2) {
			return nil, fmt.Errorf("unsupported link type %d", full)
		}
		rd.read = func() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
			data, ci, err := pr.ReadPacketData()
			return data, ci, lt, err
		}
	}
	return rd, nil
}

// pcapLinkType reads the link type from a classic pcap file header, in the
// byte order its magic number says. ok is false if header is not one.
func pcapLinkType(header []byte) (lt uint32, ok bool) {
	if len(header) < 24 {
		return 0, false
	}
	switch binary.LittleEndian.Uint32(header) {
	case 0xa1b2c3d4, 0xa1b23c4d: // microsecond, nanosecond timestamps
		return binary.LittleEndian.Uint32(header[20:]), true
	case 0xd4c3b2a1, 0x4d3cb2a1:
		return binary.BigEndian.Uint32(header[20:]), true
	}
	return 0, false
}

// Stats returns the counts so far.
func (r *Reader) Stats() Stats { return r.stats }

// Next returns the next datagram to or from the port, skipping and counting
// every other frame. It returns io.EOF at the end of the capture, and
// io.ErrUnexpectedEOF when the file ends inside a frame.
func (r *Reader) Next() (Datagram, error) {
	for {
		data, ci, lt, err := r.read()
		if err == io.EOF {
			return Datagram{}, io.EOF
		}
		if err != nil {
			return Datagram{}, fmt.Errorf("frame %d: %w", r.stats.Frames+1, err)
		}
		r.stats.Frames++
		d, ok := r.match(data, lt)
		if !ok {
			r.stats.Skipped++
			continue
		}
		r.stats.Datagrams++
		d.Frame = r.stats.Frames
		d.Time = ci.Timestamp
		return d, nil
	}
}

// ReadPayloads reads every UDP payload to or from the port (any port when
// 0) of the capture r, in order, each a copy of its own.
func ReadPayloads(r io.Reader, port uint16) ([][]byte, error) {
	pr, err := NewReader(r, port)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		d, err := pr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, bytes.Clone(d.Payload))
	}
}

// frameDecoder returns the gopacket decoder for a frame of link type lt and
// the part of the frame it decodes. ok is false for link types it does not
// support.
func frameDecoder(frame []byte, lt layers.LinkType) (dec gopacket.Decoder, data []byte, ok bool) {
	switch lt {
	case layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeNull, layers.LinkTypeLoop:
		return lt, frame, true
	case layers.LinkTypeRaw, 12, 14: // LINKTYPE_RAW, and DLT_RAW, which is 12 or 14 on some systems
		return layers.LinkTypeRaw, frame, true
	case layers.LinkTypeIPv4:
		return layers.LayerTypeIPv4, frame, true
	case layers.LinkTypeIPv6:
		return layers.LayerTypeIPv6, frame, true
	case linkTypeSLL2Byte:
		// A Linux cooked v2 header is 20 bytes. It holds the protocol type
		// in 2 bytes, 2 reserved, the interface index in 4, the ARPHRD type
		// in 2, the packet type and the link address length in 1 each, and
		// the link address in 8. The protocol's packet follows.
		if len(frame) < sll2HeaderLen {
			return layers.LinkTypeRaw, nil, true // decodes to nothing
		}
		return layers.EthernetType(binary.BigEndian.Uint16(frame[0:2])), frame[sll2HeaderLen:], true
	}
	return nil, nil, false
}

// match decodes one frame and returns its first UDP datagram to or from the
// port, with the IP header that carries it.
func (r *Reader) match(frame []byte, lt layers.LinkType) (Datagram, bool) {
	dec, data, ok := frameDecoder(frame, lt)
	if !ok {
		return Datagram{}, false
	}
	pkt := gopacket.NewPacket(data, dec, gopacket.DecodeOptions{NoCopy: true})
	var d Datagram
	haveIP := false
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.IPv4:
			if l.Flags&layers.IPv4MoreFragments != 0 || l.FragOffset != 0 {
				return Datagram{}, false
			}
			d.Src, _ = netip.AddrFromSlice(l.SrcIP.To4())
			d.Dst, _ = netip.AddrFromSlice(l.DstIP.To4())
			d.DSCP, d.ECN = l.TOS>>2, ECN(l.TOS&3)
			haveIP = true
		case *layers.IPv6:
			d.Src, _ = netip.AddrFromSlice(l.SrcIP.To16())
			d.Dst, _ = netip.AddrFromSlice(l.DstIP.To16())
			d.DSCP, d.ECN = l.TrafficClass>>2, ECN(l.TrafficClass&3)
			haveIP = true
		case *layers.IPv6Fragment:
			return Datagram{}, false
		case *layers.UDP:
			if !haveIP || r.port != 0 && uint16(l.SrcPort) != r.port && uint16(l.DstPort) != r.port {
				continue // perhaps an outer tunnel datagram, so look further in
			}
			d.SrcPort, d.DstPort = uint16(l.SrcPort), uint16(l.DstPort)
			d.Payload = l.Payload
			d.Length = len(l.Payload)
			if l.Length >= 8 {
				d.Length = int(l.Length) - 8
			}
			return d, true
		}
	}
	return Datagram{}, false
}
