package engine

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// lossyDuplicating is a fabric of hosts whose links lose, duplicate and
// reorder datagrams both ways.
func lossyDuplicating(hosts int, seed uint64) netem.Config {
	fc := netem.Config{Seed: seed, Hosts: hosts, Planes: 4, Uplink: link100(), Downlink: link100()}
	for _, l := range []*netem.LinkConfig{&fc.Uplink, &fc.Downlink} {
		l.Impair.Loss = &netem.RandomLoss{P: 0.05}
		l.Impair.Duplicate = 0.05
		l.Impair.Reorder, l.Impair.ReorderGap = 0.05, 20*time.Microsecond
	}
	return fc
}

// TestAtomicsExecutedOnce checks that atomics from two requesters, over
// links that lose, duplicate and reorder requests, responses and ACKs,
// each execute exactly once (spec section 6.5): the responder's counter
// ends at the number of FETCH_ADDs and their results are every value
// below it once; of the CMP_SWAPs on one word exactly one finds it 0, and
// the word holds that one's value.
func TestAtomicsExecutedOnce(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			const each = 150 // operations of each kind per requester
			n := newNet(t, lossyDuplicating(3, seed), Config{Paths: 8, Streams: 4, MaxReadsOut: 32, MaxReadsIn: 32})
			pairs := []*pair{n.connect(1, 0), n.connect(2, 0)}
			target := pairs[0].hb.region(t, 16, 0, memreg.LocalWrite|memreg.RemoteAtomic)
			type result struct {
				local *memreg.Region
				swap  bool
			}
			var results []result
			for k, pr := range pairs {
				local := pr.ha.region(t, 2*each*8, 0, memreg.LocalWrite)
				for i := range 2 * each {
					wr := SendWR{ID: uint64(i), Stream: uint16(i % 4), Local: SGE{local, uint64(8 * i), 8}, RKey: target.Key()}
					if i%2 == 0 {
						wr.Op, wr.Add = OpFetchAdd, 1
					} else {
						wr.Op, wr.RemoteOffset, wr.Swap = OpCmpSwap, 8, uint64(k)<<32|uint64(i)
					}
					if err := pr.a.Post(wr); err != nil {
						t.Fatal(err)
					}
				}
				results = append(results, result{local: local})
			}
			if !n.run(10*time.Second, func() bool { return len(pairs[0].ra.done)+len(pairs[1].ra.done) == 4*each }) {
				t.Fatalf("%d of %d atomics completed", len(pairs[0].ra.done)+len(pairs[1].ra.done), 4*each)
			}
			var fetched []uint64
			winners := 0
			var won uint64
			for k, pr := range pairs {
				for _, wc := range pr.ra.done {
					if wc.Status != StatusOK || wc.Bytes != 8 {
						t.Fatalf("completion %+v", wc)
					}
				}
				b := results[k].local.Bytes()
				for i := range 2 * each {
					v := binary.BigEndian.Uint64(b[8*i:])
					if i%2 == 0 {
						fetched = append(fetched, v)
					} else if v == 0 {
						winners++
						won = uint64(k)<<32 | uint64(i)
					}
				}
			}
			slices.Sort(fetched)
			for i, v := range fetched {
				if v != uint64(i) {
					t.Fatalf("FETCH_ADD results: %d at rank %d, want every value below %d once", v, i, len(fetched))
				}
			}
			if got := binary.BigEndian.Uint64(target.Bytes()); got != 2*each {
				t.Fatalf("counter %d after %d FETCH_ADDs of 1", got, 2*each)
			}
			if got := binary.BigEndian.Uint64(target.Bytes()[8:]); winners != 1 || got != won {
				t.Fatalf("%d CMP_SWAPs found 0; the word holds %#x, the winner wrote %#x", winners, got, won)
			}
			var executed, dups, resent uint64
			for _, pr := range pairs {
				executed += pr.b.ReceiverStats().Atomics
				dups += pr.b.ReceiverStats().Duplicates
				resent += pr.b.SenderStats().Retransmits
			}
			if executed != 4*each {
				t.Fatalf("%d executions of %d atomics", executed, 4*each)
			}
			t.Logf("%d executed, %d duplicates at the responders, %d resent by them", executed, dups, resent)
			if dups == 0 || resent == 0 {
				t.Fatalf("the fabric repeated no request (%d duplicates) or no response was resent (%d): the test shows nothing", dups, resent)
			}
		})
	}
}

// TestAtomicAfterWriteOnAStream checks that an atomic acts on the data of
// its stream's earlier WRITEs, resent under loss (spec section 6.5), and
// that its result lands big-endian as the target held it.
func TestAtomicAfterWriteOnAStream(t *testing.T) {
	n := newNet(t, lossyDuplicating(2, 4), Config{Paths: 8, Streams: 1})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 64<<10, 0, memreg.LocalWrite)
	binary.BigEndian.PutUint64(src.Bytes()[len(src.Bytes())-8:], 0x0102030405060708)
	local := pr.ha.region(t, 16, 0, memreg.LocalWrite)
	remote := pr.hb.region(t, 64<<10, 0, memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteAtomic)
	last := uint64(len(src.Bytes()) - 8)
	posts := []SendWR{
		{ID: 1, Op: OpWrite, Local: SGE{src, 0, 64 << 10}, RKey: remote.Key()},
		{ID: 2, Op: OpFetchAdd, Local: SGE{local, 0, 8}, RKey: remote.Key(), RemoteOffset: last, Add: 0xff},
		{ID: 3, Op: OpCmpSwap, Local: SGE{local, 8, 8}, RKey: remote.Key(), RemoteOffset: last, Compare: 0x0102030405060807, Swap: 9},
	}
	for _, wr := range posts {
		if err := pr.a.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 3 }) {
		t.Fatalf("%d of 3 completed", len(pr.ra.done))
	}
	for i, wc := range pr.ra.done {
		if wc.ID != uint64(i+1) || wc.Status != StatusOK || wc.Op != posts[i].Op {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if got := binary.BigEndian.Uint64(local.Bytes()); got != 0x0102030405060708 {
		t.Fatalf("FETCH_ADD fetched %#x: it did not see the WRITE before it", got)
	}
	if got := binary.BigEndian.Uint64(local.Bytes()[8:]); got != 0x0102030405060807 {
		t.Fatalf("CMP_SWAP fetched %#x, want the FETCH_ADD's sum", got)
	}
	if got := binary.BigEndian.Uint64(remote.Bytes()[last:]); got != 9 {
		t.Fatalf("target %#x after the CMP_SWAP, want 9", got)
	}
}

// TestAtomicRefusals checks each refusal of an atomic (spec section 9): a
// region without remote atomic access, a target not at a multiple of 8 or
// past the region, and an atomic on a connection without ATOMICS.
func TestAtomicRefusals(t *testing.T) {
	cases := []struct {
		name   string
		access memreg.Access
		offset uint64
		code   proto.NackCode
		status Status
	}{
		{"access", memreg.LocalWrite | memreg.RemoteWrite, 0, proto.NackAccess, StatusRemoteAccess},
		{"unaligned", memreg.LocalWrite | memreg.RemoteAtomic, 4, proto.NackBounds, StatusRemoteAccess},
		{"beyond", memreg.LocalWrite | memreg.RemoteAtomic, 64, proto.NackBounds, StatusRemoteAccess},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNet(t, fourPlanes(), Config{Paths: 4, Streams: 1})
			pr := n.connect(0, 1)
			remote := pr.hb.region(t, 64, 0, c.access)
			local := pr.ha.region(t, 8, 0, memreg.LocalWrite)
			if err := pr.a.Post(SendWR{ID: 1, Op: OpFetchAdd, Local: SGE{local, 0, 8}, RKey: remote.Key(), RemoteOffset: c.offset, Add: 1}); err != nil {
				t.Fatal(err)
			}
			n.run(time.Second, func() bool { return len(pr.ra.done) == 1 })
			if len(pr.ra.done) != 1 || pr.ra.done[0].Status != c.status {
				t.Fatalf("completions %+v, want one with status %v", pr.ra.done, c.status)
			}
			if got := pr.b.ReceiverStats().Nacks[c.code]; got == 0 || pr.b.ReceiverStats().Atomics != 0 {
				t.Fatalf("%d NACKs %v, %d executed; want at least 1 and 0", got, c.code, pr.b.ReceiverStats().Atomics)
			}
			if !slices.Equal(remote.Bytes(), make([]byte, 64)) {
				t.Fatal("a refused atomic changed the region")
			}
		})
	}
	t.Run("not negotiated", func(t *testing.T) {
		n := newNet(t, fourPlanes(), Config{Paths: 4, Streams: 1})
		n.hosts[1].ep.cfg.NoAtomics = true
		pr := n.connect(0, 1)
		remote := pr.hb.region(t, 64, 0, memreg.LocalWrite|memreg.RemoteAtomic)
		local := pr.ha.region(t, 8, 0, memreg.LocalWrite)
		wr := SendWR{ID: 1, Op: OpFetchAdd, Local: SGE{local, 0, 8}, RKey: remote.Key(), Add: 1}
		if pr.a.Atomics() || pr.b.Atomics() {
			t.Fatal("ATOMICS negotiated with a side that did not offer it")
		}
		if err := pr.a.Post(wr); err == nil {
			t.Fatal("an atomic posted on a connection without ATOMICS")
		}
		// A peer that sends one anyway is refused.
		pr.a.atomics = true
		if err := pr.a.Post(wr); err != nil {
			t.Fatal(err)
		}
		n.run(time.Second, func() bool { return len(pr.ra.done) == 1 })
		if len(pr.ra.done) != 1 || pr.ra.done[0].Status != StatusRemoteInvalid || pr.b.ReceiverStats().Nacks[proto.NackUnsupported] == 0 {
			t.Fatalf("completions %+v, %d UNSUPPORTED; want remote invalid and at least 1", pr.ra.done, pr.b.ReceiverStats().Nacks[proto.NackUnsupported])
		}
	})
	t.Run("local buffer", func(t *testing.T) {
		n := newNet(t, fourPlanes(), Config{Paths: 4, Streams: 1})
		pr := n.connect(0, 1)
		local := pr.ha.region(t, 16, 0, memreg.LocalWrite)
		if err := pr.a.Post(SendWR{Op: OpFetchAdd, Local: SGE{local, 0, 16}}); err == nil {
			t.Fatal("an atomic posted with a 16-byte result buffer")
		}
	})
}

// TestResponseTagsKeepTheirKind checks that a READ_RESP naming an
// atomic's tag, and an ATOMIC_RESP naming a READ's, are refused with
// BAD_TAG (spec section 6.5): neither places anything.
func TestResponseTagsKeepTheirKind(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 4, Streams: 1})
	pr := n.connect(0, 1)
	remote := pr.hb.region(t, 64, 0, memreg.LocalWrite|memreg.RemoteAtomic|memreg.RemoteRead)
	local := pr.ha.region(t, 16, 0, memreg.LocalWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpFetchAdd, Local: SGE{local, 0, 8}, RKey: remote.Key(), Add: 1})
	pr.a.Post(SendWR{ID: 2, Op: OpRead, Local: SGE{local, 8, 8}, RKey: remote.Key()})
	s := &pr.a.snd
	var atomicTag, readTag uint32
	for tag, m := range s.reads {
		if m.typ.IsAtomic() {
			atomicTag = tag
		} else {
			readTag = tag
		}
	}
	if code := s.onReadData(atomicTag, 0, 8, []byte{1, 2, 3, 4, 5, 6, 7, 8}); code != proto.NackBadTag {
		t.Errorf("READ_RESP naming an atomic: %v, want BAD_TAG", code)
	}
	if code := s.onAtomicData(readTag, 7); code != proto.NackBadTag {
		t.Errorf("ATOMIC_RESP naming a READ: %v, want BAD_TAG", code)
	}
	if code := s.onAtomicData(readTag+atomicTag+100, 7); code != proto.NackBadTag {
		t.Errorf("ATOMIC_RESP naming no request: %v, want BAD_TAG", code)
	}
	if !slices.Equal(local.Bytes(), make([]byte, 16)) {
		t.Fatal("a refused response placed bytes")
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 2 }) {
		t.Fatal("the two requests did not complete after the forged responses")
	}
}

// TestAtomicsExecutedOnceInBaseline checks the same in the baseline mode,
// whose go-back-N resends a request under its PSN and DSN (spec section
// 10): a resend is a duplicate, never executed again.
func TestAtomicsExecutedOnceInBaseline(t *testing.T) {
	const count = 100
	n := newNet(t, lossyDuplicating(2, 5), Config{Mode: proto.ModeBaseline, Streams: 2, MaxReadsOut: 8, MaxReadsIn: 8})
	pr := n.connect(0, 1)
	if !pr.a.Atomics() {
		t.Fatal("no ATOMICS in the baseline mode")
	}
	target := pr.hb.region(t, 8, 0, memreg.LocalWrite|memreg.RemoteAtomic)
	local := pr.ha.region(t, 8*count, 0, memreg.LocalWrite)
	for i := range count {
		if err := pr.a.Post(SendWR{ID: uint64(i), Op: OpFetchAdd, Stream: uint16(i % 2), Local: SGE{local, uint64(8 * i), 8}, RKey: target.Key(), Add: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if !n.run(10*time.Second, func() bool { return len(pr.ra.done) == count }) {
		t.Fatalf("%d of %d completed", len(pr.ra.done), count)
	}
	var fetched []uint64
	for i := range count {
		fetched = append(fetched, binary.BigEndian.Uint64(local.Bytes()[8*i:]))
	}
	slices.Sort(fetched)
	for i, v := range fetched {
		if v != uint64(i) {
			t.Fatalf("results %v: not every value below %d once", fetched, count)
		}
	}
	if got := binary.BigEndian.Uint64(target.Bytes()); got != count || pr.b.ReceiverStats().Atomics != count {
		t.Fatalf("counter %d, %d executions; want %d", got, pr.b.ReceiverStats().Atomics, count)
	}
	if pr.b.ReceiverStats().Duplicates == 0 {
		t.Fatal("no request arrived twice: the test shows nothing")
	}
}

// TestAtomicNotRunAfterItsConnectionFailed checks that an atomic waiting
// behind a READ is not executed once serving that READ has ended the
// connection (its region was deregistered): what follows a failure on a
// stream is not served.
func TestAtomicNotRunAfterItsConnectionFailed(t *testing.T) {
	p := newProber(t, Config{})
	w := p.pr.hb.region(t, 128, 0, memreg.LocalWrite|memreg.RemoteWrite)
	rd := p.pr.hb.region(t, 64, 0, memreg.LocalWrite|memreg.RemoteRead)
	target := p.pr.hb.region(t, 8, 0, memreg.LocalWrite|memreg.RemoteAtomic)
	half := make([]byte, 64)
	p.data(proto.TypeWrite, half, func(pkt *proto.Packet) { writeTo(w, 0, 128)(pkt); pkt.Write().SetMSN(0) })
	p.data(proto.TypeReadReq, nil, func(pkt *proto.Packet) {
		r := pkt.ReadReq()
		r.SetMSN(1)
		r.SetRKey(rd.Key())
		r.SetMsgLen(64)
		r.SetReadTag(7)
	})
	p.data(proto.TypeFetchAdd, nil, func(pkt *proto.Packet) {
		a := pkt.Atomic()
		a.SetMSN(2)
		a.SetRKey(target.Key())
		a.SetOperand(5)
		a.SetAtomicTag(8)
	})
	rd.Deregister()
	p.data(proto.TypeWrite, half, func(pkt *proto.Packet) { // the WRITE's rest: the READ's turn, then the atomic's
		writeTo(w, 0, 128)(pkt)
		pkt.Write().SetMSN(0)
		pkt.Write().SetMsgOffset(64)
	})
	if p.pr.b.State() != Closed {
		t.Fatal("a READ of a deregistered region did not end the connection")
	}
	if got := binary.BigEndian.Uint64(target.Bytes()); got != 0 || p.pr.b.ReceiverStats().Atomics != 0 {
		t.Fatalf("the atomic ran after its connection failed: target %d, %d executed", got, p.pr.b.ReceiverStats().Atomics)
	}
}

// TestAnswerToARequestNotSentIsRefused checks that an ATOMIC_RESP or
// READ_RESP for a request posted but not yet sent, held by the READ limit,
// is refused with BAD_TAG and frees no slot it never took.
func TestAnswerToARequestNotSentIsRefused(t *testing.T) {
	p := newProber(t, Config{MaxReadsOut: 1, MaxReadsIn: 1})
	target := p.pr.hb.region(t, 16, 0, memreg.LocalWrite|memreg.RemoteAtomic|memreg.RemoteRead)
	local := p.pr.ha.region(t, 24, 0, memreg.LocalWrite)
	a := p.pr.a
	for i, op := range []Opcode{OpFetchAdd, OpFetchAdd, OpRead} {
		if err := a.Post(SendWR{ID: uint64(i), Op: op, Local: SGE{local, uint64(8 * i), 8}, RKey: target.Key(), Add: 1}); err != nil {
			t.Fatal(err)
		}
	}
	active := a.snd.readsActive
	if code := a.snd.onAtomicData(a.snd.nextTag-2, 42); code != proto.NackBadTag {
		t.Errorf("an answer to an atomic not sent: %v, want BAD_TAG", code)
	}
	if code := a.snd.onReadData(a.snd.nextTag-1, 0, 8, make([]byte, 8)); code != proto.NackBadTag {
		t.Errorf("an answer to a READ not sent: %v, want BAD_TAG", code)
	}
	if a.snd.readsActive != active {
		t.Fatalf("READs and atomics active %d, was %d", a.snd.readsActive, active)
	}
}
