package bugs

import (
	"bytes"
	"slices"
	"testing"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// capture is an inner port that keeps copies of what it is sent.
type capture struct{ sent [][]byte }

func (c *capture) Buffer() []byte { return make([]byte, 0, proto.MaxPacketLen) }
func (c *capture) Send(batch []link.Datagram) {
	for _, d := range batch {
		c.sent = append(c.sent, slices.Clone(d.Data))
	}
}

// last keeps a copy of the last datagram it receives.
type last struct {
	data []byte
	ecn  link.ECN
}

func (l *last) Receive(d *link.Datagram, _ clock.Time) { l.data, l.ecn = slices.Clone(d.Data), d.ECN }

func build(t *testing.T, typ proto.Type, records, payload int, set func(*proto.Packet)) []byte {
	t.Helper()
	var pkt proto.Packet
	if err := proto.Build(&pkt, make([]byte, proto.MaxPacketLen), typ, records, payload); err != nil {
		t.Fatal(err)
	}
	pkt.Common.SetDstConnID(7)
	switch typ {
	case proto.TypeWrite:
		pkt.Write().SetMsgLen(uint32(payload))
	case proto.TypeSend:
		pkt.Send().SetMsgLen(uint32(payload))
	}
	if set != nil {
		set(&pkt)
	}
	return slices.Clone(pkt.Seal())
}

func decode(t *testing.T, b []byte) *proto.Packet {
	t.Helper()
	var pkt proto.Packet
	if err := pkt.Decode(b); err != nil {
		t.Fatalf("a packet the port let through does not decode: %v", err)
	}
	return &pkt
}

// An empty set passes every packet through unchanged, both ways.
func TestEmptySetChangesNothing(t *testing.T) {
	in := &capture{}
	p := Wrap(in, Set{})
	ack := build(t, proto.TypeAck, 1, 0, func(pkt *proto.Packet) { pkt.AckRecord(0).MarkReceived(0) })
	nack := build(t, proto.TypeNack, 0, 0, func(pkt *proto.Packet) { pkt.Nack().SetCode(proto.NackBadKey) })
	p.Send([]link.Datagram{{Data: slices.Clone(ack)}, {Data: slices.Clone(nack)}})
	if len(in.sent) != 2 || !bytes.Equal(in.sent[0], ack) || !bytes.Equal(in.sent[1], nack) {
		t.Fatal("an empty set changed what was sent")
	}
	got := &last{}
	corrupt := build(t, proto.TypeWrite, 0, 16, nil)
	corrupt[len(corrupt)-8] ^= 1
	p.Attach(got).Receive(&link.Datagram{Data: slices.Clone(corrupt), ECN: link.CE}, 0)
	if !bytes.Equal(got.data, corrupt) || got.ecn != link.CE {
		t.Fatal("an empty set changed what was received")
	}
}

// Each bug of the sending side rewrites exactly what it names.
func TestSendingBugs(t *testing.T) {
	in := &capture{}
	p := Wrap(in, Set{IgnoreSACKBit: true, SkipKeyCheck: true, ReusePSN: true})
	ack := build(t, proto.TypeAck, 2, 0, func(pkt *proto.Packet) {
		pkt.AckRecord(0).MarkReceived(0)
		pkt.AckRecord(0).MarkReceived(3)
		pkt.AckRecord(1).MarkReceived(0)
	})
	badKey := build(t, proto.TypeNack, 0, 0, func(pkt *proto.Packet) { pkt.Nack().SetCode(proto.NackBadKey) })
	bounds := build(t, proto.TypeNack, 0, 0, func(pkt *proto.Packet) { pkt.Nack().SetCode(proto.NackBounds) })
	p.Send([]link.Datagram{{Data: ack}, {Data: badKey}, {Data: bounds}})
	if len(in.sent) != 2 {
		t.Fatalf("%d datagrams sent, want the ACK and the BOUNDS NACK", len(in.sent))
	}
	got := decode(t, in.sent[0])
	if got.AckRecord(0).Received(0) || !got.AckRecord(0).Received(3) || got.AckRecord(1).Received(0) {
		t.Fatal("IgnoreSACKBit: bit 0 still reported, or another bit lost")
	}
	if decode(t, in.sent[1]).Nack().Code() != proto.NackBounds {
		t.Fatal("SkipKeyCheck suppressed the wrong NACK")
	}

	in.sent = nil
	for i := 0; i < 130; i++ {
		psn := uint32(1000 + i)
		flags := proto.Flags(0)
		if i == 127 {
			flags = proto.FlagRetransmit // a resend is never the one reused
		}
		p.Send([]link.Datagram{{Data: build(t, proto.TypeWrite, 0, 8, func(pkt *proto.Packet) {
			pkt.Common.SetPSN(psn)
			pkt.Common.SetFlags(flags)
		})}})
	}
	for i, b := range in.sent {
		want := uint32(1000 + i)
		if i == 63 {
			want-- // the 64th reuses the PSN before it
		}
		if got := decode(t, b).Common.PSN(); got != want {
			t.Fatalf("ReusePSN: packet %d went out with PSN %d, want %d", i, got, want)
		}
	}
}

// Each bug of the receiving side rewrites exactly what it names.
func TestReceivingBugs(t *testing.T) {
	p := Wrap(&capture{}, Set{AcceptBadCRC: true, IgnoreRetryAfter: true, IgnoreCE: true, MiscountCE: true})
	got := &last{}
	rx := p.Attach(got)

	corrupt := build(t, proto.TypeWrite, 0, 16, nil)
	corrupt[len(corrupt)-8] ^= 1
	rx.Receive(&link.Datagram{Data: corrupt}, 0)
	if !bytes.Equal(got.data[:len(got.data)-4], corrupt[:len(corrupt)-4]) || decode(t, got.data) == nil {
		t.Fatal("AcceptBadCRC: the corrupt packet was not passed on as valid")
	}

	rnr := build(t, proto.TypeNack, 0, 0, func(pkt *proto.Packet) {
		pkt.Nack().SetCode(proto.NackRNR)
		pkt.Nack().SetRetryAfter(500)
	})
	rx.Receive(&link.Datagram{Data: rnr}, 0)
	if n := decode(t, got.data).Nack(); n.RetryAfter() != 0 {
		t.Fatalf("IgnoreRetryAfter: RetryAfter %d reached the engine", n.RetryAfter())
	}

	for i, ce := range []uint32{3, 9, 12} {
		rx.Receive(&link.Datagram{Data: build(t, proto.TypeAck, 1, 0, func(pkt *proto.Packet) {
			pkt.AckRecord(0).SetPathID(2)
			pkt.AckRecord(0).SetCECount(ce)
		})}, 0)
		if c := decode(t, got.data).AckRecord(0).CECount(); c != 3 {
			t.Fatalf("IgnoreCE: ACK %d carried CECount %d to the engine, want the first, 3", i, c)
		}
	}

	for psn := uint32(0); psn < 34; psn++ {
		rx.Receive(&link.Datagram{ECN: link.CE, Data: build(t, proto.TypeSend, 0, 8, func(pkt *proto.Packet) {
			pkt.Common.SetPSN(psn)
		})}, 0)
		if hidden := psn%16 == 0; (got.ecn == link.CE) == hidden {
			t.Fatalf("MiscountCE: PSN %d arrived marked %v", psn, got.ecn)
		}
	}
	if p.MiscountedCE() != 3 {
		t.Fatalf("MiscountCE hid %d marks, want 3 (PSNs 0, 16, 32)", p.MiscountedCE())
	}
}

// A TooBig report reaches a receiver that takes them.
func TestAttachKeepsTooBig(t *testing.T) {
	tb := &tooBig{}
	if h, ok := Wrap(&capture{}, Set{ReusePSN: true}).Attach(tb).(link.TooBigHandler); !ok {
		t.Fatal("the receiving side hides TooBig")
	} else {
		h.TooBig(&link.Datagram{})
	}
	if tb.n != 1 {
		t.Fatal("TooBig did not reach the receiver")
	}
}

type tooBig struct {
	last
	n int
}

func (t *tooBig) TooBig(*link.Datagram) { t.n++ }

// ForRole reads MROCE_BREAK's format. Entries for the other role are
// checked but left out, and unknown bugs and roles are refused.
func TestForRole(t *testing.T) {
	s, err := ForRole("responder:accept-bad-crc, requester:ignore-ce,responder:reuse-psn", "responder")
	if err != nil || s != (Set{AcceptBadCRC: true, ReusePSN: true}) {
		t.Fatalf("got %+v, %v", s, err)
	}
	for _, bad := range []string{"responder:no-such-bug", "sender:ignore-ce", "ignore-ce"} {
		if _, err := ForRole(bad, "responder"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if s, err := ForRole("", "requester"); err != nil || !s.Empty() {
		t.Fatalf("an empty list: %+v, %v", s, err)
	}
}
