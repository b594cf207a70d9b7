package engine

import (
	"bytes"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
)

func concat(list []SGE) []byte {
	var out []byte
	for _, e := range list {
		out = append(out, e.Region.Bytes()[e.Offset:e.Offset+uint64(e.Length)]...)
	}
	return out
}

// TestScatterGather checks scatter-gather lists. A SEND gathered from three
// buffers lands scattered over four, a WRITE gathers, and a READ scatters.
// It runs under loss, so that resends gather again from the lists.
func TestScatterGather(t *testing.T) {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.03}
	n := newNet(t, fc, Config{Paths: 4})
	pr := n.connect(0, 1)
	a1 := pr.ha.region(t, 20000, 1, memreg.LocalWrite)
	a2 := pr.ha.region(t, 9000, 2, memreg.LocalWrite)
	gather := []SGE{{a1, 100, 1000}, {a2, 0, 8000}, {a1, 19997, 3}}
	b1 := pr.hb.region(t, 10000, 0, memreg.LocalWrite)
	b2 := pr.hb.region(t, 10000, 0, memreg.LocalWrite)
	scatter := []SGE{{b1, 0, 7}, {b2, 50, 4000}, {b1, 100, 2000}, {b2, 5000, 4000}}
	pr.b.PostRecv(RecvWR{ID: 1, SGL: scatter})
	pr.a.Post(SendWR{ID: 1, Op: OpSend, SGL: gather})

	target := pr.hb.region(t, 9003, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 2, Op: OpWrite, SGL: gather, RKey: target.Key()})

	remote := pr.hb.region(t, 9003, 9, memreg.RemoteRead)
	c1 := pr.ha.region(t, 5000, 0, memreg.LocalWrite)
	c2 := pr.ha.region(t, 7000, 0, memreg.LocalWrite)
	into := []SGE{{c1, 10, 3000}, {c2, 0, 6003}}
	if err := pr.a.Post(SendWR{ID: 3, Op: OpRead, SGL: into, RKey: remote.Key()}); err != nil {
		t.Fatal(err)
	}

	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 3 && len(pr.rb.done) == 1 }) {
		t.Fatalf("completions %v / %v", pr.ra.done, pr.rb.done)
	}
	want := concat(gather)
	if got := concat(scatter); !bytes.Equal(got[:len(want)], want) || pr.rb.done[0].Bytes != uint32(len(want)) {
		t.Fatal("the SEND did not scatter what was gathered")
	}
	if !bytes.Equal(target.Bytes(), want) {
		t.Fatal("the WRITE did not gather its list")
	}
	if !bytes.Equal(concat(into), remote.Bytes()) {
		t.Fatal("the READ did not scatter into its list")
	}
	// Lists are checked at post.
	if err := pr.a.Post(SendWR{Op: OpSend, SGL: []SGE{{a1, 19990, 20}}}); err == nil {
		t.Error("a list entry past its region was accepted")
	}
	other, _ := pr.ha.reg.NewDomain().Register(make([]byte, 10), memreg.LocalWrite)
	if err := pr.b.PostRecv(RecvWR{SGL: []SGE{{b1, 0, 10}, {other, 0, 10}}}); err == nil {
		t.Error("a receive list with a foreign region was accepted")
	}
}

// TestUnsignaledRequests checks that unsignaled requests complete silently
// when they succeed. Signaling every fifth gives two completions for ten
// WRITEs, and the data of all ten.
func TestUnsignaledRequests(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 4})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 10*1000, 4, memreg.LocalWrite)
	dst := pr.hb.region(t, 10*1000, 0, memreg.LocalWrite|memreg.RemoteWrite)
	for i := 0; i < 10; i++ {
		pr.a.Post(SendWR{ID: uint64(i), Op: OpWrite, Local: SGE{src, uint64(i * 1000), 1000},
			RKey: dst.Key(), RemoteOffset: uint64(i * 1000), Unsignaled: i%5 != 4})
	}
	n.run(time.Second, func() bool { return pr.a.snd.msgs == 0 })
	if len(pr.ra.done) != 2 || pr.ra.done[0].ID != 4 || pr.ra.done[1].ID != 9 {
		t.Fatalf("completions %+v: want ids 4 and 9 only", pr.ra.done)
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("data differs")
	}
	// A failing unsignaled request is still reported.
	pr.ra.done = nil
	pr.a.Post(SendWR{ID: 77, Op: OpWrite, Local: SGE{src, 0, 10}, RKey: dst.Key() ^ 1, Unsignaled: true})
	n.run(time.Second, func() bool { return len(pr.ra.done) > 0 })
	if len(pr.ra.done) != 1 || pr.ra.done[0].ID != 77 || pr.ra.done[0].Status != StatusRemoteAccess {
		t.Fatalf("a failed unsignaled WRITE: %+v", pr.ra.done)
	}
}

// TestReceiveWithoutBuffers checks that a receive with no buffer takes a
// WRITE_IMM's notice, while the data goes to the region the WRITE names,
// and a SEND of no bytes. RDMA programs use both.
func TestReceiveWithoutBuffers(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 2, Streams: 1})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 8192, 3, memreg.LocalWrite)
	dst := pr.hb.region(t, 8192, 0, memreg.LocalWrite|memreg.RemoteWrite)
	for id := uint64(1); id <= 2; id++ {
		if err := pr.b.PostRecv(RecvWR{ID: 10 + id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWriteImm, Local: SGE{Region: src, Length: 8192}, RKey: dst.Key(), Imm: 77}); err != nil {
		t.Fatal(err)
	}
	if err := pr.a.Post(SendWR{ID: 2, Op: OpSend}); err != nil {
		t.Fatal(err)
	}
	n.run(time.Second, func() bool { return len(pr.rb.done) == 2 && len(pr.ra.done) == 2 })
	if len(pr.rb.done) != 2 || !pr.rb.done[0].HasImm || pr.rb.done[0].Imm != 77 || pr.rb.done[0].ID != 11 ||
		pr.rb.done[1].ID != 12 || pr.rb.done[1].Bytes != 0 || pr.rb.done[1].Status != StatusOK {
		t.Fatalf("receiver's completions %+v", pr.rb.done)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("the WRITE_IMM's data did not land")
	}
}
