package engine

import (
	"testing"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// ackLoss WRITEs 16 MiB over 64 paths on four planes, each path a packet
// or two in flight. If lossy, it loses every 100th data packet, and every
// third ACK of the receiver. It returns the sender's counters, the data
// packets lost, and the records the receiver's ACKs carried.
func ackLoss(t *testing.T, lossy bool) (st SenderStats, lost, records int) {
	t.Helper()
	n := newNet(t, fourPlanes(), Config{Paths: 64, InboundCapacity: 45e9})
	pr := n.connect(0, 1)
	data, acks := 0, 0
	n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: func(d *link.Datagram) bool {
		if !proto.Type(d.Data[1]).IsData() {
			return false
		}
		data++
		if lossy && data%100 == 0 {
			lost++
			return true
		}
		return false
	}}
	n.hosts[1].ep.port = &portFilter{Port: n.fab.Host(1), drop: func(d *link.Datagram) bool {
		var p proto.Packet
		if p.Decode(d.Data) != nil || p.Type() != proto.TypeAck {
			return false
		}
		acks++
		records += int(p.Ack().RecordCount())
		return lossy && acks%3 == 0
	}}
	n.writeWhole(t, pr, 16<<20)
	return pr.a.SenderStats(), lost, records
}

// TestRepeatedRecordsCoverLostAcks checks that a receiver that sees
// packets lost repeats its ACK records, so that the next ACK reports the
// paths of one that was lost, and that one that sees none repeats nothing.
// Without repeats the paths of each lost ACK wait for their tail probes
// and timeouts, and those resend packets that arrived: a timeout, and a
// probe with no new data to carry.
func TestRepeatedRecordsCoverLostAcks(t *testing.T) {
	defer func() { ackRecordRepeats = 1 }()
	var needless [2]int
	for i, repeats := range []uint8{1, 0} {
		ackRecordRepeats = repeats
		st, lost, records := ackLoss(t, true)
		needless[i] = int(st.Retransmits) - lost
		t.Logf("repeats %d: %d data packets lost, a third of the ACKs; %d records; %d data packets sent, %d resent, %d tail probes, %d timeouts",
			repeats, lost, records, st.Packets, st.Retransmits, st.TailProbes, st.Timeouts)
	}
	if needless[1] < 10 {
		t.Fatalf("%d resent beyond the losses without repeats: the lost ACKs test nothing", needless[1])
	}
	if needless[0]*5 > needless[1] {
		t.Errorf("%d packets resent beyond the losses with repeated records against %d without: a repeat reports a lost ACK's paths",
			needless[0], needless[1])
	}
	ackRecordRepeats = 1
	st, _, with := ackLoss(t, false)
	ackRecordRepeats = 0
	_, _, without := ackLoss(t, false)
	if st.Retransmits != 0 || with != without {
		t.Errorf("no loss: %d resent, and %d records with repeats against %d without; want none resent and the same records", st.Retransmits, with, without)
	}
}

// TestRepeatsEndWithTheirSpell checks the receiver's queue of records to
// repeat: each record reported during a spell after a loss goes once more,
// in the order reported, none is queued outside a spell, and what is still
// queued when the spell ends is dropped.
func TestRepeatsEndWithTheirSpell(t *testing.T) {
	r := &receiver{paths: make([]recvPath, 8)}
	r.reported(1)
	if len(r.echoing) != 0 {
		t.Fatalf("%v queued before any loss", r.echoing)
	}
	r.sawLoss()
	r.reported(3)
	r.reported(4)
	if n := r.pickRepeats(1); n != 1 || r.repeats[0] != 3 {
		t.Fatalf("picked %v with room for one, want [3]", r.repeats[:n])
	}
	if n := r.pickRepeats(8); n != 1 || r.repeats[0] != 4 {
		t.Fatalf("picked %v next, want [4]", r.repeats[:n])
	}
	if n := r.pickRepeats(8); n != 0 {
		t.Fatalf("picked %v after each went once", r.repeats[:n])
	}
	r.reported(5)
	r.endRepeats()
	if n := r.pickRepeats(8); n != 0 || r.paths[5].echoes != 0 {
		t.Fatalf("picked %v after the spell ended", r.repeats[:n])
	}
}
