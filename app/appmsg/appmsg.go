// Package appmsg reads the application messages of one connection out of
// the packets that carried it: the SENDs, WRITEs, WRITE_IMMs and READs
// each side posted, whole, and how the connection ended. It reads the
// golden captures of docs/apps.md, and serves `mroce decode --apps`.
package appmsg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mroce/mroce/proto"
)

// Message is one application message, or one CLOSE.
type Message struct {
	// Initiator is set for a message of the side that sent the CONNECT.
	Initiator bool
	Type      proto.Type // WRITE, WRITE_IMM, SEND, READ_REQ or CLOSE
	Stream    uint16
	MSN, RSN  uint32 // RSN for SEND and WRITE_IMM
	Imm       uint32 // WRITE_IMM
	RKey      uint64 // WRITE, WRITE_IMM, READ_REQ
	Len       uint32 // the message's length, or a READ's
	// Payload is a SEND's bytes, when the capture holds them all
	// (Complete). Other messages keep none.
	Payload []byte
	// A CLOSE's reason and detail.
	Reason proto.CloseReason
	Detail uint32

	placed int    // payload bytes seen
	parts  []part // a SEND's payloads, until it is put together
}

// part is the payload of one packet of a SEND, at its offset.
type part struct {
	off  uint32
	data []byte
}

// Complete reports whether every byte of a SEND arrived in the capture.
func (m *Message) Complete() bool { return m.Type != proto.TypeSend || m.placed >= int(m.Len) }

// String is the message on one line, as docs/apps.md shows it: > for the
// initiator, < for the acceptor.
func (m *Message) String() string {
	dir := "<"
	if m.Initiator {
		dir = ">"
	}
	if m.Type == proto.TypeClose {
		return fmt.Sprintf("%s CLOSE %v %d", dir, m.Reason, m.Detail)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %v s%d msn%d", dir, m.Type, m.Stream, m.MSN)
	switch m.Type {
	case proto.TypeSend:
		fmt.Fprintf(&sb, " rsn%d", m.RSN)
	case proto.TypeWriteImm:
		fmt.Fprintf(&sb, " rsn%d imm%d rkey%#x", m.RSN, m.Imm, m.RKey)
	default:
		fmt.Fprintf(&sb, " rkey%#x", m.RKey)
	}
	fmt.Fprintf(&sb, " %d", m.Len)
	if m.Type == proto.TypeSend && json.Valid(m.Payload) {
		fmt.Fprintf(&sb, " %s", m.Payload)
	}
	return sb.String()
}

// key names a message within its direction.
type key struct {
	initiator bool
	stream    uint16
	msn       uint32
}

// Extract reads the messages of the one connection that packets, the UDP
// payloads of a capture in its order, carry. It needs the connection's
// CONNECT and ACCEPT, which say which side is which. Packets that do not
// decode, of other connections, resent or control packets other than CLOSE
// are passed over. A CLOSE that answers one (CLOSED) is not a message.
// Messages come in the order of their first packets, as they are met.
func Extract(packets [][]byte) ([]Message, error) {
	var initiatorID, acceptorID uint32 // the ids each side receives at
	var haveConnect, haveAccept bool
	msgs := map[key]*Message{}
	seenDSN := map[[2]uint32]bool{} // by direction and DSN
	var out []*Message
	for _, b := range packets {
		var p proto.Packet
		if p.Decode(b) != nil {
			continue
		}
		switch p.Type() {
		case proto.TypeConnect:
			initiatorID, haveConnect = p.Handshake().SrcConnID(), true
			continue
		case proto.TypeAccept:
			acceptorID, haveAccept = p.Handshake().SrcConnID(), true
			continue
		}
		if !haveConnect || !haveAccept {
			continue
		}
		dst := p.Common.DstConnID()
		if dst != initiatorID && dst != acceptorID {
			continue
		}
		fromInitiator := dst == acceptorID
		if p.Type() == proto.TypeClose {
			if c := p.Close(); c.Reason() != proto.CloseClosed {
				out = append(out, &Message{Initiator: fromInitiator, Type: proto.TypeClose, Reason: c.Reason(), Detail: c.Detail()})
			}
			continue
		}
		if !p.Type().IsData() {
			continue
		}
		dir := uint32(0)
		if fromInitiator {
			dir = 1
		}
		if d := [2]uint32{dir, p.Common.DSN()}; seenDSN[d] {
			continue
		} else {
			seenDSN[d] = true
		}
		m := Message{Initiator: fromInitiator, Type: p.Type()}
		var off uint32
		switch p.Type() {
		case proto.TypeWrite, proto.TypeWriteImm:
			w := p.Write()
			m.Stream, m.MSN, m.RKey, m.Len, off = w.Stream(), w.MSN(), w.RKey(), w.MsgLen(), w.MsgOffset()
			if p.Type() == proto.TypeWriteImm {
				m.RSN, m.Imm = p.Imm().RSN(), p.Imm().Immediate()
			}
		case proto.TypeSend:
			s := p.Send()
			m.Stream, m.MSN, m.RSN, m.Len, off = s.Stream(), s.MSN(), s.RSN(), s.MsgLen(), s.MsgOffset()
		case proto.TypeReadReq:
			r := p.ReadReq()
			m.Stream, m.MSN, m.RKey, m.Len = r.Stream(), r.MSN(), r.RKey(), r.MsgLen()
		default:
			continue // responses are the transport's, not the application's
		}
		k := key{fromInitiator, m.Stream, m.MSN}
		have := msgs[k]
		if have == nil {
			have = &m
			msgs[k] = have
			out = append(out, have)
		}
		if have.Type == proto.TypeSend && int(off)+len(p.Payload) <= int(have.Len) {
			have.parts = append(have.parts, part{off, bytes.Clone(p.Payload)})
			have.placed += len(p.Payload)
		}
	}
	if !haveConnect || !haveAccept {
		return nil, fmt.Errorf("appmsg: the capture holds no CONNECT and ACCEPT")
	}
	res := make([]Message, len(out))
	for i, m := range out {
		// A SEND is put together once the capture holds as many bytes of
		// it as it claims, so that its claim never sizes a buffer beyond
		// the capture.
		if m.Type == proto.TypeSend && m.Complete() {
			m.Payload = make([]byte, m.Len)
			for _, p := range m.parts {
				copy(m.Payload[p.off:], p.data)
			}
		}
		m.parts = nil
		res[i] = *m
	}
	return res, nil
}

// SameJSON reports whether two control messages are the same JSON object
// member for member, whatever their members' order, with the values of
// the members named in ignore (keys, which differ between runs) left out.
func SameJSON(a, b []byte, ignore ...string) bool {
	var x, y map[string]json.RawMessage
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil || len(x) != len(y) {
		return false
	}
	for name, v := range x {
		w, ok := y[name]
		if !ok {
			return false
		}
		if !slices.Contains(ignore, name) && !bytes.Equal(compact(v), compact(w)) {
			return false
		}
	}
	return true
}

func compact(v json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return v
	}
	return b.Bytes()
}
