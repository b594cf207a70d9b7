package proto

import (
	"fmt"
	"strings"
)

// Version is the wire format version this package speaks.
const Version = 0

// DefaultPort is the default UDP destination port, from section 11 of the
// spec.
const DefaultPort = 4797

// Sizes fixed by the spec.
const (
	CommonHeaderLen    = 28
	TrailerLen         = 4
	MinPacketLen       = CommonHeaderLen + TrailerLen // a CNP
	MaxPacketLen       = 65507                        // the largest UDP payload over IPv4
	MinMTU             = 256
	AckHeaderLen       = 16
	TokenLen           = 16 // a RETRY's token, which the CONNECT that follows carries as its payload
	TagLen             = 16 // a protected packet's AEAD tag, in the trailer's place (section 13.4)
	HandshakeHeaderLen = 44 // a CONNECT's or ACCEPT's extension
	AtomicHeaderLen    = 44 // a FETCH_ADD's or CMP_SWAP's extension
	AuthHelloLen       = 100
	AuthAcceptLen      = 48
	MinProtectedLen    = CommonHeaderLen + TagLen // a protected CNP
	AckRecordLen       = 52
	MaxAckRecords      = 18
	BitvectorBits      = 256
	BacklogUnit        = 64 // bytes per unit of the Backlog field
	MaxPaths           = 256
	MaxStreams         = 65535
	MaxDSNWindow       = 1 << 30
	ackRecordsStart    = CommonHeaderLen + AckHeaderLen
	maxHeaderLenInWord = 255
)

// Rate hint values with a special meaning, in bytes per second, from section
// 5.5 of the spec.
const (
	RateStop    uint64 = 0
	RateNoLimit uint64 = ^uint64(0)
)

// CapacityUnknown is the InboundCapacity of a side that does not know its own.
const CapacityUnknown uint64 = ^uint64(0)

// Type is a packet type, from section 3 of the spec.
type Type uint8

const (
	TypeWrite      Type = 0x01
	TypeWriteImm   Type = 0x02
	TypeSend       Type = 0x03
	TypeReadReq    Type = 0x05
	TypeReadResp   Type = 0x06
	TypeFetchAdd   Type = 0x07
	TypeCmpSwap    Type = 0x08
	TypeAtomicResp Type = 0x09
	TypeAck        Type = 0x10
	TypeNack       Type = 0x11
	TypeCNP        Type = 0x12
	TypeConnect    Type = 0x20
	TypeAccept     Type = 0x21
	TypeClose      Type = 0x22
	TypeProbe      Type = 0x23
	TypeProbeReply Type = 0x24
	TypeRetry      Type = 0x25
)

// typeInfo is what the spec's section 3 table says of each type.
type typeInfo struct {
	name       string
	headerLen  int  // in bytes, and for an ACK without records
	hasPayload bool // data payload bounded by MsgOffset and MsgLen, or PROBE padding
	token      bool // a payload of exactly TokenLen bytes, a RETRY's token, or none (CONNECT)
}

var typeTable = [256]typeInfo{
	TypeWrite:      {"WRITE", CommonHeaderLen + 32, true, false},
	TypeWriteImm:   {"WRITE_IMM", CommonHeaderLen + 32 + 8, true, false},
	TypeSend:       {"SEND", CommonHeaderLen + 20, true, false},
	TypeReadReq:    {"READ_REQ", CommonHeaderLen + 32, false, false},
	TypeReadResp:   {"READ_RESP", CommonHeaderLen + 12, true, false},
	TypeFetchAdd:   {"FETCH_ADD", CommonHeaderLen + AtomicHeaderLen, false, false},
	TypeCmpSwap:    {"CMP_SWAP", CommonHeaderLen + AtomicHeaderLen, false, false},
	TypeAtomicResp: {"ATOMIC_RESP", CommonHeaderLen + 12, false, false},
	TypeAck:        {"ACK", CommonHeaderLen + AckHeaderLen, false, false},
	TypeNack:       {"NACK", CommonHeaderLen + 20, false, false},
	TypeCNP:        {"CNP", CommonHeaderLen, false, false},
	TypeConnect:    {"CONNECT", CommonHeaderLen + HandshakeHeaderLen, false, true},
	TypeAccept:     {"ACCEPT", CommonHeaderLen + HandshakeHeaderLen, false, false},
	TypeClose:      {"CLOSE", CommonHeaderLen + 8, false, false},
	TypeProbe:      {"PROBE", CommonHeaderLen + 4, true, false},
	TypeProbeReply: {"PROBE_REPLY", CommonHeaderLen + 12, false, false},
	TypeRetry:      {"RETRY", CommonHeaderLen + TokenLen, false, false},
}

// Types lists every type version 0 defines, in code order.
var Types = []Type{TypeWrite, TypeWriteImm, TypeSend, TypeReadReq, TypeReadResp,
	TypeFetchAdd, TypeCmpSwap, TypeAtomicResp, TypeAck, TypeNack, TypeCNP, TypeConnect, TypeAccept, TypeClose, TypeProbe, TypeProbeReply, TypeRetry}

// Known reports whether version 0 defines t.
func (t Type) Known() bool { return typeTable[t].headerLen != 0 }

// IsAtomic reports whether t is an atomic request, FETCH_ADD or CMP_SWAP
// (spec section 5.12).
func (t Type) IsAtomic() bool { return t == TypeFetchAdd || t == TypeCmpSwap }

// IsRequest reports whether t asks the peer for data of its own in
// return: READ_REQ, FETCH_ADD or CMP_SWAP. Such a request is one packet
// without payload, and counts against the READ limit (spec section 6.5).
func (t Type) IsRequest() bool { return t == TypeReadReq || t.IsAtomic() }

// IsData reports whether t is a data type, one that is sequenced,
// acknowledged and retransmitted.
func (t Type) IsData() bool { return t.Known() && t < 0x10 }

// HasPayload reports whether packets of type t may carry a payload of any
// length. That is message data for WRITE, WRITE_IMM, SEND and READ_RESP,
// or padding for PROBE. A CONNECT's token is not such a payload (see
// CarriesToken).
func (t Type) HasPayload() bool { return typeTable[t].hasPayload }

// CarriesToken reports whether packets of type t may carry a RETRY's token
// as their payload: exactly TokenLen bytes, or no payload at all. Only a
// CONNECT does (spec section 8.1).
func (t Type) CarriesToken() bool { return typeTable[t].token }

// SetAside says what a reserved type code is kept for, as section 3 of the
// spec lists, or "" for a code with no planned use. Version 0 treats them
// all as unknown.
func SetAside(t Type) string {
	if t == 0x04 {
		return "SEND with immediate data"
	}
	return ""
}

// DefaultDSCP is the DSCP a packet of type t carries unless configured
// otherwise, as section 11 of the spec says. That is 26 for data, ACK and
// NACK, 48 for CNP and 0 for the rest.
func DefaultDSCP(t Type) uint8 {
	switch {
	case t.IsData(), t == TypeAck, t == TypeNack:
		return 26
	case t == TypeCNP:
		return 48
	}
	return 0
}

// HeaderLen returns the header length in bytes of a packet of type t with
// the given number of ACK records, which other types ignore.
func HeaderLen(t Type, ackRecords int) (int, error) {
	if !t.Known() {
		return 0, ErrUnknownType
	}
	n := typeTable[t].headerLen
	if t == TypeAck {
		if ackRecords < 0 || ackRecords > MaxAckRecords {
			return 0, ErrRecordCount
		}
		n += ackRecords * AckRecordLen
	}
	return n, nil
}

func (t Type) String() string {
	if t.Known() {
		return typeTable[t].name
	}
	return fmt.Sprintf("UNKNOWN(0x%02x)", uint8(t))
}

// Flags is the 16-bit flag field, from section 4.1 of the spec.
type Flags uint16

const (
	FlagAckRequest Flags = 0x8000 // AR asks for an acknowledgment at once
	FlagRetransmit Flags = 0x4000 // RT says this content was sent before
	FlagSolicited  Flags = 0x2000 // SE asks for a solicited completion event
	FlagsReserved  Flags = 0x1FFF // sent as 0 and ignored
)

func (f Flags) String() string {
	var names []string
	for _, n := range []struct {
		bit  Flags
		name string
	}{{FlagAckRequest, "AR"}, {FlagRetransmit, "RT"}, {FlagSolicited, "SE"}} {
		if f&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	if r := f & FlagsReserved; r != 0 {
		names = append(names, fmt.Sprintf("reserved(0x%04x)", uint16(r)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// NackCode says why a receiver refused a data packet, from section 7 of the
// spec.
type NackCode uint8

const (
	NackBadKey      NackCode = 0x01
	NackAccess      NackCode = 0x02
	NackBounds      NackCode = 0x03
	NackRNR         NackCode = 0x04
	NackBadStream   NackCode = 0x05
	NackReadLimit   NackCode = 0x06
	NackBadTag      NackCode = 0x07
	NackUnsupported NackCode = 0x08
	NackSeqErr      NackCode = 0x09
	NackResource    NackCode = 0x0A
)

var nackNames = map[NackCode]string{
	NackBadKey: "BAD_KEY", NackAccess: "ACCESS", NackBounds: "BOUNDS", NackRNR: "RNR",
	NackBadStream: "BAD_STREAM", NackReadLimit: "READ_LIMIT", NackBadTag: "BAD_TAG",
	NackUnsupported: "UNSUPPORTED", NackSeqErr: "SEQ_ERR", NackResource: "RESOURCE",
}

// Fatal reports whether the code ends the connection. Unknown codes are fatal.
func (c NackCode) Fatal() bool {
	return c != NackRNR && c != NackSeqErr && c != NackResource
}

func (c NackCode) String() string {
	if n, ok := nackNames[c]; ok {
		return n
	}
	return fmt.Sprintf("UNKNOWN(0x%02x)", uint8(c))
}

// CloseReason says why a connection ended, from section 8.4 of the spec.
type CloseReason uint16

const (
	CloseNormal   CloseReason = 0
	CloseRefused  CloseReason = 1
	CloseVersion  CloseReason = 2
	CloseParams   CloseReason = 3
	CloseFatal    CloseReason = 4
	CloseTimeout  CloseReason = 5
	CloseResource CloseReason = 6
	CloseClosed   CloseReason = 7 // acknowledges a CLOSE and is never answered
	// CloseApplication is an abortive close by the application, with a
	// code of the application's own protocol in Detail.
	CloseApplication CloseReason = 8
)

var closeNames = []string{"NORMAL", "REFUSED", "VERSION", "PARAMS", "FATAL", "TIMEOUT", "RESOURCE", "CLOSED", "APPLICATION"}

func (r CloseReason) String() string {
	if int(r) < len(closeNames) {
		return closeNames[r]
	}
	return fmt.Sprintf("UNKNOWN(%d)", uint16(r))
}

// Mode is the transport mode a connection runs, in HandshakeHeader.Mode.
type Mode uint8

const (
	ModeMultipath Mode = 0 // this spec's transport
	ModeBaseline  Mode = 1 // RoCEv2-like, with one path, in order, go-back-N and DCQCN
)

func (m Mode) String() string {
	switch m {
	case ModeMultipath:
		return "multipath"
	case ModeBaseline:
		return "baseline"
	}
	return fmt.Sprintf("UNKNOWN(%d)", uint8(m))
}

// Capabilities are the handshake's capability bits, from section 8.3 of the
// spec.
type Capabilities uint32

const (
	CapAtomics Capabilities = 1 << 0 // FETCH_ADD, CMP_SWAP and ATOMIC_RESP (sections 5.12 and 6.5)
	CapAuth    Capabilities = 1 << 1 // the authenticated mode (section 13)
	CapCredits Capabilities = 1 << 2 // receive credits in ACKs (sections 5.5 and 6.5)
	CapRecut   Capabilities = 1 << 3 // resends cut smaller when a path MTU falls (sections 6.5 and 6.7)
)

// NoCreditStream is an ACK's CreditStream when it names no stream: the
// receiver takes its receives from a shared queue, or has no stream below
// it (section 6.5).
const NoCreditStream = 0xFF

func (c Capabilities) String() string {
	var names []string
	if c&CapAtomics != 0 {
		names = append(names, "ATOMICS")
	}
	if c&CapAuth != 0 {
		names = append(names, "AUTH")
	}
	if c&CapCredits != 0 {
		names = append(names, "CREDITS")
	}
	if c&CapRecut != 0 {
		names = append(names, "RECUT")
	}
	if r := c &^ (CapAtomics | CapAuth | CapCredits | CapRecut); r != 0 {
		names = append(names, fmt.Sprintf("reserved(0x%08x)", uint32(r)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// EncodeBacklog converts a byte count to the Backlog field, in units of 64
// bytes, rounded up and saturating at the field's maximum.
func EncodeBacklog(bytes uint64) uint32 {
	units := bytes / BacklogUnit
	if bytes%BacklogUnit != 0 {
		units++
	}
	if units > 0xFFFFFFFF {
		return 0xFFFFFFFF
	}
	return uint32(units)
}

// DecodeBacklog converts the Backlog field to bytes. That is the sender's
// backlog rounded up to 64 bytes, or a lower bound of it when the field is
// saturated.
func DecodeBacklog(field uint32) uint64 { return uint64(field) * BacklogUnit }
