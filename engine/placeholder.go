package engine

import "github.com/mroce/mroce/link"

// Placeholder payloads are a simulation's (Config.PlaceholderPayloads):
// packets keep their length and every check of their destination, but no
// payload byte is copied and no CRC is computed. The decisions of the
// protocol do not depend on payload bytes, so a simulation spends its
// time on the protocol, not on memory bandwidth. They never reach a real
// network: software.OpenUDPEngine refuses them, and the UDP driver drops
// a datagram with padding.

// A paddingPort carries a placeholder's payload as padding
// (link.Datagram.Pad): the emulator does. HeaderBuffer hands out small
// buffers for such datagrams, and for control packets that fit, so that
// thousands of packets in flight do not each hold a full-size buffer.
type paddingPort interface {
	link.Port
	// HeaderBuffer returns an empty buffer (length 0) with capacity for
	// HeaderBufferLen bytes, owned as Buffer's are.
	HeaderBuffer() []byte
	HeaderBufferLen() int
}
