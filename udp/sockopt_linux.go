package udp

import (
	"encoding/binary"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// oobSpace holds, on receive, a TOS or traffic-class message, the drop count
// and a GRO segment size. A v6 socket carrying v4 traffic may get either
// message, so there is room for both. On send it holds a TOS and a GSO
// segment size.
var oobSpace = 4 * unix.CmsgSpace(4)

// canSegment reports whether the kernel takes UDP_SEGMENT for GSO, from
// Linux 4.18 on. The socket option answers.
func canSegment(conn *net.UDPConn) bool {
	return control(conn, func(fd int) error {
		_, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT)
		return err
	}) == nil
}

// control runs f on the socket's descriptor and returns its error.
func control(conn *net.UDPConn, f func(fd int) error) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// setByFamily sets an option at the IPv4 level. For a v6 socket it sets it
// at the IPv6 level and, best effort, at the IPv4 level too, for v4-mapped
// peers on a dual-stack socket.
func setByFamily(fd int, v6 bool, opt4, opt6, value4, value6 int) error {
	if !v6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IP, opt4, value4)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, opt6, value6); err != nil {
		return err
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, opt4, value4)
	return nil
}

// putSegment writes the ancillary data that makes the kernel cut a
// message's payload into datagrams of size bytes, and returns its length.
func putSegment(b []byte, size int) int {
	n := unix.CmsgSpace(2)
	if len(b) < n {
		return 0
	}
	clear(b[:n])
	putCmsgHeader(b, unix.CmsgLen(2), unix.SOL_UDP, unix.UDP_SEGMENT)
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return n
}

// enableAncillary asks the kernel for each datagram's TOS byte on v4 or
// traffic class on v6, and for the socket's drop count, as ancillary data.
func enableAncillary(conn *net.UDPConn, v6 bool) error {
	return control(conn, func(fd int) error {
		// Kernel drops from a full receive buffer are best effort, counted when given.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
		return setByFamily(fd, v6, unix.IP_RECVTOS, unix.IPV6_RECVTCLASS, 1, 1)
	})
}

// setDontFragment sets DF on everything the socket sends, as section 11 of
// docs/spec.md requires. A datagram too big for the path is refused with
// EMSGSIZE, never fragmented.
func setDontFragment(conn *net.UDPConn, v6 bool) error {
	return control(conn, func(fd int) error {
		return setByFamily(fd, v6, unix.IP_MTU_DISCOVER, unix.IPV6_MTU_DISCOVER, unix.IP_PMTUDISC_DO, unix.IPV6_PMTUDISC_DO)
	})
}

// setReportErrors sets IP_RECVERR, or IPV6_RECVERR on a v6 socket. A
// datagram the local host drops because a queue on its way out is full
// (the qdisc's or the device's) is then refused with ENOBUFS rather than
// dropped unseen, so the sender learns of it and slows down. The kernel
// also queues ICMP errors from the network and its own refusals on the
// socket's error queue, which drainErrors empties.
func setReportErrors(conn *net.UDPConn, v6 bool) error {
	return control(conn, func(fd int) error {
		return setByFamily(fd, v6, unix.IP_RECVERR, unix.IPV6_RECVERR, 1, 1)
	})
}

// drainErrors reads and drops what the socket's error queue holds, and
// returns how many it read. The queue is charged to the socket's receive
// buffer, so errors left in it would crowd out datagrams.
func drainErrors(fd int) int {
	var buf [64]byte
	n := 0
	for ; n < maxDrain; n++ {
		if _, _, _, _, err := unix.Recvmsg(fd, buf[:], nil, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT); err != nil {
			break // EAGAIN: empty
		}
	}
	return n
}

// cmsgAlign rounds n up to the kernel's ancillary-data alignment, the word
// size.
func cmsgAlign(n int) int {
	a := strconv.IntSize / 8
	return (n + a - 1) &^ (a - 1)
}

// putCmsgHeader writes a cmsghdr. Its length field is a word, followed by
// level and type as 32-bit integers, in the machine's byte order.
func putCmsgHeader(b []byte, length, level, typ int) {
	lenSize := unix.SizeofCmsghdr - 8
	if lenSize == 8 {
		binary.NativeEndian.PutUint64(b, uint64(length))
	} else {
		binary.NativeEndian.PutUint32(b, uint32(length))
	}
	binary.NativeEndian.PutUint32(b[lenSize:], uint32(int32(level)))
	binary.NativeEndian.PutUint32(b[lenSize+4:], uint32(int32(typ)))
}

// putTOS writes the ancillary data that sets one datagram's TOS byte on v4
// or traffic class on v6 into b, and returns its length.
func putTOS(b []byte, tos byte, v6 bool) int {
	level, typ := unix.IPPROTO_IP, unix.IP_TOS
	if v6 {
		level, typ = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	n := unix.CmsgSpace(4)
	if len(b) < n {
		return 0
	}
	clear(b[:n])
	putCmsgHeader(b, unix.CmsgLen(4), level, typ)
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(tos))
	return n
}

// ancillary is what the driver reads from a datagram's ancillary data.
type ancillary struct {
	tos     byte // TOS byte on v4 or traffic class on v6
	hasTOS  bool
	drops   uint32 // the socket's cumulative kernel drops from SO_RXQ_OVFL
	hasDrop bool
	segment int // with GRO, the size of the datagrams the kernel joined, or 0 for one datagram
}

// parseAncillary reads a datagram's ancillary data. Data it cannot read,
// truncated or with a length that runs past the end, ends the walk. What was
// found before it stands, and nothing is guessed.
func parseAncillary(oob []byte) ancillary {
	var a ancillary
	hdr := unix.SizeofCmsghdr
	lenSize := hdr - 8
	for len(oob) >= hdr {
		var length uint64
		if lenSize == 8 {
			length = binary.NativeEndian.Uint64(oob)
		} else {
			length = uint64(binary.NativeEndian.Uint32(oob))
		}
		if length < uint64(hdr) || length > uint64(len(oob)) {
			break
		}
		level := int32(binary.NativeEndian.Uint32(oob[lenSize:]))
		typ := int32(binary.NativeEndian.Uint32(oob[lenSize+4:]))
		data := oob[hdr:length]
		switch {
		case level == unix.IPPROTO_IP && typ == unix.IP_TOS && len(data) >= 1:
			a.tos, a.hasTOS = data[0], true // one byte on receive
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_TCLASS && len(data) >= 4:
			a.tos, a.hasTOS = byte(binary.NativeEndian.Uint32(data)), true
		case level == unix.SOL_SOCKET && typ == unix.SO_RXQ_OVFL && len(data) >= 4:
			a.drops, a.hasDrop = binary.NativeEndian.Uint32(data), true
		case level == unix.SOL_UDP && typ == unix.UDP_GRO && len(data) >= 4:
			if seg := int32(binary.NativeEndian.Uint32(data)); seg > 0 {
				a.segment = int(seg)
			}
		}
		next := cmsgAlign(int(length))
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return a
}
