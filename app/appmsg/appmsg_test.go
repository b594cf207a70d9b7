package appmsg

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/proto"
)

const initiatorID, acceptorID = 0x1111, 0x2222

// packet builds one packet of type t with payload bytes, after fill set
// its fields.
func packet(t *testing.T, typ proto.Type, payload []byte, fill func(p *proto.Packet)) []byte {
	t.Helper()
	var p proto.Packet
	if err := proto.Build(&p, make([]byte, 2048), typ, 0, len(payload)); err != nil {
		t.Fatal(err)
	}
	copy(p.Payload, payload)
	fill(&p)
	return bytes.Clone(p.Seal())
}

func sendPacket(t *testing.T, to, dsn uint32, msn uint32, msgLen, off uint32, payload []byte) []byte {
	return packet(t, proto.TypeSend, payload, func(p *proto.Packet) {
		p.Common.SetDstConnID(to)
		p.Common.SetDSN(dsn)
		s := p.Send()
		s.SetStream(1)
		s.SetMSN(msn)
		s.SetRSN(msn)
		s.SetMsgLen(msgLen)
		s.SetMsgOffset(off)
	})
}

func closePacket(t *testing.T, to uint32, reason proto.CloseReason) []byte {
	return packet(t, proto.TypeClose, nil, func(p *proto.Packet) {
		p.Common.SetDstConnID(to)
		p.Close().SetReason(reason)
	})
}

// A SEND whose packets come out of order, one of them twice, is one
// message, whole; each side's messages are told apart by the ids the
// handshake gave; responses, ACKs, answers to a CLOSE and other
// connections' packets are no messages.
func TestExtract(t *testing.T) {
	connect := packet(t, proto.TypeConnect, nil, func(p *proto.Packet) { p.Handshake().SetSrcConnID(initiatorID) })
	accept := packet(t, proto.TypeAccept, nil, func(p *proto.Packet) {
		p.Common.SetDstConnID(initiatorID)
		p.Handshake().SetSrcConnID(acceptorID)
	})
	write := packet(t, proto.TypeWrite, []byte("abcd"), func(p *proto.Packet) {
		p.Common.SetDstConnID(initiatorID)
		p.Common.SetDSN(7)
		w := p.Write()
		w.SetRKey(0xfeed)
		w.SetMsgLen(4)
		w.SetStream(1)
	})
	resp := packet(t, proto.TypeReadResp, []byte("zz"), func(p *proto.Packet) {
		p.Common.SetDstConnID(acceptorID)
		p.Common.SetDSN(99)
		p.ReadResp().SetMsgLen(2)
	})
	packets := [][]byte{
		sendPacket(t, acceptorID, 1, 0, 10, 0, []byte("hello")), // before the handshake: not this connection's yet
		connect, accept,
		sendPacket(t, acceptorID, 2, 0, 10, 5, []byte("world")),
		sendPacket(t, 0x9999, 3, 0, 10, 0, []byte("other")),
		sendPacket(t, acceptorID, 1, 0, 10, 0, []byte("hello")),
		sendPacket(t, acceptorID, 2, 0, 10, 5, []byte("WORLD")), // a resend of DSN 2: not placed again
		write, resp,
		closePacket(t, acceptorID, proto.CloseNormal),
		closePacket(t, initiatorID, proto.CloseClosed),
	}
	msgs, err := Extract(packets)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 {
		for _, m := range msgs {
			t.Log(m.String())
		}
		t.Fatalf("%d messages, want 3", len(msgs))
	}
	send, w, cl := msgs[0], msgs[1], msgs[2]
	if !send.Initiator || send.Type != proto.TypeSend || string(send.Payload) != "helloworld" || !send.Complete() {
		t.Errorf("the SEND: %s %q", send.String(), send.Payload)
	}
	if w.Initiator || w.Type != proto.TypeWrite || w.RKey != 0xfeed || w.Len != 4 || w.Payload != nil {
		t.Errorf("the WRITE: %s", w.String())
	}
	if !cl.Initiator || cl.Type != proto.TypeClose || cl.Reason != proto.CloseNormal {
		t.Errorf("the CLOSE: %s", cl.String())
	}
	if got := send.String(); got != "> SEND s1 msn0 rsn0 10" {
		t.Errorf("%q", got)
	}
	if _, err := Extract(packets[3:]); err == nil {
		t.Error("a capture without its handshake was read")
	}
	half, _ := Extract(packets[:4])
	if len(half) != 1 || half[0].Complete() || half[0].Payload != nil {
		t.Errorf("half a SEND: %+v", half)
	}
}

func TestSameJSON(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"rkey":1,"len":64}`, `{"len":64,"rkey":2}`, true},
		{`{"rkey":1,"len":64}`, `{"rkey":1,"len":65}`, false},
		{`{"rkey":1,"len":64}`, `{"rkey":1}`, false},
		{`{"a":[1, 2]}`, `{"a":[1,2]}`, true},
		{`{"a":1}`, `not json`, false},
	} {
		if got := SameJSON([]byte(c.a), []byte(c.b), "rkey"); got != c.same {
			t.Errorf("SameJSON(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// FuzzExtract reads any packets without a panic. The seeds are the
// golden captures' packets (testdata/apps).
func FuzzExtract(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/apps/*.pcap")
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			f.Fatal(err)
		}
		payloads, err := pcapio.ReadPayloads(fh, 0)
		fh.Close()
		if err != nil {
			f.Fatal(err)
		}
		var all []byte
		for _, p := range payloads {
			if len(p) < 2 || proto.Type(p[1]) == proto.TypeProbe || proto.Type(p[1]) == proto.TypeAck {
				continue // the packets that carry messages, or say whose they are, make a seed the fuzzer mutates quickly
			}
			all = append(all, byte(len(p)>>8), byte(len(p)))
			all = append(all, p...)
		}
		f.Add(all)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// b is packets, each after its 2-byte length.
		var packets [][]byte
		for len(b) >= 2 {
			n := int(b[0])<<8 | int(b[1])
			b = b[2:]
			n = min(n, len(b))
			packets = append(packets, b[:n])
			b = b[n:]
		}
		msgs, err := Extract(packets)
		for _, m := range msgs {
			if m.Type == proto.TypeSend && m.Complete() != (len(m.Payload) == int(m.Len)) && m.Len != 0 {
				t.Fatalf("a SEND of %d bytes holds %d", m.Len, len(m.Payload))
			}
			_ = m.String()
		}
		_ = err
	})
}
