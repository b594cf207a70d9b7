package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// ackLoss WRITEs 16 MiB over 64 paths on four planes, each path a packet
// or two in flight. It loses the n-th data packet where dropData(n), and
// the n-th ACK of the receiver where dropAck(n); either may be nil, for
// none. It returns the sender's counters, the data packets lost, and the
// records the receiver's ACKs carried.
func ackLoss(t *testing.T, dropData, dropAck func(n int) bool) (st SenderStats, lost, records int) {
	t.Helper()
	n := newNet(t, fourPlanes(), Config{Paths: 64, InboundCapacity: 45e9})
	pr := n.connect(0, 1)
	data, acks := 0, 0
	n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: func(d *link.Datagram) bool {
		if !proto.Type(d.Data[1]).IsData() {
			return false
		}
		data++
		if dropData != nil && dropData(data) {
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
		return dropAck != nil && dropAck(acks)
	}}
	n.writeWhole(t, pr, 16<<20)
	return pr.a.SenderStats(), lost, records
}

// every returns a drop function for ackLoss that loses every k-th packet.
func every(k int) func(int) bool { return func(n int) bool { return n%k == 0 } }

// randomly returns a drop function for ackLoss that loses a packet with
// probability p, drawn from seed.
func randomly(p float64, seed uint64) func(int) bool {
	rng := rand.New(rand.NewPCG(seed, 1))
	return func(int) bool { return rng.Float64() < p }
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
		st, lost, records := ackLoss(t, every(100), every(3))
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
	st, _, with := ackLoss(t, nil, nil)
	ackRecordRepeats = 0
	_, _, without := ackLoss(t, nil, nil)
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

// TestRecordsRepeatMoreUnderHeavyLoss checks that a receiver that sees
// about a third of the PSNs skipped repeats each record in up to three
// later ACKs, where one that sees 1% lost repeats it in one: with 36% of
// the data and of the ACKs lost at random, as 20% on each of two links,
// fewer paths are left to timeouts, which resend what arrived.
func TestRecordsRepeatMoreUnderHeavyLoss(t *testing.T) {
	defer func() { maxRecordEchoes = 3 }()
	for seed := uint64(1); seed <= 2; seed++ {
		var needless, timeouts, records [2]int
		for i, most := range []uint8{3, 1} {
			maxRecordEchoes = most
			st, lost, recs := ackLoss(t, randomly(0.36, seed), randomly(0.36, seed+100))
			needless[i], timeouts[i], records[i] = int(st.Retransmits)-lost, int(st.Timeouts), recs
			t.Logf("seed %d, at most %d repeats: %d data packets lost, 36%% of the ACKs; %d records; %d resent, %d tail probes, %d timeouts",
				seed, most, lost, recs, st.Retransmits, st.TailProbes, st.Timeouts)
		}
		if records[0] < records[1]*3/2 || needless[0] >= needless[1] || timeouts[0] >= timeouts[1] {
			t.Errorf("seed %d: with up to 3 repeats %d records, %d resent beyond the losses and %d timeouts; with one %d, %d and %d",
				seed, records[0], needless[0], timeouts[0], records[1], needless[1], timeouts[1])
		}
	}
	var records [2]int
	for i, most := range []uint8{3, 1} {
		maxRecordEchoes = most
		_, _, records[i] = ackLoss(t, every(100), every(3))
	}
	if records[0] != records[1] {
		t.Errorf("1%% of the data lost: %d records with up to 3 repeats, %d with one; want the same", records[0], records[1])
	}
}
