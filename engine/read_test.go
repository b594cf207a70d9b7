package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TestRead checks that READs of 0 B to 1 MiB land byte for byte in the
// requester's buffer.
func TestRead(t *testing.T) {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.02}
	n := newNet(t, fc, Config{Paths: 8, Streams: 2})
	pr := n.connect(0, 1)
	for i, size := range []int{0, 1, 5000, 1 << 20} {
		remote := pr.hb.region(t, max(size, 1), uint64(50+i), memreg.RemoteRead)
		local := pr.ha.region(t, max(size, 1), 0, memreg.LocalWrite)
		pr.ra.done = nil
		if err := pr.a.Post(SendWR{ID: uint64(i), Op: OpRead, Stream: uint16(i % 2), Local: SGE{local, 0, uint32(size)}, RKey: remote.Key()}); err != nil {
			t.Fatal(err)
		}
		if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
			t.Fatalf("READ of %d bytes did not complete: %+v", size, pr.a.SenderStats())
		}
		if wc := pr.ra.done[0]; wc.Status != StatusOK || wc.Op != OpRead || wc.Bytes != uint32(size) {
			t.Fatalf("completion %+v", wc)
		}
		if !bytes.Equal(local.Bytes()[:size], remote.Bytes()[:size]) {
			t.Fatalf("READ of %d bytes: data differs", size)
		}
	}
}

// TestReadAfterWriteOnAStream checks that a READ after a WRITE on the same
// stream returns the written data, even when the WRITE's packets are
// delayed and resent. The responder waits for the stream's earlier messages
// (spec section 6.5).
func TestReadAfterWriteOnAStream(t *testing.T) {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.05}
	n := newNet(t, fc, Config{Paths: 8, Streams: 1})
	pr := n.connect(0, 1)
	const size = 256 << 10
	data := pr.ha.region(t, size, 7, memreg.LocalWrite)
	back := pr.ha.region(t, size, 0, memreg.LocalWrite)
	remote := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteRead)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{data, 0, size}, RKey: remote.Key()})
	pr.a.Post(SendWR{ID: 2, Op: OpRead, Local: SGE{back, 0, size}, RKey: remote.Key()})
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 2 }) {
		t.Fatal("not complete")
	}
	if pr.ra.done[0].ID != 1 || pr.ra.done[1].ID != 2 {
		t.Fatalf("completions out of order: %+v", pr.ra.done)
	}
	if !bytes.Equal(back.Bytes(), data.Bytes()) {
		t.Fatal("the READ did not see the WRITE before it")
	}
}

// TestReadLimitNegotiatedAndKept checks that the READ limit is negotiated,
// as the smaller of the requester's MaxReadsOut and the responder's
// MaxReadsIn, and kept. Many READs complete, and none is refused.
func TestReadLimitNegotiatedAndKept(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 4, Streams: 4, MaxReadsOut: 8, MaxReadsIn: 2})
	pr := n.connect(0, 1)
	if pr.a.readsOut != 2 {
		t.Fatalf("negotiated READ limit %d, want 2", pr.a.readsOut)
	}
	remote := pr.hb.region(t, 64<<10, 9, memreg.RemoteRead)
	local := pr.ha.region(t, 20*(64<<10), 0, memreg.LocalWrite)
	maxActive := 0
	for i := 0; i < 20; i++ {
		pr.a.Post(SendWR{ID: uint64(i), Op: OpRead, Stream: uint16(i % 4), Local: SGE{local, uint64(i * (64 << 10)), 64 << 10}, RKey: remote.Key()})
	}
	n.run(time.Second, func() bool {
		maxActive = max(maxActive, pr.a.snd.readsActive, pr.b.rcv.readsIn)
		return len(pr.ra.done) == 20
	})
	if len(pr.ra.done) != 20 || maxActive > 2 || pr.b.ReceiverStats().Nacks[proto.NackReadLimit] != 0 {
		t.Fatalf("%d done, at most %d active, %d refused", len(pr.ra.done), maxActive, pr.b.ReceiverStats().Nacks[proto.NackReadLimit])
	}
	for i := 0; i < 20; i++ {
		if !bytes.Equal(local.Bytes()[i*(64<<10):(i+1)*(64<<10)], remote.Bytes()) {
			t.Fatalf("READ %d: data differs", i)
		}
	}
}

// TestMixedOperationsUnderLoss mixes READ, WRITE, WRITE_IMM and SEND on
// many streams under loss. Every completion comes, in posting order per
// stream on the send side and in message order per stream on the receive
// side, and every byte is right.
func TestMixedOperationsUnderLoss(t *testing.T) {
	for _, loss := range []float64{0, 0.01, 0.05, 0.10} {
		t.Run(fmt.Sprintf("loss %g", loss), func(t *testing.T) {
			fc := fourPlanes()
			if loss > 0 {
				fc.Downlink.Impair.Loss = &netem.RandomLoss{P: loss}
			}
			const streams, perStream = 8, 12
			n := newNet(t, fc, Config{Paths: 8, Streams: streams})
			pr := n.connect(0, 1)
			rng := rand.New(rand.NewPCG(uint64(loss*1000), 1))
			type check struct{ got, want *memreg.Region }
			var checks []check
			var want [streams][]uint64 // send completion order per stream
			var wantRecv [streams][]uint64
			id := uint64(0)
			for s := 0; s < streams; s++ {
				for k := 0; k < perStream; k++ {
					id++
					size := 1 + rng.IntN(40000)
					src := pr.ha.region(t, size, id, memreg.LocalWrite)
					wr := SendWR{ID: id, Stream: uint16(s), Local: SGE{src, 0, uint32(size)}}
					switch rng.IntN(4) {
					case 0:
						wr.Op = OpWrite
						dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
						wr.RKey = dst.Key()
						checks = append(checks, check{dst, src})
					case 1:
						wr.Op, wr.Imm = OpWriteImm, uint32(id)
						dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
						wr.RKey = dst.Key()
						checks = append(checks, check{dst, src})
						pr.b.PostRecv(RecvWR{ID: id, Stream: uint16(s), Local: SGE{dst, 0, 1}})
						wantRecv[s] = append(wantRecv[s], id)
					case 2:
						wr.Op = OpSend
						dst := pr.hb.region(t, size, 0, memreg.LocalWrite)
						checks = append(checks, check{dst, src})
						pr.b.PostRecv(RecvWR{ID: id, Stream: uint16(s), Local: SGE{dst, 0, uint32(size)}})
						wantRecv[s] = append(wantRecv[s], id)
					case 3:
						wr.Op = OpRead
						remote := pr.hb.region(t, size, id+1000, memreg.RemoteRead)
						local := pr.ha.region(t, size, 0, memreg.LocalWrite)
						wr.Local, wr.RKey = SGE{local, 0, uint32(size)}, remote.Key()
						checks = append(checks, check{local, remote})
					}
					want[s] = append(want[s], id)
					if err := pr.a.Post(wr); err != nil {
						t.Fatal(err)
					}
				}
			}
			total := streams * perStream
			recvs := 0
			for s := range wantRecv {
				recvs += len(wantRecv[s])
			}
			if !n.run(10*time.Second, func() bool { return len(pr.ra.done) == total && len(pr.rb.done) == recvs }) {
				t.Fatalf("%d of %d sends, %d of %d receives: %v %+v", len(pr.ra.done), total, len(pr.rb.done), recvs, pr.a.Err(), pr.a.SenderStats())
			}
			var got, gotRecv [streams][]uint64
			for _, wc := range pr.ra.done {
				if wc.Status != StatusOK {
					t.Fatalf("completion %+v", wc)
				}
				got[wc.Stream] = append(got[wc.Stream], wc.ID)
			}
			for _, wc := range pr.rb.done {
				if wc.Status != StatusOK || wc.HasImm && wc.Imm != uint32(wc.ID) {
					t.Fatalf("receive completion %+v", wc)
				}
				gotRecv[wc.Stream] = append(gotRecv[wc.Stream], wc.ID)
			}
			for s := 0; s < streams; s++ {
				if fmt.Sprint(got[s]) != fmt.Sprint(want[s]) || fmt.Sprint(gotRecv[s]) != fmt.Sprint(wantRecv[s]) {
					t.Fatalf("stream %d: sends %v want %v; receives %v want %v", s, got[s], want[s], gotRecv[s], wantRecv[s])
				}
			}
			for i, c := range checks {
				if !bytes.Equal(c.got.Bytes(), c.want.Bytes()) {
					t.Fatalf("check %d: data differs", i)
				}
			}
		})
	}
}
