package udp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// recvTOS builds the ancillary data the kernel delivers for IP_RECVTOS,
// one byte of data.
func recvTOS(tos byte) []byte {
	b := make([]byte, unix.CmsgSpace(1))
	putCmsgHeader(b, unix.CmsgLen(1), unix.IPPROTO_IP, unix.IP_TOS)
	b[unix.CmsgLen(0)] = tos
	return b
}

func TestParseAncillaryFindsTOSInV4AndV6(t *testing.T) {
	for _, tos := range []byte{0x00, 0x02, 0x03, 26<<2 | 2, 0xFF} {
		if a := parseAncillary(recvTOS(tos)); !a.hasTOS || a.tos != tos {
			got, ok := a.tos, a.hasTOS
			t.Errorf("v4 TOS %#x: got %#x, %v", tos, got, ok)
		}
		oob := make([]byte, oobSpace)
		n := putTOS(oob, tos, true) // IPV6_TCLASS has the same layout both ways
		if a := parseAncillary(oob[:n]); !a.hasTOS || a.tos != tos {
			got, ok := a.tos, a.hasTOS
			t.Errorf("v6 traffic class %#x: got %#x, %v", tos, got, ok)
		}
	}
}

func TestParseAncillaryReadsDropsAndTOS(t *testing.T) {
	drops := make([]byte, unix.CmsgSpace(4))
	putCmsgHeader(drops, unix.CmsgLen(4), unix.SOL_SOCKET, unix.SO_RXQ_OVFL)
	binary.NativeEndian.PutUint32(drops[unix.CmsgLen(0):], 17)
	other := make([]byte, unix.CmsgSpace(4))
	putCmsgHeader(other, unix.CmsgLen(4), unix.SOL_SOCKET, unix.SO_TIMESTAMP)
	oob := append(append(append([]byte(nil), other...), drops...), recvTOS(0x03)...)
	a := parseAncillary(oob)
	if !a.hasTOS || a.tos != 0x03 || !a.hasDrop || a.drops != 17 {
		t.Fatalf("got %+v", a)
	}
	if a := parseAncillary(other); a.hasTOS || a.hasDrop {
		t.Fatalf("found %+v where there is nothing", a)
	}
}

// recvGRO builds the ancillary data the kernel delivers with a message of
// joined datagrams, whose size is an int.
func recvGRO(size int32) []byte {
	b := make([]byte, unix.CmsgSpace(4))
	putCmsgHeader(b, unix.CmsgLen(4), unix.SOL_UDP, unix.UDP_GRO)
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(size))
	return b
}

func TestParseAncillaryReadsGROSize(t *testing.T) {
	oob := append(recvTOS(0x02), recvGRO(4160)...)
	if a := parseAncillary(oob); a.segment != 4160 || !a.hasTOS || a.tos != 0x02 {
		t.Errorf("got %+v, want segment 4160 and TOS 0x02", a)
	}
	for _, bad := range []int32{0, -1} {
		if a := parseAncillary(recvGRO(bad)); a.segment != 0 {
			t.Errorf("size %d: segment %d, want none", bad, a.segment)
		}
	}
}

func TestParseAncillaryRejectsBadLengths(t *testing.T) {
	good := recvTOS(0x02)
	cases := map[string][]byte{
		"empty":             nil,
		"truncated header":  good[:unix.SizeofCmsghdr-1],
		"length too small":  withLength(good, unix.SizeofCmsghdr-1),
		"length past end":   withLength(good, uint64(len(good)+1)),
		"length enormous":   withLength(good, 1<<40),
		"header, no data":   withLength(good, unix.SizeofCmsghdr),
		"v6 class, 2 bytes": v6Short(),
	}
	for name, oob := range cases {
		if a := parseAncillary(oob); a.hasTOS || a.hasDrop {
			t.Errorf("%s: found %+v", name, a)
		}
	}
}

func withLength(b []byte, n uint64) []byte {
	c := append([]byte(nil), b...)
	if unix.SizeofCmsghdr == 16 {
		binary.NativeEndian.PutUint64(c, n)
	} else {
		binary.NativeEndian.PutUint32(c, uint32(n))
	}
	return c
}

func v6Short() []byte {
	b := make([]byte, unix.CmsgSpace(2))
	putCmsgHeader(b, unix.CmsgLen(2), unix.IPPROTO_IPV6, unix.IPV6_TCLASS)
	return b
}

// FuzzParseAncillary feeds any bytes at all as ancillary data. Nothing
// panics, the answer is the same twice, and a TOS found is a byte of the
// input.
func FuzzParseAncillary(f *testing.F) {
	f.Add(recvTOS(0x02))
	f.Add(v6Short())
	f.Add(withLength(recvTOS(0x03), 1<<40))
	f.Add(append(recvTOS(0x03), recvGRO(1200)...))
	f.Fuzz(func(t *testing.T, oob []byte) {
		a, b := parseAncillary(oob), parseAncillary(oob)
		if a != b {
			t.Fatal("not deterministic")
		}
		if a.hasTOS && !bytes.Contains(oob, []byte{a.tos}) {
			t.Fatalf("found TOS %#x, which is not in the input", a.tos)
		}
		if a.segment < 0 {
			t.Fatalf("segment size %d", a.segment)
		}
	})
}

// Every socket the driver binds sets DF, as section 11 of the spec requires.
func TestDontFragmentIsSet(t *testing.T) {
	s, _ := senderAndPeer(t)
	for ap, sock := range s.drv.socks {
		rc, err := sock.conn.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var mode int
		var gerr error
		rc.Control(func(fd uintptr) { mode, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER) })
		if gerr != nil || mode != unix.IP_PMTUDISC_DO {
			t.Errorf("%v: IP_MTU_DISCOVER %d (%v), want IP_PMTUDISC_DO", ap, mode, gerr)
		}
	}
}
