package proto

import "fmt"

// FieldLayout is one row of a layout table in docs/spec.md. It is a field of
// Width bits starting at bit Bit of byte Byte of its part, where bit 0 is
// the most significant. Fields narrower than a byte stay inside one byte,
// and wider ones start at bit 0.
type FieldLayout struct {
	Name  string // the accessor name, or "reserved"
	Byte  int
	Bit   int
	Width int
}

// Reserved reports whether the row is a reserved field.
func (f FieldLayout) Reserved() bool { return f.Name == "reserved" }

// Uint reads the field from part b as an unsigned integer. Width must be <= 64.
func (f FieldLayout) Uint(b []byte) uint64 {
	if f.Width < 8 {
		return uint64(b[f.Byte]>>(8-f.Bit-f.Width)) & (1<<f.Width - 1)
	}
	var v uint64
	for i := 0; i < f.Width/8; i++ {
		v = v<<8 | uint64(b[f.Byte+i])
	}
	return v
}

// PartLayout is one layout table of the spec, the fields of one part in
// order.
type PartLayout struct {
	Name   string // the view type's name, as in the spec's layout marker
	Size   int    // in bytes
	Fields []FieldLayout
}

// Layouts are the spec's layout tables, for tools that print or generate
// dissectors from the wire format. spec_test.go checks them against both the
// spec and the accessors.
var Layouts = []PartLayout{
	{"CommonHeader", CommonHeaderLen, []FieldLayout{
		{"Version", 0, 0, 4}, {"Protected", 0, 4, 1}, {"reserved", 0, 5, 3}, {"Type", 1, 0, 8}, {"Flags", 2, 0, 16},
		{"HdrLen", 4, 0, 8}, {"PathID", 5, 0, 8}, {"Epoch", 6, 0, 2}, {"KeyPhase", 6, 2, 2}, {"reserved", 6, 4, 4},
		{"reserved", 7, 0, 8}, {"DstConnID", 8, 0, 32}, {"PSN", 12, 0, 32}, {"DSN", 16, 0, 32},
		{"Timestamp", 20, 0, 32}, {"Backlog", 24, 0, 32},
	}},
	{"WriteHeader", 32, []FieldLayout{
		{"RKey", 0, 0, 64}, {"RemoteOffset", 8, 0, 64}, {"MsgLen", 16, 0, 32},
		{"MsgOffset", 20, 0, 32}, {"Stream", 24, 0, 16}, {"reserved", 26, 0, 16}, {"MSN", 28, 0, 32},
	}},
	{"ImmHeader", 8, []FieldLayout{{"RSN", 0, 0, 32}, {"Immediate", 4, 0, 32}}},
	{"SendHeader", 20, []FieldLayout{
		{"Stream", 0, 0, 16}, {"reserved", 2, 0, 16}, {"MSN", 4, 0, 32}, {"RSN", 8, 0, 32},
		{"MsgLen", 12, 0, 32}, {"MsgOffset", 16, 0, 32},
	}},
	{"ReadReqHeader", 32, []FieldLayout{
		{"Stream", 0, 0, 16}, {"reserved", 2, 0, 16}, {"MSN", 4, 0, 32}, {"RKey", 8, 0, 64},
		{"RemoteOffset", 16, 0, 64}, {"MsgLen", 24, 0, 32}, {"ReadTag", 28, 0, 32},
	}},
	{"ReadRespHeader", 12, []FieldLayout{{"ReadTag", 0, 0, 32}, {"MsgOffset", 4, 0, 32}, {"MsgLen", 8, 0, 32}}},
	{"AckHeader", AckHeaderLen, []FieldLayout{
		{"CumDSN", 0, 0, 32}, {"RecordCount", 4, 0, 8}, {"CreditStream", 5, 0, 8},
		{"CreditLimit", 6, 0, 16}, {"RateHint", 8, 0, 64},
	}},
	{"AckRecord", AckRecordLen, []FieldLayout{
		{"PathID", 0, 0, 8}, {"Epoch", 1, 0, 2}, {"reserved", 1, 2, 6}, {"reserved", 2, 0, 16},
		{"HighestPSN", 4, 0, 32}, {"CECount", 8, 0, 32}, {"EchoTimestamp", 12, 0, 32},
		{"ServiceTime", 16, 0, 32}, {"Bitvector", 20, 0, 256},
	}},
	{"NackHeader", 20, []FieldLayout{
		{"Code", 0, 0, 8}, {"PathID", 1, 0, 8}, {"Epoch", 2, 0, 2}, {"reserved", 2, 2, 6},
		{"reserved", 3, 0, 8}, {"PSN", 4, 0, 32}, {"DSN", 8, 0, 32}, {"Stream", 12, 0, 16},
		{"RetryAfter", 14, 0, 16}, {"MSN", 16, 0, 32},
	}},
	{"HandshakeHeader", HandshakeHeaderLen, []FieldLayout{
		{"SrcConnID", 0, 0, 32}, {"InitialPSN", 4, 0, 32}, {"InitialDSN", 8, 0, 32},
		{"DSNWindow", 12, 0, 32}, {"MaxPacket", 16, 0, 16}, {"Paths", 18, 0, 16}, {"Streams", 20, 0, 16},
		{"ReplyPort", 22, 0, 16}, {"MaxReadsOut", 24, 0, 16}, {"MaxReadsIn", 26, 0, 16},
		{"Capabilities", 28, 0, 32}, {"InboundCapacity", 32, 0, 64}, {"Mode", 40, 0, 8},
		{"reserved", 41, 0, 8}, {"reserved", 42, 0, 16},
	}},
	{"RetryHeader", TokenLen, []FieldLayout{{"Token", 0, 0, TokenLen * 8}}},
	{"CloseHeader", 8, []FieldLayout{{"Reason", 0, 0, 16}, {"reserved", 2, 0, 16}, {"Detail", 4, 0, 32}}},
	{"ProbeHeader", 4, []FieldLayout{{"ProbeID", 0, 0, 32}}},
	{"ProbeReplyHeader", 12, []FieldLayout{{"ProbeID", 0, 0, 32}, {"EchoTimestamp", 4, 0, 32}, {"ServiceTime", 8, 0, 32}}},
	{"Trailer", TrailerLen, []FieldLayout{{"CRC", 0, 0, 32}}},
	{"AtomicHeader", AtomicHeaderLen, []FieldLayout{
		{"Stream", 0, 0, 16}, {"reserved", 2, 0, 16}, {"MSN", 4, 0, 32}, {"RKey", 8, 0, 64},
		{"RemoteOffset", 16, 0, 64}, {"Operand", 24, 0, 64}, {"Compare", 32, 0, 64}, {"AtomicTag", 40, 0, 32},
	}},
	{"AtomicRespHeader", 12, []FieldLayout{{"AtomicTag", 0, 0, 32}, {"Original", 4, 0, 64}}},
	{"AuthHello", AuthHelloLen, []FieldLayout{
		{"Suite", 0, 0, 8}, {"Method", 1, 0, 8}, {"reserved", 2, 0, 16}, {"Ephemeral", 4, 0, 256},
		{"Static", 36, 0, 384}, {"Confirm", 84, 0, 128},
	}},
	{"AuthAccept", AuthAcceptLen, []FieldLayout{{"Ephemeral", 0, 0, 256}, {"Confirm", 32, 0, 128}}},
	{"Tag", TagLen, []FieldLayout{{"Tag", 0, 0, TagLen * 8}}},
}

// LayoutOf returns the layout table of the named part.
func LayoutOf(name string) (PartLayout, bool) {
	for _, l := range Layouts {
		if l.Name == name {
			return l, true
		}
	}
	return PartLayout{}, false
}

// Section is one part of a decoded packet: its layout and its bytes.
type Section struct {
	Layout PartLayout
	Bytes  []byte
	Index  int // the record number, for AckRecord sections
}

// Sections lists the parts of a decoded packet in wire order, header first
// and trailer last. The payload is not a section. Sections allocates, so it
// is for tools.
func (p *Packet) Sections() []Section {
	part := func(name string, b []byte, i int) Section {
		l, ok := LayoutOf(name)
		if !ok {
			panic(fmt.Sprintf("proto: no layout %q", name))
		}
		return Section{l, b[:l.Size], i}
	}
	s := []Section{part("CommonHeader", p.Common, 0)}
	switch p.Type() {
	case TypeWrite:
		s = append(s, part("WriteHeader", p.Write(), 0))
	case TypeWriteImm:
		s = append(s, part("WriteHeader", p.Write(), 0), part("ImmHeader", p.Imm(), 0))
	case TypeSend:
		s = append(s, part("SendHeader", p.Send(), 0))
	case TypeReadReq:
		s = append(s, part("ReadReqHeader", p.ReadReq(), 0))
	case TypeReadResp:
		s = append(s, part("ReadRespHeader", p.ReadResp(), 0))
	case TypeFetchAdd, TypeCmpSwap:
		s = append(s, part("AtomicHeader", p.Atomic(), 0))
	case TypeAtomicResp:
		s = append(s, part("AtomicRespHeader", p.AtomicResp(), 0))
	case TypeAck:
		s = append(s, part("AckHeader", p.Ack(), 0))
		for i := 0; i < int(p.Ack().RecordCount()); i++ {
			s = append(s, part("AckRecord", p.AckRecord(i), i))
		}
	case TypeNack:
		s = append(s, part("NackHeader", p.Nack(), 0))
	case TypeConnect, TypeAccept:
		s = append(s, part("HandshakeHeader", p.Handshake(), 0))
		if h, ok := p.AuthHello(); ok {
			s = append(s, part("AuthHello", h, 0))
		}
		if a, ok := p.AuthAccept(); ok {
			s = append(s, part("AuthAccept", a, 0))
		}
	case TypeClose:
		s = append(s, part("CloseHeader", p.Close(), 0))
	case TypeProbe:
		s = append(s, part("ProbeHeader", p.Probe(), 0))
	case TypeProbeReply:
		s = append(s, part("ProbeReplyHeader", p.ProbeReply(), 0))
	case TypeRetry:
		s = append(s, part("RetryHeader", p.Retry(), 0))
	}
	if p.Common.Protected() {
		return append(s, part("Tag", p.Tag(), 0))
	}
	return append(s, part("Trailer", p.Trailer(), 0))
}
