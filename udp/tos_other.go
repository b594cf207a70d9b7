//go:build !linux

package udp

import "net"

// Elsewhere the ECN field is neither set per datagram nor read: datagrams
// go out with the socket's default TOS and arrive as Not-ECT.
var oobSpace = 0

func enableTOS(conn *net.UDPConn, v6 bool) error { return nil }

func putTOS(b []byte, tos byte, v6 bool) int { return 0 }

func parseTOS(oob []byte) (byte, bool) { return 0, false }
