package proto

import "encoding/binary"

// The views below are the spec's layout tables in code. Each part has one
// named []byte type, with one getter and one setter per field row, at the
// row's offset and width. A view must be at least as long as its part.
// Packet hands out views of the right length for the packet's type.

var be = binary.BigEndian

// CommonHeader views the 28-byte header every packet starts with.
type CommonHeader []byte

func (h CommonHeader) Version() uint8        { return h[0] >> 4 }
func (h CommonHeader) SetVersion(v uint8)    { h[0] = h[0]&0x0F | v<<4 }
func (h CommonHeader) Protected() bool       { return h[0]&0x08 != 0 }
func (h CommonHeader) Type() Type            { return Type(h[1]) }
func (h CommonHeader) SetType(t Type)        { h[1] = byte(t) }
func (h CommonHeader) Flags() Flags          { return Flags(be.Uint16(h[2:])) }
func (h CommonHeader) SetFlags(f Flags)      { be.PutUint16(h[2:], uint16(f)) }
func (h CommonHeader) HdrLen() uint8         { return h[4] }
func (h CommonHeader) SetHdrLen(words uint8) { h[4] = words }
func (h CommonHeader) PathID() uint8         { return h[5] }
func (h CommonHeader) SetPathID(p uint8)     { h[5] = p }
func (h CommonHeader) Epoch() uint8          { return h[6] >> 6 }
func (h CommonHeader) SetEpoch(e uint8)      { h[6] = h[6]&0x3F | e<<6 }
func (h CommonHeader) KeyPhase() uint8       { return h[6] >> 4 & 3 }
func (h CommonHeader) SetKeyPhase(k uint8)   { h[6] = h[6]&0xCF | k&3<<4 }
func (h CommonHeader) DstConnID() uint32     { return be.Uint32(h[8:]) }
func (h CommonHeader) SetDstConnID(v uint32) { be.PutUint32(h[8:], v) }
func (h CommonHeader) PSN() uint32           { return be.Uint32(h[12:]) }
func (h CommonHeader) SetPSN(v uint32)       { be.PutUint32(h[12:], v) }
func (h CommonHeader) DSN() uint32           { return be.Uint32(h[16:]) }
func (h CommonHeader) SetDSN(v uint32)       { be.PutUint32(h[16:], v) }
func (h CommonHeader) Timestamp() uint32     { return be.Uint32(h[20:]) }
func (h CommonHeader) SetTimestamp(v uint32) { be.PutUint32(h[20:], v) }

// SetProtected marks the packet protected (spec section 13.4).
func (h CommonHeader) SetProtected(on bool) {
	h[0] &^= 0x08
	if on {
		h[0] |= 0x08
	}
}

// Backlog is in units of BacklogUnit bytes. See EncodeBacklog.
func (h CommonHeader) Backlog() uint32     { return be.Uint32(h[24:]) }
func (h CommonHeader) SetBacklog(v uint32) { be.PutUint32(h[24:], v) }

// WriteHeader views the 32-byte extension of WRITE and WRITE_IMM.
type WriteHeader []byte

func (h WriteHeader) RKey() uint64             { return be.Uint64(h[0:]) }
func (h WriteHeader) SetRKey(v uint64)         { be.PutUint64(h[0:], v) }
func (h WriteHeader) RemoteOffset() uint64     { return be.Uint64(h[8:]) }
func (h WriteHeader) SetRemoteOffset(v uint64) { be.PutUint64(h[8:], v) }
func (h WriteHeader) MsgLen() uint32           { return be.Uint32(h[16:]) }
func (h WriteHeader) SetMsgLen(v uint32)       { be.PutUint32(h[16:], v) }
func (h WriteHeader) MsgOffset() uint32        { return be.Uint32(h[20:]) }
func (h WriteHeader) SetMsgOffset(v uint32)    { be.PutUint32(h[20:], v) }
func (h WriteHeader) Stream() uint16           { return be.Uint16(h[24:]) }
func (h WriteHeader) SetStream(v uint16)       { be.PutUint16(h[24:], v) }
func (h WriteHeader) MSN() uint32              { return be.Uint32(h[28:]) }
func (h WriteHeader) SetMSN(v uint32)          { be.PutUint32(h[28:], v) }

// ImmHeader views the 8 bytes WRITE_IMM adds after its WriteHeader.
type ImmHeader []byte

func (h ImmHeader) RSN() uint32           { return be.Uint32(h[0:]) }
func (h ImmHeader) SetRSN(v uint32)       { be.PutUint32(h[0:], v) }
func (h ImmHeader) Immediate() uint32     { return be.Uint32(h[4:]) }
func (h ImmHeader) SetImmediate(v uint32) { be.PutUint32(h[4:], v) }

// SendHeader views the 20-byte extension of SEND.
type SendHeader []byte

func (h SendHeader) Stream() uint16        { return be.Uint16(h[0:]) }
func (h SendHeader) SetStream(v uint16)    { be.PutUint16(h[0:], v) }
func (h SendHeader) MSN() uint32           { return be.Uint32(h[4:]) }
func (h SendHeader) SetMSN(v uint32)       { be.PutUint32(h[4:], v) }
func (h SendHeader) RSN() uint32           { return be.Uint32(h[8:]) }
func (h SendHeader) SetRSN(v uint32)       { be.PutUint32(h[8:], v) }
func (h SendHeader) MsgLen() uint32        { return be.Uint32(h[12:]) }
func (h SendHeader) SetMsgLen(v uint32)    { be.PutUint32(h[12:], v) }
func (h SendHeader) MsgOffset() uint32     { return be.Uint32(h[16:]) }
func (h SendHeader) SetMsgOffset(v uint32) { be.PutUint32(h[16:], v) }

// ReadReqHeader views the 32-byte extension of READ_REQ.
type ReadReqHeader []byte

func (h ReadReqHeader) Stream() uint16           { return be.Uint16(h[0:]) }
func (h ReadReqHeader) SetStream(v uint16)       { be.PutUint16(h[0:], v) }
func (h ReadReqHeader) MSN() uint32              { return be.Uint32(h[4:]) }
func (h ReadReqHeader) SetMSN(v uint32)          { be.PutUint32(h[4:], v) }
func (h ReadReqHeader) RKey() uint64             { return be.Uint64(h[8:]) }
func (h ReadReqHeader) SetRKey(v uint64)         { be.PutUint64(h[8:], v) }
func (h ReadReqHeader) RemoteOffset() uint64     { return be.Uint64(h[16:]) }
func (h ReadReqHeader) SetRemoteOffset(v uint64) { be.PutUint64(h[16:], v) }
func (h ReadReqHeader) MsgLen() uint32           { return be.Uint32(h[24:]) }
func (h ReadReqHeader) SetMsgLen(v uint32)       { be.PutUint32(h[24:], v) }
func (h ReadReqHeader) ReadTag() uint32          { return be.Uint32(h[28:]) }
func (h ReadReqHeader) SetReadTag(v uint32)      { be.PutUint32(h[28:], v) }

// ReadRespHeader views the 12-byte extension of READ_RESP.
type ReadRespHeader []byte

func (h ReadRespHeader) ReadTag() uint32       { return be.Uint32(h[0:]) }
func (h ReadRespHeader) SetReadTag(v uint32)   { be.PutUint32(h[0:], v) }
func (h ReadRespHeader) MsgOffset() uint32     { return be.Uint32(h[4:]) }
func (h ReadRespHeader) SetMsgOffset(v uint32) { be.PutUint32(h[4:], v) }
func (h ReadRespHeader) MsgLen() uint32        { return be.Uint32(h[8:]) }
func (h ReadRespHeader) SetMsgLen(v uint32)    { be.PutUint32(h[8:], v) }

// AtomicHeader views the 44-byte extension of FETCH_ADD and CMP_SWAP.
type AtomicHeader []byte

func (h AtomicHeader) Stream() uint16           { return be.Uint16(h[0:]) }
func (h AtomicHeader) SetStream(v uint16)       { be.PutUint16(h[0:], v) }
func (h AtomicHeader) MSN() uint32              { return be.Uint32(h[4:]) }
func (h AtomicHeader) SetMSN(v uint32)          { be.PutUint32(h[4:], v) }
func (h AtomicHeader) RKey() uint64             { return be.Uint64(h[8:]) }
func (h AtomicHeader) SetRKey(v uint64)         { be.PutUint64(h[8:], v) }
func (h AtomicHeader) RemoteOffset() uint64     { return be.Uint64(h[16:]) }
func (h AtomicHeader) SetRemoteOffset(v uint64) { be.PutUint64(h[16:], v) }
func (h AtomicHeader) Operand() uint64          { return be.Uint64(h[24:]) }
func (h AtomicHeader) SetOperand(v uint64)      { be.PutUint64(h[24:], v) }
func (h AtomicHeader) Compare() uint64          { return be.Uint64(h[32:]) }
func (h AtomicHeader) SetCompare(v uint64)      { be.PutUint64(h[32:], v) }
func (h AtomicHeader) AtomicTag() uint32        { return be.Uint32(h[40:]) }
func (h AtomicHeader) SetAtomicTag(v uint32)    { be.PutUint32(h[40:], v) }

// AtomicRespHeader views the 12-byte extension of ATOMIC_RESP.
type AtomicRespHeader []byte

func (h AtomicRespHeader) AtomicTag() uint32     { return be.Uint32(h[0:]) }
func (h AtomicRespHeader) SetAtomicTag(v uint32) { be.PutUint32(h[0:], v) }
func (h AtomicRespHeader) Original() uint64      { return be.Uint64(h[4:]) }
func (h AtomicRespHeader) SetOriginal(v uint64)  { be.PutUint64(h[4:], v) }

// AckHeader views the 16-byte fixed part of an ACK. AckRecords follow it.
type AckHeader []byte

func (h AckHeader) CumDSN() uint32          { return be.Uint32(h[0:]) }
func (h AckHeader) SetCumDSN(v uint32)      { be.PutUint32(h[0:], v) }
func (h AckHeader) RecordCount() uint8      { return h[4] }
func (h AckHeader) SetRecordCount(n uint8)  { h[4] = n }
func (h AckHeader) CreditStream() uint8     { return h[5] }
func (h AckHeader) SetCreditStream(s uint8) { h[5] = s }
func (h AckHeader) CreditLimit() uint16     { return be.Uint16(h[6:]) }
func (h AckHeader) SetCreditLimit(v uint16) { be.PutUint16(h[6:], v) }
func (h AckHeader) RateHint() uint64        { return be.Uint64(h[8:]) }
func (h AckHeader) SetRateHint(v uint64)    { be.PutUint64(h[8:], v) }

// AckRecord views one 52-byte per-path record of an ACK.
type AckRecord []byte

func (r AckRecord) PathID() uint8             { return r[0] }
func (r AckRecord) SetPathID(p uint8)         { r[0] = p }
func (r AckRecord) Epoch() uint8              { return r[1] >> 6 }
func (r AckRecord) SetEpoch(e uint8)          { r[1] = r[1]&0x3F | e<<6 }
func (r AckRecord) HighestPSN() uint32        { return be.Uint32(r[4:]) }
func (r AckRecord) SetHighestPSN(v uint32)    { be.PutUint32(r[4:], v) }
func (r AckRecord) CECount() uint32           { return be.Uint32(r[8:]) }
func (r AckRecord) SetCECount(v uint32)       { be.PutUint32(r[8:], v) }
func (r AckRecord) EchoTimestamp() uint32     { return be.Uint32(r[12:]) }
func (r AckRecord) SetEchoTimestamp(v uint32) { be.PutUint32(r[12:], v) }
func (r AckRecord) ServiceTime() uint32       { return be.Uint32(r[16:]) }
func (r AckRecord) SetServiceTime(v uint32)   { be.PutUint32(r[16:], v) }

// Bitvector returns a copy of the 256-bit received-PSN vector.
func (r AckRecord) Bitvector() (v [32]byte) { copy(v[:], r[20:52]); return v }

// SetBitvector writes the 256-bit received-PSN vector.
func (r AckRecord) SetBitvector(v [32]byte) { copy(r[20:52], v[:]) }

// Received reports bit k, which says whether PSN HighestPSN-1-k was
// received. k is below 256.
func (r AckRecord) Received(k int) bool { return r[20+k>>3]&(0x80>>(k&7)) != 0 }

// MarkReceived sets bit k to say PSN HighestPSN-1-k was received. k is
// below 256.
func (r AckRecord) MarkReceived(k int) { r[20+k>>3] |= 0x80 >> (k & 7) }

// ClearReceived clears bit k to say PSN HighestPSN-1-k was not received. k
// is below 256.
func (r AckRecord) ClearReceived(k int) { r[20+k>>3] &^= 0x80 >> (k & 7) }

// NackHeader views the 20-byte extension of NACK.
type NackHeader []byte

func (h NackHeader) Code() NackCode          { return NackCode(h[0]) }
func (h NackHeader) SetCode(c NackCode)      { h[0] = byte(c) }
func (h NackHeader) PathID() uint8           { return h[1] }
func (h NackHeader) SetPathID(p uint8)       { h[1] = p }
func (h NackHeader) Epoch() uint8            { return h[2] >> 6 }
func (h NackHeader) SetEpoch(e uint8)        { h[2] = h[2]&0x3F | e<<6 }
func (h NackHeader) PSN() uint32             { return be.Uint32(h[4:]) }
func (h NackHeader) SetPSN(v uint32)         { be.PutUint32(h[4:], v) }
func (h NackHeader) DSN() uint32             { return be.Uint32(h[8:]) }
func (h NackHeader) SetDSN(v uint32)         { be.PutUint32(h[8:], v) }
func (h NackHeader) Stream() uint16          { return be.Uint16(h[12:]) }
func (h NackHeader) SetStream(v uint16)      { be.PutUint16(h[12:], v) }
func (h NackHeader) RetryAfter() uint16      { return be.Uint16(h[14:]) }
func (h NackHeader) SetRetryAfter(us uint16) { be.PutUint16(h[14:], us) }
func (h NackHeader) MSN() uint32             { return be.Uint32(h[16:]) }
func (h NackHeader) SetMSN(v uint32)         { be.PutUint32(h[16:], v) }

// HandshakeHeader views the 44-byte extension of CONNECT and ACCEPT.
type HandshakeHeader []byte

func (h HandshakeHeader) SrcConnID() uint32              { return be.Uint32(h[0:]) }
func (h HandshakeHeader) SetSrcConnID(v uint32)          { be.PutUint32(h[0:], v) }
func (h HandshakeHeader) InitialPSN() uint32             { return be.Uint32(h[4:]) }
func (h HandshakeHeader) SetInitialPSN(v uint32)         { be.PutUint32(h[4:], v) }
func (h HandshakeHeader) InitialDSN() uint32             { return be.Uint32(h[8:]) }
func (h HandshakeHeader) SetInitialDSN(v uint32)         { be.PutUint32(h[8:], v) }
func (h HandshakeHeader) DSNWindow() uint32              { return be.Uint32(h[12:]) }
func (h HandshakeHeader) SetDSNWindow(v uint32)          { be.PutUint32(h[12:], v) }
func (h HandshakeHeader) MaxPacket() uint16              { return be.Uint16(h[16:]) }
func (h HandshakeHeader) SetMaxPacket(v uint16)          { be.PutUint16(h[16:], v) }
func (h HandshakeHeader) Paths() uint16                  { return be.Uint16(h[18:]) }
func (h HandshakeHeader) SetPaths(v uint16)              { be.PutUint16(h[18:], v) }
func (h HandshakeHeader) Streams() uint16                { return be.Uint16(h[20:]) }
func (h HandshakeHeader) SetStreams(v uint16)            { be.PutUint16(h[20:], v) }
func (h HandshakeHeader) ReplyPort() uint16              { return be.Uint16(h[22:]) }
func (h HandshakeHeader) SetReplyPort(v uint16)          { be.PutUint16(h[22:], v) }
func (h HandshakeHeader) MaxReadsOut() uint16            { return be.Uint16(h[24:]) }
func (h HandshakeHeader) SetMaxReadsOut(v uint16)        { be.PutUint16(h[24:], v) }
func (h HandshakeHeader) MaxReadsIn() uint16             { return be.Uint16(h[26:]) }
func (h HandshakeHeader) SetMaxReadsIn(v uint16)         { be.PutUint16(h[26:], v) }
func (h HandshakeHeader) Capabilities() Capabilities     { return Capabilities(be.Uint32(h[28:])) }
func (h HandshakeHeader) SetCapabilities(c Capabilities) { be.PutUint32(h[28:], uint32(c)) }
func (h HandshakeHeader) InboundCapacity() uint64        { return be.Uint64(h[32:]) }
func (h HandshakeHeader) SetInboundCapacity(v uint64)    { be.PutUint64(h[32:], v) }
func (h HandshakeHeader) Mode() Mode                     { return Mode(h[40]) }
func (h HandshakeHeader) SetMode(m Mode)                 { h[40] = byte(m) }

// CloseHeader views the 8-byte extension of CLOSE.
type CloseHeader []byte

func (h CloseHeader) Reason() CloseReason     { return CloseReason(be.Uint16(h[0:])) }
func (h CloseHeader) SetReason(r CloseReason) { be.PutUint16(h[0:], uint16(r)) }
func (h CloseHeader) Detail() uint32          { return be.Uint32(h[4:]) }
func (h CloseHeader) SetDetail(v uint32)      { be.PutUint32(h[4:], v) }

// ProbeHeader views the 4-byte extension of PROBE.
type ProbeHeader []byte

func (h ProbeHeader) ProbeID() uint32     { return be.Uint32(h[0:]) }
func (h ProbeHeader) SetProbeID(v uint32) { be.PutUint32(h[0:], v) }

// ProbeReplyHeader views the 12-byte extension of PROBE_REPLY.
type ProbeReplyHeader []byte

func (h ProbeReplyHeader) ProbeID() uint32           { return be.Uint32(h[0:]) }
func (h ProbeReplyHeader) SetProbeID(v uint32)       { be.PutUint32(h[0:], v) }
func (h ProbeReplyHeader) EchoTimestamp() uint32     { return be.Uint32(h[4:]) }
func (h ProbeReplyHeader) SetEchoTimestamp(v uint32) { be.PutUint32(h[4:], v) }
func (h ProbeReplyHeader) ServiceTime() uint32       { return be.Uint32(h[8:]) }
func (h ProbeReplyHeader) SetServiceTime(v uint32)   { be.PutUint32(h[8:], v) }

// RetryHeader views the 16-byte extension of RETRY.
type RetryHeader []byte

// Token returns a copy of the RETRY's token, which the initiator returns
// as its next CONNECT's payload.
func (h RetryHeader) Token() (v [TokenLen]byte) { copy(v[:], h[:TokenLen]); return v }

// SetToken writes the RETRY's token.
func (h RetryHeader) SetToken(v [TokenLen]byte) { copy(h[:TokenLen], v[:]) }

// Trailer views the 4-byte CRC32C trailer.
type Trailer []byte

func (t Trailer) CRC() uint32     { return be.Uint32(t[0:]) }
func (t Trailer) SetCRC(v uint32) { be.PutUint32(t[0:], v) }

// AuthHello views the 100 bytes of key exchange that a CONNECT with AUTH
// carries as its payload (spec section 13.3).
type AuthHello []byte

func (h AuthHello) Suite() uint8            { return h[0] }
func (h AuthHello) SetSuite(v uint8)        { h[0] = v }
func (h AuthHello) Method() uint8           { return h[1] }
func (h AuthHello) SetMethod(v uint8)       { h[1] = v }
func (h AuthHello) Ephemeral() (v [32]byte) { copy(v[:], h[4:36]); return v }
func (h AuthHello) SetEphemeral(v [32]byte) { copy(h[4:36], v[:]) }
func (h AuthHello) Static() (v [48]byte)    { copy(v[:], h[36:84]); return v }
func (h AuthHello) SetStatic(v [48]byte)    { copy(h[36:84], v[:]) }
func (h AuthHello) Confirm() (v [16]byte)   { copy(v[:], h[84:100]); return v }
func (h AuthHello) SetConfirm(v [16]byte)   { copy(h[84:100], v[:]) }

// AuthAccept views the 48 bytes of key exchange that an ACCEPT with AUTH
// carries as its payload (spec section 13.3).
type AuthAccept []byte

func (h AuthAccept) Ephemeral() (v [32]byte) { copy(v[:], h[0:32]); return v }
func (h AuthAccept) SetEphemeral(v [32]byte) { copy(h[0:32], v[:]) }
func (h AuthAccept) Confirm() (v [16]byte)   { copy(v[:], h[32:48]); return v }
func (h AuthAccept) SetConfirm(v [16]byte)   { copy(h[32:48], v[:]) }

// Tag views the 16-byte AEAD tag that ends a protected packet in the
// trailer's place (spec section 13.4).
type Tag []byte

func (t Tag) Tag() (v [TagLen]byte) { copy(v[:], t[:TagLen]); return v }
func (t Tag) SetTag(v [TagLen]byte) { copy(t[:TagLen], v[:]) }
