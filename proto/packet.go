package proto

import "hash/crc32"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of b, as the trailer carries it.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Packet is a view of one packet. Every field aliases the buffer it was
// decoded from or built in, so a Packet is valid only as long as that buffer
// is. The zero Packet is empty. Fill one with Decode or Build.
type Packet struct {
	// Common is the common header. Type() says which extension accessors apply.
	Common CommonHeader
	// Payload is the bytes between the header and the trailer.
	Payload []byte

	raw []byte // the whole packet with its trailer, or a placeholder's header
	ext []byte // the header after the common header
	pad int    // a placeholder's bytes not materialized, payload and trailer
}

// Type returns the packet's type.
func (p *Packet) Type() Type { return p.Common.Type() }

// Bytes returns the whole packet, trailer included.
func (p *Packet) Bytes() []byte { return p.raw }

// Ext returns the header bytes after the common header, every extension of
// the type.
func (p *Packet) Ext() []byte { return p.ext }

// Trailer returns the CRC trailer. A placeholder has none, and a protected
// packet has its tag instead (Tag), so do not call it on either.
func (p *Packet) Trailer() Trailer { return Trailer(p.raw[len(p.raw)-TrailerLen:]) }

// Tag returns a protected packet's AEAD tag (spec section 13.4).
func (p *Packet) Tag() Tag { return Tag(p.raw[len(p.raw)-TagLen:]) }

// The extension accessors below return the view of the packet's type.
// Calling one that does not belong to the type returns a view of the wrong
// bytes, or panics when the packet is too short. Switch on Type first.

// Write returns the WRITE / WRITE_IMM extension.
func (p *Packet) Write() WriteHeader { return WriteHeader(p.ext[:32]) }

// Imm returns the immediate extension of a WRITE_IMM.
func (p *Packet) Imm() ImmHeader { return ImmHeader(p.ext[32:40]) }

// Send returns the SEND extension.
func (p *Packet) Send() SendHeader { return SendHeader(p.ext[:20]) }

// ReadReq returns the READ_REQ extension.
func (p *Packet) ReadReq() ReadReqHeader { return ReadReqHeader(p.ext[:32]) }

// ReadResp returns the READ_RESP extension.
func (p *Packet) ReadResp() ReadRespHeader { return ReadRespHeader(p.ext[:12]) }

// Atomic returns the FETCH_ADD / CMP_SWAP extension.
func (p *Packet) Atomic() AtomicHeader { return AtomicHeader(p.ext[:AtomicHeaderLen]) }

// AtomicResp returns the ATOMIC_RESP extension.
func (p *Packet) AtomicResp() AtomicRespHeader { return AtomicRespHeader(p.ext[:12]) }

// Ack returns the fixed part of an ACK.
func (p *Packet) Ack() AckHeader { return AckHeader(p.ext[:AckHeaderLen]) }

// AckRecord returns record i of an ACK, 0 <= i < RecordCount.
func (p *Packet) AckRecord(i int) AckRecord {
	off := AckHeaderLen + i*AckRecordLen
	return AckRecord(p.ext[off : off+AckRecordLen])
}

// Nack returns the NACK extension.
func (p *Packet) Nack() NackHeader { return NackHeader(p.ext[:20]) }

// Handshake returns the CONNECT / ACCEPT extension.
func (p *Packet) Handshake() HandshakeHeader { return HandshakeHeader(p.ext[:HandshakeHeaderLen]) }

// Close returns the CLOSE extension.
func (p *Packet) Close() CloseHeader { return CloseHeader(p.ext[:8]) }

// Probe returns the PROBE extension.
func (p *Packet) Probe() ProbeHeader { return ProbeHeader(p.ext[:4]) }

// ProbeReply returns the PROBE_REPLY extension.
func (p *Packet) ProbeReply() ProbeReplyHeader { return ProbeReplyHeader(p.ext[:12]) }

// Retry returns the RETRY extension.
func (p *Packet) Retry() RetryHeader { return RetryHeader(p.ext[:TokenLen]) }

// Token returns the token a CONNECT carries at the end of its payload, and
// false for a CONNECT without one and for every other type (spec section
// 8.1).
func (p *Packet) Token() (tok [TokenLen]byte, ok bool) {
	if !p.Type().CarriesToken() || len(p.Payload) != p.authLen()+TokenLen {
		return tok, false
	}
	copy(tok[:], p.Payload[len(p.Payload)-TokenLen:])
	return tok, true
}

// AuthHello returns the key exchange of a CONNECT with AUTH, and false for
// any other packet (spec section 13.3).
func (p *Packet) AuthHello() (AuthHello, bool) {
	if p.Type() != TypeConnect || p.authLen() == 0 || len(p.Payload) < AuthHelloLen {
		return nil, false
	}
	return AuthHello(p.Payload[:AuthHelloLen]), true
}

// AuthAccept returns the key exchange of an ACCEPT with AUTH, and false for
// any other packet (spec section 13.3).
func (p *Packet) AuthAccept() (AuthAccept, bool) {
	if p.Type() != TypeAccept || p.authLen() == 0 || len(p.Payload) != AuthAcceptLen {
		return nil, false
	}
	return AuthAccept(p.Payload), true
}

// authLen is the length of the key exchange a CONNECT or ACCEPT carries: 0
// without AUTH in its capabilities.
func (p *Packet) authLen() int {
	t := p.Type()
	if (t != TypeConnect && t != TypeAccept) || p.Handshake().Capabilities()&CapAuth == 0 {
		return 0
	}
	if t == TypeConnect {
		return AuthHelloLen
	}
	return AuthAcceptLen
}

// MsgBounds returns the MsgOffset and MsgLen of a packet that carries
// message data, which is a WRITE, WRITE_IMM, SEND or READ_RESP. ok is false
// for other types.
func (p *Packet) MsgBounds() (offset, length uint32, ok bool) {
	switch p.Type() {
	case TypeWrite, TypeWriteImm:
		w := p.Write()
		return w.MsgOffset(), w.MsgLen(), true
	case TypeSend:
		s := p.Send()
		return s.MsgOffset(), s.MsgLen(), true
	case TypeReadResp:
		r := p.ReadResp()
		return r.MsgOffset(), r.MsgLen(), true
	}
	return 0, 0, false
}

// Decode checks b as a receiver must before trusting any field, in steps
// 1-6 of section 9 of the spec. If b passes, Decode makes p a view of it.
// It allocates nothing and copies nothing. On error p is left unchanged.
// A protected packet is ErrProtected: only its connection's keys open it,
// and DecodeOpened reads it once they have.
func (p *Packet) Decode(b []byte) error {
	if len(b) < MinPacketLen {
		return ErrTruncated
	}
	if CommonHeader(b).Protected() {
		return ErrProtected
	}
	n := len(b) - TrailerLen
	if Checksum(b[:n]) != be.Uint32(b[n:]) {
		return ErrBadCRC
	}
	return p.decodeChecked(b, TrailerLen)
}

// DecodeNoCRC is Decode without the CRC check of step 2. It serves packets
// whose integrity was checked elsewhere, such as by a NIC that verified the
// CRC, or a test that crafts packets field by field. Every other check
// still runs.
func (p *Packet) DecodeNoCRC(b []byte) error {
	if len(b) < MinPacketLen {
		return ErrTruncated
	}
	if CommonHeader(b).Protected() {
		return ErrProtected
	}
	return p.decodeChecked(b, TrailerLen)
}

// DecodeOpened runs steps 3-6 on a protected packet that has opened: b is
// the packet with its bytes after the common header decrypted in place and
// its tag still at the end (spec section 13.4).
func (p *Packet) DecodeOpened(b []byte) error {
	if len(b) < MinProtectedLen {
		return ErrTruncated
	}
	if !CommonHeader(b).Protected() {
		return ErrAuthFailed
	}
	return p.decodeChecked(b, TagLen)
}

// decodeChecked runs steps 3-6 on b, known to be long enough for a common
// header and a trailer of trailer bytes.
func (p *Packet) decodeChecked(b []byte, trailer int) error {
	c := CommonHeader(b)
	if c.Version() != Version {
		return ErrVersion
	}
	t := c.Type()
	if !t.Known() {
		return ErrUnknownType
	}
	records := 0
	if t == TypeAck {
		if len(b) < ackRecordsStart+trailer {
			return ErrTruncated
		}
		records = int(AckHeader(b[CommonHeaderLen:]).RecordCount())
		if records > MaxAckRecords {
			return ErrRecordCount
		}
	}
	hlen, _ := HeaderLen(t, records)
	if int(c.HdrLen())*4 != hlen {
		return ErrHeaderLength
	}
	if len(b) < hlen+trailer {
		return ErrTruncated
	}
	q := Packet{
		Common:  c[:CommonHeaderLen:CommonHeaderLen],
		Payload: b[hlen : len(b)-trailer],
		raw:     b,
		ext:     b[CommonHeaderLen:hlen],
	}
	if err := q.checkPayload(); err != nil {
		return err
	}
	*p = q
	return nil
}

// checkPayload is step 6. A payload is allowed only where the type allows
// it, message data must lie within its message, and a CONNECT's and an
// ACCEPT's are their key exchange under AUTH and a CONNECT's token.
func (p *Packet) checkPayload() error {
	if info := typeTable[p.Type()]; !info.hasPayload {
		auth, n := p.authLen(), len(p.Payload)
		if n != auth && !(info.token && n == auth+TokenLen) {
			return ErrPayload
		}
		return nil
	}
	off, length, isMsg := p.MsgBounds()
	if isMsg && uint64(off)+uint64(len(p.Payload)) > uint64(length) {
		return ErrPayload
	}
	return nil
}

// Build lays out a packet of type t in buf. The header is zeroed, with
// Version, Type and HdrLen set, and RecordCount for an ACK. Room is left for
// payloadLen bytes of payload and the trailer. A CONNECT's payload is its
// token, of TokenLen bytes, after an AuthHello with AUTH; an ACCEPT's is
// its AuthAccept with AUTH. The caller sets the other fields through p's
// views, fills p.Payload, then calls Seal. buf must hold the whole packet.
func Build(p *Packet, buf []byte, t Type, ackRecords, payloadLen int) error {
	return build(p, buf, t, ackRecords, payloadLen, false)
}

// BuildProtected is Build for a packet to be protected (spec section
// 13.4): Protected is set, and the room left after the payload is for the
// tag. The caller fills the packet as for Build, then has its connection's
// keys seal it in place instead of calling Seal.
func BuildProtected(p *Packet, buf []byte, t Type, ackRecords, payloadLen int) error {
	return build(p, buf, t, ackRecords, payloadLen, true)
}

// payloadAllowed reports whether a packet of type t may carry n bytes of
// payload, by section 9 step 6.
func payloadAllowed(t Type, n int) bool {
	switch {
	case n < 0:
		return false
	case typeTable[t].hasPayload, n == 0:
		return true
	case t == TypeConnect:
		return n == TokenLen || n == AuthHelloLen || n == AuthHelloLen+TokenLen
	case t == TypeAccept:
		return n == AuthAcceptLen
	}
	return false
}

func build(p *Packet, buf []byte, t Type, ackRecords, payloadLen int, protected bool) error {
	hlen, err := HeaderLen(t, ackRecords)
	if err != nil {
		return err
	}
	if !payloadAllowed(t, payloadLen) {
		return ErrPayload
	}
	trailer := TrailerLen
	if protected {
		trailer = TagLen
	}
	total := hlen + payloadLen + trailer
	if total > len(buf) || total > MaxPacketLen {
		return ErrBufferSize
	}
	b := buf[:total]
	clear(b[:hlen])
	c := CommonHeader(b[:CommonHeaderLen:CommonHeaderLen])
	c.SetVersion(Version)
	c.SetType(t)
	c.SetHdrLen(uint8(hlen / 4))
	c.SetProtected(protected)
	*p = Packet{
		Common:  c,
		Payload: b[hlen : total-trailer],
		raw:     b,
		ext:     b[CommonHeaderLen:hlen],
	}
	if t == TypeAck {
		p.Ack().SetRecordCount(uint8(ackRecords))
	}
	return nil
}

// Seal writes the CRC32C trailer over everything before it and returns the
// finished packet. Call it after the last field and payload byte are set.
// A protected packet is sealed by its connection's keys instead.
func (p *Packet) Seal() []byte {
	if p.Common.Protected() {
		panic("proto: Seal of a protected packet, which its keys seal")
	}
	n := len(p.raw) - TrailerLen
	be.PutUint32(p.raw[n:], Checksum(p.raw[:n]))
	return p.raw
}
