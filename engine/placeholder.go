package engine

import "github.com/mroce/mroce/link"

// Placeholder payloads are for simulations (see
// Config.PlaceholderPayloads). Packets keep their length and every check of
// their destination, but no payload byte is copied and no CRC is computed.
// The protocol's decisions do not depend on payload bytes, so a simulation
// spends its time on the protocol, not on memory bandwidth. Placeholders
// never reach a real network. software.OpenUDPEngine refuses them, and the
// UDP driver drops a datagram with padding (spec section 5.11).

// A paddingPort carries a placeholder's payload as padding (see
// link.Datagram.Pad), as the emulator does. HeaderBuffer hands out small
// buffers for such datagrams, and for control packets that fit, so that
// thousands of packets in flight do not each hold a full-size buffer.
type paddingPort interface {
	link.Port
	// HeaderBuffer returns an empty buffer with capacity for
	// HeaderBufferLen bytes, owned as Buffer's buffers are.
	HeaderBuffer() []byte
	HeaderBufferLen() int
}
