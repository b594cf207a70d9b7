//go:build !linux

package udp

import "net"

// oobSpace is 0 on systems other than Linux. There the ECN field is neither
// set per datagram nor read, so datagrams go out with the socket's default
// TOS and arrive as Not-ECT. Kernel drops are not counted, and DF is left
// as the system sets it.
var oobSpace = 0

func enableAncillary(conn *net.UDPConn, v6 bool) error { return nil }

func putTOS(b []byte, tos byte, v6 bool) int { return 0 }

type ancillary struct {
	tos     byte
	hasTOS  bool
	drops   uint32
	hasDrop bool
	segment int
}

func parseAncillary(oob []byte) ancillary { return ancillary{} }

func setDontFragment(conn *net.UDPConn, v6 bool) error { return nil }

func setReportErrors(conn *net.UDPConn, v6 bool) error { return nil }

func drainErrors(fd int) int { return 0 }

func canSegment(conn *net.UDPConn) bool { return false }

func putSegment(b []byte, size int) int { return 0 }

func enableGRO(conn *net.UDPConn) bool { return false }
