package tunnet

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/mroce/mroce/link"
)

// ipv4 builds an IPv4 packet of proto from src to dst with the given TOS
// and a transport header starting with the two ports, and a valid header
// checksum.
func ipv4(proto byte, src, dst netip.AddrPort, tos byte, payload int) []byte {
	b := make([]byte, 20+8+payload)
	b[0], b[1] = 0x45, tos
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8], b[9] = 64, proto
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint16(b[10:], headerChecksum(b[:20]))
	return b
}

func TestParseIP(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.1.0.1:50000"), netip.MustParseAddrPort("10.1.0.2:4797")
	in, err := parseIP(ipv4(protoUDP, src, dst, 26<<2|2, 100))
	if err != nil || in.src != src || in.dst != dst || in.ecn != link.ECT0 || in.dscp != 26 {
		t.Fatalf("UDP: %+v, %v", in, err)
	}
	icmp := ipv4(1, src, dst, 0, 100)
	if in, err := parseIP(icmp); err != nil || in.src.Port() != 0 || in.dst.Port() != 0 || in.src.Addr() != src.Addr() {
		t.Fatalf("ICMP: %+v, %v", in, err)
	}
	frag := ipv4(protoTCP, src, dst, 0, 100)
	binary.BigEndian.PutUint16(frag[6:], 185) // a later fragment, with no ports in it
	if in, _ := parseIP(frag); in.src.Port() != 0 {
		t.Fatalf("a later fragment's ports: %+v", in)
	}
	good := ipv4(protoUDP, src, dst, 0, 10)
	v6 := append([]byte(nil), good...)
	v6[0] = 0x60
	longHeader := append([]byte(nil), good...)
	longHeader[0] = 0x4F // 60 bytes of header in a 38-byte packet
	shortHeader := append([]byte(nil), good...)
	shortHeader[0] = 0x44
	for name, c := range map[string]struct {
		b    []byte
		want error
	}{
		"empty": {nil, errShort}, "19 bytes": {good[:19], errShort}, "IPv6": {v6, errVersion},
		"header past the end": {longHeader, errHeader}, "header under 20": {shortHeader, errHeader},
		"cut short": {good[:30], errLength},
	} {
		if _, err := parseIP(c.b); err != c.want {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// Setting CE keeps the header checksum valid and touches nothing else.
func TestSetECNKeepsTheChecksum(t *testing.T) {
	for _, tos := range []byte{0, 2, 1, 3, 26<<2 | 2, 0xFD} {
		b := ipv4(protoUDP, netip.MustParseAddrPort("10.3.0.9:1"), netip.MustParseAddrPort("10.3.1.2:2"), tos, 50)
		before := append([]byte(nil), b...)
		setECN(b, link.CE)
		if b[1] != tos|3 || binary.BigEndian.Uint16(b[10:]) != headerChecksum(b[:20]) {
			t.Errorf("TOS %#x: now %#x, checksum %#x want %#x", tos, b[1], binary.BigEndian.Uint16(b[10:]), headerChecksum(b[:20]))
		}
		for i := range b {
			if i != 1 && i != 10 && i != 11 && b[i] != before[i] {
				t.Errorf("TOS %#x: byte %d changed", tos, i)
			}
		}
	}
}

// FuzzParseIP feeds any bytes. Nothing panics, a parsed packet's fields
// come from its bytes, and setting its ECN field keeps its header checksum
// consistent.
func FuzzParseIP(f *testing.F) {
	f.Add(ipv4(protoUDP, netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), 2, 0))
	f.Add(ipv4(protoTCP, netip.MustParseAddrPort("10.2.0.1:80"), netip.MustParseAddrPort("10.2.0.2:443"), 0, 20))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, ok := UDPPayload(b); ok && (len(p) > len(b)-28 || b[9] != protoUDP) {
			t.Fatalf("a UDP payload of %d bytes from a packet of %d (protocol %d)", len(p), len(b), b[9])
		}
		in, err := parseIP(b)
		if err != nil {
			return
		}
		if in.ecn != link.ECN(b[1]&3) || in.src.Addr() != netip.AddrFrom4([4]byte(b[12:16])) {
			t.Fatalf("%+v from % x", in, b[:20])
		}
		ihl := int(b[0]&0x0F) * 4
		valid := binary.BigEndian.Uint16(b[10:]) == headerChecksum(b[:ihl])
		setECN(b, link.CE)
		if valid && binary.BigEndian.Uint16(b[10:]) != headerChecksum(b[:ihl]) {
			t.Fatal("a valid checksum went wrong")
		}
	})
}

// UDPPayload returns the UDP payload of a UDP packet, whatever its IP
// options, and nothing from TCP, fragments or a bad header.
func TestUDPPayload(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.1.0.1:50000"), netip.MustParseAddrPort("10.1.0.2:4797")
	b := ipv4(protoUDP, src, dst, 0, 5)
	copy(b[28:], "hello")
	if p, ok := UDPPayload(b); !ok || string(p) != "hello" {
		t.Fatalf("UDP: %q %v", p, ok)
	}
	if _, ok := UDPPayload(ipv4(protoTCP, src, dst, 0, 5)); ok {
		t.Fatal("TCP gave a UDP payload")
	}
	frag := ipv4(protoUDP, src, dst, 0, 5)
	binary.BigEndian.PutUint16(frag[6:], 0x2000) // more fragments
	binary.BigEndian.PutUint16(frag[10:], 0)
	binary.BigEndian.PutUint16(frag[10:], headerChecksum(frag[:20]))
	if _, ok := UDPPayload(frag); ok {
		t.Fatal("a first fragment gave a UDP payload")
	}
	if _, ok := UDPPayload(b[:27]); ok {
		t.Fatal("a truncated packet gave a UDP payload")
	}
}
