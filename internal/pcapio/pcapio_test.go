package pcapio

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mroce/mroce/proto"
)

// buildPacket returns a sealed mroce packet of type t with payloadLen bytes
// of payload.
func buildPacket(t *testing.T, typ proto.Type, payloadLen int) []byte {
	t.Helper()
	var p proto.Packet
	buf := make([]byte, 2048)
	if err := proto.Build(&p, buf, typ, 0, payloadLen); err != nil {
		t.Fatal(err)
	}
	p.Common.SetDstConnID(0x01020304)
	p.Common.SetTimestamp(99)
	if typ == proto.TypeWrite {
		p.Write().SetMsgLen(uint32(payloadLen))
	}
	for i := range p.Payload {
		p.Payload[i] = byte(i)
	}
	return bytes.Clone(p.Seal())
}

// onesSum is the 16-bit ones' complement sum of b by RFC 1071, not inverted.
func onesSum(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return sum
}

// pcapRecord is one record of a classic pcap file.
type pcapRecord struct {
	sec, usec, capLen, origLen uint32
	data                       []byte
}

// parsePcap reads a little-endian microsecond pcap file by hand, so that
// the writer is checked without trusting the reader.
func parsePcap(t *testing.T, file []byte) (snaplen, linkType uint32, recs []pcapRecord) {
	t.Helper()
	le := binary.LittleEndian
	if len(file) < 24 {
		t.Fatalf("file of %d bytes", len(file))
	}
	if m := le.Uint32(file); m != 0xa1b2c3d4 {
		t.Fatalf("magic %#x, want 0xa1b2c3d4 (little-endian, microseconds)", m)
	}
	if maj, min := le.Uint16(file[4:]), le.Uint16(file[6:]); maj != 2 || min != 4 {
		t.Fatalf("version %d.%d, want 2.4", maj, min)
	}
	snaplen, linkType = le.Uint32(file[16:]), le.Uint32(file[20:])
	for rest := file[24:]; len(rest) > 0; {
		if len(rest) < 16 {
			t.Fatalf("record header of %d bytes", len(rest))
		}
		r := pcapRecord{le.Uint32(rest), le.Uint32(rest[4:]), le.Uint32(rest[8:]), le.Uint32(rest[12:]), nil}
		if int(r.capLen) > len(rest)-16 {
			t.Fatalf("record of %d bytes, %d left", r.capLen, len(rest)-16)
		}
		r.data = rest[16 : 16+r.capLen]
		rest = rest[16+r.capLen:]
		recs = append(recs, r)
	}
	return snaplen, linkType, recs
}

func TestWritePacketsLayout(t *testing.T) {
	payloads := [][]byte{
		buildPacket(t, proto.TypeWrite, 40), // data
		buildPacket(t, proto.TypeCNP, 0),    // control
		buildPacket(t, proto.TypeReadReq, 0),
		buildPacket(t, proto.TypeAck, 0),
		{0x00}, // too short to have a type, so control
	}
	var out bytes.Buffer
	if err := WritePackets(&out, payloads); err != nil {
		t.Fatal(err)
	}
	snaplen, linkType, recs := parsePcap(t, out.Bytes())
	if linkType != 1 {
		t.Errorf("link type %d, want 1 (Ethernet)", linkType)
	}
	if snaplen < 65535 {
		t.Errorf("snaplen %d is below the largest frame", snaplen)
	}
	if len(recs) != len(payloads) {
		t.Fatalf("%d records, want %d", len(recs), len(payloads))
	}
	wantTOS := []byte{0x6a, 0xc0, 0x6a, 0x68, 0x00} // DSCP 26 with ECT0, 48, 26 with ECT0, 26, 0
	be := binary.BigEndian
	for i, r := range recs {
		payload := payloads[i]
		ts := time.Unix(int64(r.sec), int64(r.usec)*1000).UTC()
		if want := time.Date(2026, 1, 1, 0, 0, 0, int(time.Duration(i)*time.Millisecond), time.UTC); !ts.Equal(want) {
			t.Errorf("packet %d: time %v, want %v", i, ts, want)
		}
		if r.capLen != r.origLen {
			t.Errorf("packet %d: captured %d of %d bytes", i, r.capLen, r.origLen)
		}
		f := r.data
		wantLen := 14 + 20 + 8 + len(payload)
		if len(f) != max(wantLen, 60) {
			t.Fatalf("packet %d: frame of %d bytes, want %d", i, len(f), max(wantLen, 60))
		}
		// Ethernet
		if !bytes.Equal(f[0:6], []byte{2, 0, 0, 0, 0, 2}) || !bytes.Equal(f[6:12], []byte{2, 0, 0, 0, 0, 1}) {
			t.Errorf("packet %d: MACs % x -> % x", i, f[6:12], f[0:6])
		}
		if be.Uint16(f[12:]) != 0x0800 {
			t.Errorf("packet %d: EtherType %#04x", i, be.Uint16(f[12:]))
		}
		// IPv4
		ip := f[14:34]
		if ip[0] != 0x45 {
			t.Errorf("packet %d: version/IHL %#02x", i, ip[0])
		}
		if ip[1] != wantTOS[i] {
			t.Errorf("packet %d: TOS %#02x, want %#02x", i, ip[1], wantTOS[i])
		}
		if got := int(be.Uint16(ip[2:])); got != 20+8+len(payload) {
			t.Errorf("packet %d: IP total length %d", i, got)
		}
		if be.Uint16(ip[4:]) != 0 || be.Uint16(ip[6:]) != 0x4000 {
			t.Errorf("packet %d: id %#04x flags/offset %#04x, want 0 and DF", i, be.Uint16(ip[4:]), be.Uint16(ip[6:]))
		}
		if ip[8] != 64 || ip[9] != 17 {
			t.Errorf("packet %d: TTL %d protocol %d", i, ip[8], ip[9])
		}
		if onesSum(0, ip) != 0xffff {
			t.Errorf("packet %d: bad IPv4 header checksum %#04x", i, be.Uint16(ip[10:]))
		}
		if !bytes.Equal(ip[12:16], []byte{192, 0, 2, 1}) || !bytes.Equal(ip[16:20], []byte{192, 0, 2, 2}) {
			t.Errorf("packet %d: addresses %v -> %v", i, net.IP(ip[12:16]), net.IP(ip[16:20]))
		}
		// UDP
		udp := f[34 : 34+8+len(payload)]
		if sp, dp := be.Uint16(udp), be.Uint16(udp[2:]); sp != uint16(49152+i) || dp != 4797 {
			t.Errorf("packet %d: ports %d -> %d, want %d -> 4797", i, sp, dp, 49152+i)
		}
		if got := int(be.Uint16(udp[4:])); got != 8+len(payload) {
			t.Errorf("packet %d: UDP length %d", i, got)
		}
		if !udpChecksumOK(ip, udp) {
			t.Errorf("packet %d: bad UDP checksum %#04x", i, be.Uint16(udp[6:]))
		}
		if !bytes.Equal(udp[8:], payload) {
			t.Errorf("packet %d: payload differs", i)
		}
	}
}

// udpChecksumOK checks a UDP checksum over the IPv4 pseudo-header.
func udpChecksumOK(ip, udp []byte) bool {
	if udp[6] == 0 && udp[7] == 0 {
		return false // no checksum
	}
	pseudo := append(append([]byte{}, ip[12:20]...), 0, 17, byte(len(udp)>>8), byte(len(udp)))
	return onesSum(onesSum(0, pseudo), udp) == 0xffff
}

// TestWritePacketsZeroChecksum crafts a payload whose UDP checksum computes
// to 0, which must go on the wire as 0xffff.
func TestWritePacketsZeroChecksum(t *testing.T) {
	payload := make([]byte, 40)
	copy(payload, "a payload made to checksum to zero")
	udp := make([]byte, 8+len(payload))
	be := binary.BigEndian
	be.PutUint16(udp, 49152)
	be.PutUint16(udp[2:], 4797)
	be.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	pseudo := []byte{192, 0, 2, 1, 192, 0, 2, 2, 0, 17, 0, byte(len(udp))}
	// Pick the last two payload bytes so that the sum is 0xffff. The
	// checksum, its complement, is then 0.
	s := onesSum(onesSum(0, pseudo), udp)
	be.PutUint16(payload[len(payload)-2:], uint16(0xffff-s))

	var out bytes.Buffer
	if err := WritePackets(&out, [][]byte{payload}); err != nil {
		t.Fatal(err)
	}
	_, _, recs := parsePcap(t, out.Bytes())
	f := recs[0].data
	if got := be.Uint16(f[40:]); got != 0xffff {
		t.Fatalf("UDP checksum %#04x, want 0xffff", got)
	}
	if !udpChecksumOK(f[14:34], f[34:]) {
		t.Fatal("checksum does not verify")
	}
}

func TestWritePacketsDeterministic(t *testing.T) {
	payloads := [][]byte{buildPacket(t, proto.TypeWrite, 100), buildPacket(t, proto.TypeClose, 0)}
	var a, b bytes.Buffer
	if err := WritePackets(&a, payloads); err != nil {
		t.Fatal(err)
	}
	if err := WritePackets(&b, payloads); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two writes of the same packets differ")
	}
}

func TestWritePacketsLimits(t *testing.T) {
	var out bytes.Buffer
	if err := WritePackets(&out, [][]byte{make([]byte, 65507)}); err != nil {
		t.Fatalf("largest datagram: %v", err)
	}
	err := WritePackets(&out, [][]byte{{1}, make([]byte, 65508)})
	if err == nil || !strings.Contains(err.Error(), "packet 1") {
		t.Fatalf("oversized datagram: err = %v", err)
	}
	out.Reset()
	if err := WritePackets(&out, nil); err != nil || out.Len() != 24 {
		t.Fatalf("no packets: %d bytes, %v; want a bare 24-byte header", out.Len(), err)
	}
}

func TestRoundTrip(t *testing.T) {
	payloads := [][]byte{
		buildPacket(t, proto.TypeWrite, 64),
		buildPacket(t, proto.TypeAck, 0),
		buildPacket(t, proto.TypeProbe, 300),
		{}, // empty datagram
	}
	var out bytes.Buffer
	if err := WritePackets(&out, payloads); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(&out, proto.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range payloads {
		d, err := r.Next()
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if d.Frame != i+1 {
			t.Errorf("datagram %d: frame %d", i, d.Frame)
		}
		if wt := time.Date(2026, 1, 1, 0, 0, 0, i*1e6, time.UTC); !d.Time.Equal(wt) {
			t.Errorf("datagram %d: time %v, want %v", i, d.Time, wt)
		}
		if d.Src != netip.MustParseAddr("192.0.2.1") || d.Dst != netip.MustParseAddr("192.0.2.2") {
			t.Errorf("datagram %d: %v -> %v", i, d.Src, d.Dst)
		}
		if d.SrcPort != uint16(49152+i) || d.DstPort != proto.DefaultPort {
			t.Errorf("datagram %d: ports %d -> %d", i, d.SrcPort, d.DstPort)
		}
		wantECN, wantDSCP := NotECT, uint8(0)
		if len(want) > 1 {
			wantDSCP = proto.DefaultDSCP(proto.Type(want[1]))
			if proto.Type(want[1]).IsData() {
				wantECN = ECT0
			}
		}
		if d.DSCP != wantDSCP || d.ECN != wantECN {
			t.Errorf("datagram %d: DSCP %d ECN %v, want %d %v", i, d.DSCP, d.ECN, wantDSCP, wantECN)
		}
		if !bytes.Equal(d.Payload, want) || d.Length != len(want) || d.Truncated() {
			t.Errorf("datagram %d: payload %d bytes (length %d), want %d", i, len(d.Payload), d.Length, len(want))
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last datagram: %v, want io.EOF", err)
	}
	if s := r.Stats(); s != (Stats{Frames: 4, Datagrams: 4}) {
		t.Errorf("stats %+v", s)
	}
}

// The link-layer tests below build frames by hand around IP packets that
// gopacket serializes.

var (
	v4a = netip.MustParseAddr("198.51.100.7")
	v4b = netip.MustParseAddr("198.51.100.8")
	v6a = netip.MustParseAddr("2001:db8::1")
	v6b = netip.MustParseAddr("2001:db8::2")
)

// ipUDP returns an IPv4 or IPv6 packet carrying a UDP datagram, of the
// version of the addresses.
func ipUDP(t *testing.T, src, dst netip.Addr, tos uint8, sport, dport uint16, payload []byte) []byte {
	t.Helper()
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	var ip gopacket.SerializableLayer
	if src.Is4() {
		l := &layers.IPv4{Version: 4, TOS: tos, TTL: 9, Protocol: layers.IPProtocolUDP,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		_ = udp.SetNetworkLayerForChecksum(l)
		ip = l
	} else {
		l := &layers.IPv6{Version: 6, TrafficClass: tos, HopLimit: 9, NextHeader: layers.IPProtocolUDP,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		_ = udp.SetNetworkLayerForChecksum(l)
		ip = l
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

func etherType(ip []byte) uint16 {
	if ip[0]>>4 == 6 {
		return 0x86dd
	}
	return 0x0800
}

// Link-layer framings of an IP packet.
func ethernetVLAN(ip []byte) []byte {
	f := []byte{2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x81, 0x00, 0x00, 0x64, 0, 0}
	binary.BigEndian.PutUint16(f[16:], etherType(ip))
	return append(f, ip...)
}

func sll(ip []byte) []byte {
	f := []byte{0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 0xa, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(f[14:], etherType(ip))
	return append(f, ip...)
}

func sll2(ip []byte) []byte {
	f := []byte{0, 0, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 0xa, 0, 0}
	binary.BigEndian.PutUint16(f[0:], etherType(ip))
	return append(f, ip...)
}

func null(ip []byte) []byte { // BSD loopback, the address family in little-endian host order
	f := []byte{2, 0, 0, 0}
	if ip[0]>>4 == 6 {
		f[0] = 30 // AF_INET6 on macOS
	}
	return append(f, ip...)
}

func raw(ip []byte) []byte { return ip }

// pcapFile writes a classic pcap with any link type number, which pcapgo's
// writer cannot because its LinkType is a byte.
func pcapFile(t *testing.T, linkType uint32, snaplen uint32, frames ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	h := make([]byte, 24)
	le := binary.LittleEndian
	le.PutUint32(h, 0xa1b2c3d4)
	le.PutUint16(h[4:], 2)
	le.PutUint16(h[6:], 4)
	le.PutUint32(h[16:], 65535)
	le.PutUint32(h[20:], linkType)
	buf.Write(h)
	w := pcapgo.NewWriter(&buf)
	for i, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1000+int64(i), 0), Length: len(f), CaptureLength: len(f)}
		if snaplen > 0 && len(f) > int(snaplen) {
			ci.CaptureLength = int(snaplen)
			f = f[:snaplen]
		}
		if err := w.WritePacket(ci, f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// pcapngFile writes a pcapng file with one interface per frame.
func pcapngFile(t *testing.T, linkTypes []layers.LinkType, frames ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{LinkType: linkTypes[0], SnapLength: 65535},
		pcapgo.DefaultNgWriterOptions)
	if err != nil {
		t.Fatal(err)
	}
	for i, lt := range linkTypes[1:] {
		if id, err := w.AddInterface(pcapgo.NgInterface{LinkType: lt, SnapLength: 65535}); err != nil || id != i+1 {
			t.Fatalf("interface %d: id %d, %v", i+1, id, err)
		}
	}
	for i, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1000+int64(i), 0), Length: len(f), CaptureLength: len(f),
			InterfaceIndex: i % len(linkTypes)}
		if err := w.WritePacket(ci, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAll(t *testing.T, file []byte, port uint16) ([]Datagram, Stats) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(file), port)
	if err != nil {
		t.Fatal(err)
	}
	var ds []Datagram
	for {
		d, err := r.Next()
		if err == io.EOF {
			return ds, r.Stats()
		}
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
}

func TestReadLinkTypes(t *testing.T) {
	payload := []byte("mroce payload")
	tests := []struct {
		name     string
		linkType uint32
		frame    func([]byte) []byte
	}{
		{"ethernet+vlan", 1, ethernetVLAN},
		{"linux sll", 113, sll},
		{"linux sll2", 276, sll2},
		{"raw", 101, raw},
		{"raw dlt 12", 12, raw},
		{"ipv4 or ipv6", 0, raw}, // 228 for IPv4, 229 for IPv6, set below
		{"null", 0, null},
	}
	for _, tt := range tests {
		for _, v6 := range []bool{false, true} {
			name := tt.name + "/ipv4"
			src, dst := v4a, v4b
			if v6 {
				name = tt.name + "/ipv6"
				src, dst = v6a, v6b
			}
			t.Run(name, func(t *testing.T) {
				lt := tt.linkType
				if tt.name == "ipv4 or ipv6" {
					lt = 228
					if v6 {
						lt = 229
					}
				}
				frames := [][]byte{
					tt.frame(ipUDP(t, src, dst, 0x6b, 50000, 4797, payload)), // DSCP 26, CE
					tt.frame(ipUDP(t, dst, src, 0x00, 4797, 50000, payload)), // a reply, whose source port matches
					tt.frame(ipUDP(t, src, dst, 0x00, 53, 53, payload)),      // another port, skipped
				}
				ds, stats := readAll(t, pcapFile(t, lt, 0, frames...), 4797)
				if len(ds) != 2 {
					t.Fatalf("%d datagrams, want 2 (stats %+v)", len(ds), stats)
				}
				if stats != (Stats{Frames: 3, Datagrams: 2, Skipped: 1}) {
					t.Errorf("stats %+v", stats)
				}
				d := ds[0]
				if d.Frame != 1 || d.Src != src || d.Dst != dst || d.SrcPort != 50000 || d.DstPort != 4797 ||
					d.DSCP != 26 || d.ECN != CE || !bytes.Equal(d.Payload, payload) || !d.Time.Equal(time.Unix(1000, 0)) {
					t.Errorf("first datagram %+v", d)
				}
				d = ds[1]
				if d.Frame != 2 || d.Src != dst || d.SrcPort != 4797 || d.DSCP != 0 || d.ECN != NotECT {
					t.Errorf("second datagram %+v", d)
				}
			})
		}
	}
}

func TestReadPcapngMixedLinkTypes(t *testing.T) {
	payload := []byte{1, 2, 3, 4}
	ip := ipUDP(t, v4a, v4b, 0x6a, 49152, 4797, payload)
	ip6 := ipUDP(t, v6a, v6b, 0x02, 49153, 4797, payload)
	// The interfaces are Ethernet, SLL, SLL2, raw IP and 802.11, whose
	// frames are skipped. pcapgo writes SLL2 as 20, the low byte of 276.
	lts := []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, linkTypeSLL2Byte,
		layers.LinkTypeRaw, layers.LinkTypeIEEE802_11}
	file := pcapngFile(t, lts, ethernetVLAN(ip), sll(ip6), sll2(ip), raw(ip6), []byte("not 802.11 at all"))
	ds, stats := readAll(t, file, 4797)
	if stats != (Stats{Frames: 5, Datagrams: 4, Skipped: 1}) {
		t.Errorf("stats %+v", stats)
	}
	if len(ds) != 4 {
		t.Fatalf("%d datagrams", len(ds))
	}
	for i, d := range ds {
		if d.Frame != i+1 || !bytes.Equal(d.Payload, payload) || d.DstPort != 4797 {
			t.Errorf("datagram %d: %+v", i, d)
		}
	}
	if ds[1].Src != v6a || ds[1].ECN != ECT0 || ds[1].DSCP != 0 {
		t.Errorf("IPv6 over SLL: %+v", ds[1])
	}
}

func TestReadSkips(t *testing.T) {
	payload := []byte("abcdefgh")
	udp := ipUDP(t, v4a, v4b, 0, 49152, 4797, payload)
	// An IPv4 fragment has MF set. mroce never fragments, so fragments are skipped.
	frag := bytes.Clone(udp)
	frag[6] |= 0x20
	binary.BigEndian.PutUint16(frag[10:], 0)
	binary.BigEndian.PutUint16(frag[10:], ^uint16(onesSum(0, frag[:20])))
	tcp := bytes.Clone(udp)
	tcp[9] = 6
	arp := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1}
	eth := func(ip []byte) []byte {
		return append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}, ip...)
	}
	frames := [][]byte{eth(frag), eth(tcp), arp, eth(udp[:10]), eth(udp), {0x01}}
	ds, stats := readAll(t, pcapFile(t, 1, 0, frames...), 4797)
	if len(ds) != 1 || ds[0].Frame != 5 || !bytes.Equal(ds[0].Payload, payload) {
		t.Fatalf("datagrams %+v", ds)
	}
	if stats != (Stats{Frames: 6, Datagrams: 1, Skipped: 5}) {
		t.Errorf("stats %+v", stats)
	}
}

func TestReadTruncatedCapture(t *testing.T) {
	payload := bytes.Repeat([]byte{0xab}, 200)
	frame := ethernetVLAN(ipUDP(t, v4a, v4b, 0, 49152, 4797, payload))
	ds, _ := readAll(t, pcapFile(t, 1, 100, frame), 4797)
	if len(ds) != 1 {
		t.Fatalf("%d datagrams", len(ds))
	}
	d := ds[0]
	if !d.Truncated() || d.Length != 200 || len(d.Payload) != 100-18-28 {
		t.Errorf("truncated capture: %d of %d bytes, Truncated %v", len(d.Payload), d.Length, d.Truncated())
	}
}

func TestReadEthernetPadding(t *testing.T) {
	// A short frame padded to 60 bytes has its payload end where IP says.
	frame := append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}, ipUDP(t, v4a, v4b, 0, 1, 4797, []byte{7})...)
	frame = append(frame, make([]byte, 60-len(frame))...)
	ds, _ := readAll(t, pcapFile(t, 1, 0, frame), 4797)
	if len(ds) != 1 || !bytes.Equal(ds[0].Payload, []byte{7}) {
		t.Fatalf("datagrams %+v", ds)
	}
}

func TestReadErrors(t *testing.T) {
	good := pcapFile(t, 1, 0, ethernetVLAN(ipUDP(t, v4a, v4b, 0, 1, 4797, []byte{1, 2})))
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "not a pcap or pcapng file"},
		{"text", []byte("this is not a capture file, just text"), "not a pcap or pcapng file"},
		{"802.11", pcapFile(t, 105, 0), "unsupported link type 105"},
		{"unknown big link type", pcapFile(t, 300, 0), "unsupported link type 300"},
		{"link type 20 itself", pcapFile(t, 20, 0), "unsupported link type 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tt.file), 4797)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	// A file cut inside a record reads its whole frames, then fails.
	cut := good[:len(good)-3]
	r, err := NewReader(bytes.NewReader(cut), 4797)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err == nil || err == io.EOF {
		t.Fatalf("cut file: err = %v, want an error other than io.EOF", err)
	} else if !strings.Contains(err.Error(), "frame 1") {
		t.Errorf("cut file: err = %v, want it to name frame 1", err)
	}
}

func TestECNString(t *testing.T) {
	for e, want := range map[ECN]string{NotECT: "Not-ECT", ECT1: "ECT(1)", ECT0: "ECT(0)", CE: "CE"} {
		if e.String() != want {
			t.Errorf("%d: %q, want %q", e, e.String(), want)
		}
	}
}

func TestDSCPName(t *testing.T) {
	for d, want := range map[uint8]string{0: "CS0", 8: "CS1", 26: "AF31", 10: "AF11", 38: "AF43", 46: "EF",
		48: "CS6", 56: "CS7", 44: "VOICE-ADMIT", 1: "", 50: "", 63: ""} {
		if got := DSCPName(d); got != want {
			t.Errorf("DSCPName(%d) = %q, want %q", d, got, want)
		}
	}
}

// Writer carries each datagram's own addresses, ports, DSCP and ECN, over
// IPv4 and IPv6, and the reader gets them back.
func TestWriterDatagrams(t *testing.T) {
	var out bytes.Buffer
	w, err := NewWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	type dg struct {
		src, dst string
		dscp     uint8
		ecn      ECN
	}
	in := []dg{
		{"10.1.0.5:50001", "10.1.0.9:4797", 26, CE},
		{"[fd00::1]:49999", "[fd00::2]:4797", 48, NotECT},
	}
	ts := time.Date(2026, 3, 1, 0, 0, 0, 5000, time.UTC)
	for i, d := range in {
		if err := w.WriteDatagram(ts.Add(time.Duration(i)*time.Microsecond), netip.MustParseAddrPort(d.src),
			netip.MustParseAddrPort(d.dst), d.dscp, d.ecn, []byte{byte(i), 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteDatagram(ts, netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("[fd00::2]:2"), 0, 0, nil); err == nil {
		t.Error("mixed IPv4/IPv6 addresses accepted")
	}
	r, err := NewReader(&out, proto.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range in {
		got, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		src, dst := netip.MustParseAddrPort(d.src), netip.MustParseAddrPort(d.dst)
		if got.Src != src.Addr() || got.Dst != dst.Addr() || got.SrcPort != src.Port() || got.DstPort != dst.Port() ||
			got.DSCP != d.dscp || got.ECN != d.ecn || got.Payload[0] != byte(i) || !got.Time.Equal(ts.Add(time.Duration(i)*time.Microsecond)) {
			t.Errorf("datagram %d read back as %+v", i, got)
		}
	}
}

// A writer with a snap length keeps the headers and the start of each
// datagram, records its whole length, and reads back as truncated.
func TestWriterSnapLength(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriterSnap(&buf, 200)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte{0xcd}, 1000)
	src, dst := netip.MustParseAddrPort("192.0.2.1:49152"), netip.MustParseAddrPort("192.0.2.2:4797")
	if err := w.WriteDatagram(time.Unix(1, 0), src, dst, 26, ECT0, payload); err != nil {
		t.Fatal(err)
	}
	ds, _ := readAll(t, buf.Bytes(), 4797)
	if len(ds) != 1 {
		t.Fatalf("%d datagrams", len(ds))
	}
	if d := ds[0]; !d.Truncated() || d.Length != 1000 || len(d.Payload) != 200-14-20-8 || !bytes.Equal(d.Payload, payload[:len(d.Payload)]) {
		t.Fatalf("kept %d of %d bytes, Truncated %v", len(d.Payload), d.Length, d.Truncated())
	}
}

// ReadPayloads gives the payloads of the datagrams on the port, in order,
// and passes over the rest.
func TestReadPayloads(t *testing.T) {
	a, b := buildPacket(t, proto.TypeWrite, 16), buildPacket(t, proto.TypeSend, 32)
	var buf bytes.Buffer
	if err := WritePackets(&buf, [][]byte{a, b}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPayloads(bytes.NewReader(buf.Bytes()), proto.DefaultPort)
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("%d payloads (%v)", len(got), err)
	}
	if got, err := ReadPayloads(bytes.NewReader(buf.Bytes()), proto.DefaultPort+1); err != nil || len(got) != 0 {
		t.Fatalf("another port: %d payloads (%v)", len(got), err)
	}
}
