package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// mixedRun is what a run of placeholderWorkload did. It holds everything an
// application or the fabric could see, and the regions data went to.
type mixedRun struct {
	transcript []string // completions with their times, then counters
	placed     [][]byte // the WRITE, SEND and READ destinations
	// Datagrams with a payload the fabric delivered, and of them those
	// whose payload was padding in a header buffer.
	data, padded int
}

// placeholderWorkload runs WRITEs, WRITEs with immediate, SENDs and READs
// of random sizes on 4 streams under 5% loss, with or without placeholder
// payloads.
func placeholderWorkload(t *testing.T, placeholders bool) mixedRun {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.05}
	n := newNet(t, fc, Config{Paths: 8, Streams: 4, PlaceholderPayloads: placeholders})
	pr := n.connect(0, 1)
	rng := rand.New(rand.NewPCG(7, 1))
	var run mixedRun
	n.fab.AddTap(func(e *netem.TapEvent) {
		d := e.Datagram
		if t := proto.Type(d.Data[1]); e.Verdict != netem.Delivered || !t.IsData() || t == proto.TypeReadReq {
			return
		}
		run.data++
		if d.Pad > 0 && cap(d.Data) == netem.HeaderBufferLen {
			run.padded++
		}
	})
	posted, recvs := 0, 0
	for id := uint64(1); id <= 48; id++ {
		size := 1 + rng.IntN(60000)
		src := pr.ha.region(t, size, id, memreg.LocalWrite)
		wr := SendWR{ID: id, Stream: uint16(id % 4), Local: SGE{src, 0, uint32(size)}}
		var dst *memreg.Region
		switch id % 4 {
		case 0:
			wr.Op = OpWrite
			dst = pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
			wr.RKey = dst.Key()
		case 1:
			wr.Op, wr.Imm = OpWriteImm, uint32(id)
			dst = pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
			wr.RKey = dst.Key()
			pr.b.PostRecv(RecvWR{ID: id, Stream: wr.Stream, Local: SGE{dst, 0, 1}})
			recvs++
		case 2:
			wr.Op = OpSend
			dst = pr.hb.region(t, size, 0, memreg.LocalWrite)
			pr.b.PostRecv(RecvWR{ID: id, Stream: wr.Stream, Local: SGE{dst, 0, uint32(size)}})
			recvs++
		case 3:
			wr.Op = OpRead
			remote := pr.hb.region(t, size, id+1000, memreg.RemoteRead)
			dst = pr.ha.region(t, size, 0, memreg.LocalWrite)
			wr.Local, wr.RKey = SGE{dst, 0, uint32(size)}, remote.Key()
		}
		if err := pr.a.Post(wr); err != nil {
			t.Fatal(err)
		}
		posted++
		run.placed = append(run.placed, dst.Bytes())
	}
	if !n.run(10*time.Second, func() bool { return len(pr.ra.done) == posted && len(pr.rb.done) == recvs }) {
		t.Fatalf("placeholders %v: %d of %d sends, %d of %d receives: %v", placeholders, len(pr.ra.done), posted, len(pr.rb.done), recvs, pr.a.Err())
	}
	for _, wc := range append(slices.Clone(pr.ra.done), pr.rb.done...) {
		run.transcript = append(run.transcript, fmt.Sprintf("%+v", wc))
	}
	var links []netem.LinkStats
	for _, l := range n.fab.Links() {
		links = append(links, l.Stats())
	}
	run.transcript = append(run.transcript,
		fmt.Sprintf("end %v", n.sim.Now()),
		fmt.Sprintf("sender %+v", pr.a.SenderStats()), fmt.Sprintf("receiver %+v", pr.b.ReceiverStats()),
		fmt.Sprintf("responder's sender %+v", pr.b.SenderStats()), fmt.Sprintf("requester's receiver %+v", pr.a.ReceiverStats()),
		fmt.Sprintf("links %+v", links))
	return run
}

// TestPlaceholderPayloadsDecideAlike checks that with placeholder payloads
// the engine makes every decision it makes with real ones, under loss. The
// completions come in the same order, the run ends at the same virtual
// time, and the counters match at both ends and on every link. Meanwhile no
// byte is placed anywhere, and data packets travel as headers with padding.
// With real payloads every destination holds its data.
func TestPlaceholderPayloadsDecideAlike(t *testing.T) {
	real, placeholder := placeholderWorkload(t, false), placeholderWorkload(t, true)
	if placeholder.data == 0 || placeholder.padded != placeholder.data || real.padded != 0 {
		t.Fatalf("padded data datagrams: %d of %d with placeholders, %d of %d with real payloads",
			placeholder.padded, placeholder.data, real.padded, real.data)
	}
	if len(real.transcript) != len(placeholder.transcript) {
		t.Fatalf("%d lines with real payloads, %d with placeholders", len(real.transcript), len(placeholder.transcript))
	}
	for i := range real.transcript {
		if real.transcript[i] != placeholder.transcript[i] {
			t.Fatalf("line %d:\n real:        %s\n placeholder: %s", i, real.transcript[i], placeholder.transcript[i])
		}
	}
	for i := range real.placed {
		if slices.Max(placeholder.placed[i]) != 0 {
			t.Fatalf("operation %d: placeholder payloads placed bytes", i+1)
		}
		if slices.Max(real.placed[i]) == 0 {
			t.Fatalf("operation %d: real payloads placed nothing", i+1)
		}
	}
}

// TestWritePlacedInOrderBeforeItsCompletion checks that a receiver's
// WriteObserver hears of every WRITE without immediate data once it is
// placed whole. It hears in the stream's order, under loss that reorders
// what arrives, and before the sender's completion. It hears of nothing
// else.
func TestWritePlacedInOrderBeforeItsCompletion(t *testing.T) {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.05}
	n := newNet(t, fc, Config{Paths: 8, Streams: 1})
	pr := n.connect(0, 1)
	var sizes, placed []uint32
	var completedWhenPlaced []int
	pr.rb.onPlaced = func(bytes uint32) {
		placed = append(placed, bytes)
		completedWhenPlaced = append(completedWhenPlaced, len(pr.ra.done))
	}
	dst := pr.hb.region(t, 1<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	for id := uint64(1); id <= 12; id++ {
		size := uint32(1000 + 37_000*id)
		src := pr.ha.region(t, int(size), id, memreg.LocalWrite)
		wr := SendWR{ID: id, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()}
		if id%4 == 0 { // a WRITE with immediate data makes a receive completion, not a placement
			wr.Op, wr.Imm = OpWriteImm, 7
			pr.b.PostRecv(RecvWR{ID: id, Local: SGE{dst, 0, 1}})
		} else {
			sizes = append(sizes, size)
		}
		if err := pr.a.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	if !n.run(10*time.Second, func() bool { return len(pr.ra.done) == 12 }) {
		t.Fatalf("%d of 12 completed: %v", len(pr.ra.done), pr.a.Err())
	}
	if !slices.Equal(placed, sizes) || pr.a.SenderStats().Retransmits == 0 {
		t.Fatalf("placed %v, want the plain WRITEs' sizes %v in order (%d resent)", placed, sizes, pr.a.SenderStats().Retransmits)
	}
	for k, c := range completedWhenPlaced {
		if c > k+k/3 { // the k-th plain WRITE is the (k + k/3)-th posted
			t.Fatalf("plain WRITE %d placed after %d completions at its sender", k, c)
		}
	}
}

// TestDeregisterFromWritePlaced checks that the application may deregister
// a region from the callback that tells it a WRITE into it was placed. The
// packet that completed the WRITE no longer holds the region then. So
// Deregister, which waits for every packet holding the region, returns at
// once. Called on the loop, it would otherwise wait for ever.
func TestDeregisterFromWritePlaced(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 4, Streams: 1})
	pr := n.connect(0, 1)
	dst := pr.hb.region(t, 1<<16, 0, memreg.LocalWrite|memreg.RemoteWrite)
	deregistered := false
	pr.rb.onPlaced = func(uint32) {
		done := make(chan error, 1)
		go func() { done <- dst.Deregister() }()
		select {
		case err := <-done:
			deregistered = err == nil
		case <-time.After(10 * time.Second):
			t.Error("Deregister from WritePlaced waits for the packet that placed the WRITE")
		}
	}
	src := pr.ha.region(t, 1<<16, 1, memreg.LocalWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 1 << 16}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	if !n.run(10*time.Second, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatalf("the WRITE did not complete: %v", pr.a.Err())
	}
	if !deregistered {
		t.Fatal("the region was not deregistered from WritePlaced")
	}
}
