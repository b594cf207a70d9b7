// Placeholder packets belong to a simulation, not to the wire format. A
// placeholder's payload and trailer are not materialized, and the emulator
// carries them as padding in link.Datagram.Pad. Placeholders keep every
// header check and their full length, so a simulation decides as it would
// with real payloads without copying them. No receiver that follows the
// spec accepts one.

package proto

// Pad is how many of the packet's bytes, after Bytes, are not materialized.
// For a placeholder from BuildPlaceholder or DecodePlaceholder those are its
// payload and trailer. For any other packet Pad is 0.
func (p *Packet) Pad() int { return p.pad }

// placeholderPayload is the Payload of every placeholder packet. Each is a
// view of its length into bytes nothing writes or reads.
var placeholderPayload [MaxPacketLen]byte

// DecodePlaceholder is DecodeNoCRC for a placeholder made by
// BuildPlaceholder. b is its header, and pad is the bytes of payload and
// trailer that were not materialized. Every check of the header runs
// against the whole length. Payload is a read-only view of pad - TrailerLen
// bytes that are not the packet's. No receiver that follows the spec
// accepts a placeholder.
func (p *Packet) DecodePlaceholder(b []byte, pad int) error {
	if pad < TrailerLen || len(b) < CommonHeaderLen || pad > MaxPacketLen-len(b) {
		return ErrTruncated
	}
	c := CommonHeader(b)
	t := c.Type()
	if c.Version() != Version {
		return ErrVersion
	}
	if !t.Known() {
		return ErrUnknownType
	}
	// Only packets with a payload are placeholders, and no ACK has one.
	hlen, err := HeaderLen(t, 0)
	if err != nil || t == TypeAck || int(c.HdrLen())*4 != hlen || len(b) != hlen {
		return ErrHeaderLength
	}
	n := pad - TrailerLen
	if n > 0 && !t.HasPayload() {
		return ErrPayload // a token, which is never left out
	}
	q := Packet{
		Common:  c[:CommonHeaderLen:CommonHeaderLen],
		Payload: placeholderPayload[:n:n],
		raw:     b,
		ext:     b[CommonHeaderLen:hlen],
		pad:     pad,
	}
	if err := q.checkPayload(); err != nil {
		return err
	}
	*p = q
	return nil
}

// BuildPlaceholder is Build for a placeholder, a packet of a simulation
// whose payload of payloadLen bytes and trailer are not materialized. buf
// holds the header only. Bytes is the header and Pad the rest of the
// length. Payload is a read-only view of payloadLen bytes that are not the
// packet's, so fill nothing in. A placeholder's datagram carries Bytes as
// its data and Pad as its link.Datagram.Pad, and the receiver reads it with
// DecodePlaceholder. No receiver that follows the spec accepts it.
func BuildPlaceholder(p *Packet, buf []byte, t Type, payloadLen int) error {
	if t == TypeAck {
		return ErrPayload // an ACK has no payload to leave out
	}
	hlen, err := HeaderLen(t, 0)
	if err != nil {
		return err
	}
	if payloadLen < 0 || (payloadLen > 0 && !typeTable[t].hasPayload) {
		return ErrPayload
	}
	if hlen > len(buf) || hlen+payloadLen+TrailerLen > MaxPacketLen {
		return ErrBufferSize
	}
	b := buf[:hlen]
	clear(b)
	c := CommonHeader(b[:CommonHeaderLen:CommonHeaderLen])
	c.SetVersion(Version)
	c.SetType(t)
	c.SetHdrLen(uint8(hlen / 4))
	*p = Packet{
		Common:  c,
		Payload: placeholderPayload[:payloadLen:payloadLen],
		raw:     b,
		ext:     b[CommonHeaderLen:hlen],
		pad:     payloadLen + TrailerLen,
	}
	return nil
}

// Unsealed returns the packet with its trailer as the buffer held it, with
// no CRC written. It serves a simulation whose packets nothing corrupts,
// read with DecodeNoCRC. A placeholder's is its header. No receiver that
// follows the spec accepts it.
func (p *Packet) Unsealed() []byte { return p.raw }
