package engine

import (
	"testing"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

// A message completes only when every byte of it has been placed. A peer
// that sends the first half of a SEND twice, under two DSNs, does not make
// it complete with the second half never written; the second copy is
// dropped and counted, and the message completes once the second half
// arrives (spec section 6.5). With RECUT the second copy is covered, and
// recorded rather than dropped, but placed no more, as is a copy after
// the message completed; a packet that places some bytes twice and some
// not is dropped either way.
func TestReceiveCompletesOnlyWhenEveryByteIsPlaced(t *testing.T) {
	for _, recut := range []bool{false, true} {
		p := newProber(t, Config{NoRecut: !recut})
		dst := p.pr.hb.region(t, 64, 0, memreg.LocalWrite)
		if err := p.pr.b.PostRecv(RecvWR{ID: 7, Stream: 0, Local: SGE{dst, 0, 64}}); err != nil {
			t.Fatal(err)
		}
		part := func(off, n uint32, fill byte) {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = fill
			}
			p.data(proto.TypeSend, payload, func(pkt *proto.Packet) {
				s := pkt.Send()
				s.SetMsgLen(64)
				s.SetMsgOffset(off)
			})
		}
		part(0, 32, 1)
		part(0, 32, 2) // the same bytes again, under another DSN
		part(16, 32, 4)
		if len(p.pr.rb.done) != 0 {
			t.Fatalf("RECUT %v: the SEND completed with half its bytes placed: %+v", recut, p.pr.rb.done)
		}
		want := ReceiverStats{Overlaps: 2}
		if recut {
			want = ReceiverStats{Overlaps: 1, Covered: 1}
		}
		if st := p.pr.b.ReceiverStats(); st.Overlaps != want.Overlaps || st.Covered != want.Covered {
			t.Fatalf("RECUT %v: %d overlapping and %d covered, want %d and %d", recut, st.Overlaps, st.Covered, want.Overlaps, want.Covered)
		}
		part(32, 32, 3)
		if len(p.pr.rb.done) != 1 || p.pr.rb.done[0].Bytes != 64 {
			t.Fatalf("RECUT %v: after the second half: completions %+v", recut, p.pr.rb.done)
		}
		// A copy once the message has completed.
		part(0, 32, 5)
		st := p.pr.b.ReceiverStats()
		if recut && st.Covered != 2 || !recut && st.Inconsistent != 1 {
			t.Fatalf("RECUT %v: a copy after completion: %d covered, %d inconsistent", recut, st.Covered, st.Inconsistent)
		}
		b := dst.Bytes()
		if b[0] != 1 || b[31] != 1 || b[32] != 3 {
			t.Fatalf("RECUT %v: placed %v: an overlapping copy was written", recut, b)
		}
	}
}

// A READ_REQ sent under two DSNs, while it waits behind an earlier
// message of its stream, takes one READ slot of the responder and is
// answered once.
func TestDuplicateReadRequestIsServedOnce(t *testing.T) {
	p := newProber(t, Config{})
	src := p.pr.hb.region(t, 64, 9, memreg.LocalWrite|memreg.RemoteRead|memreg.RemoteWrite)
	write := func(off uint32) {
		p.data(proto.TypeWrite, make([]byte, 32), func(pkt *proto.Packet) {
			writeTo(src, 0, 64)(pkt)
			pkt.Write().SetMsgOffset(off)
		})
	}
	read := func(pkt *proto.Packet) {
		rq := pkt.ReadReq()
		rq.SetMSN(1)
		rq.SetRKey(src.Key())
		rq.SetMsgLen(64)
		rq.SetReadTag(5)
	}
	write(0) // MSN 0, half placed: the READ waits for it
	p.data(proto.TypeReadReq, nil, read)
	p.data(proto.TypeReadReq, nil, read)
	b := &p.pr.b.rcv
	if b.readsIn != 1 || b.stats.Inconsistent != 1 {
		t.Fatalf("READs outstanding %d, duplicates dropped %d; want 1 and 1", b.readsIn, b.stats.Inconsistent)
	}
	write(32)
	p.n.run(1e6, func() bool { return false })
	responses := 0
	for i := range p.tap.sent {
		if p.tap.sent[i].Type() == proto.TypeReadResp && p.tap.sent[i].Common.Flags()&proto.FlagRetransmit == 0 {
			responses++
		}
	}
	if responses != 1 || b.readsIn != 0 {
		t.Fatalf("%d READ responses first sent, %d READs still outstanding; want 1 and 0", responses, b.readsIn)
	}
}
