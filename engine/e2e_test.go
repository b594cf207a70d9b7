package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
)

func TestWriteOneMessage(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 4})
	pr := n.connect(0, 1)
	const size = 1 << 20
	src := pr.ha.region(t, size, 11, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 7, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatalf("no completion; sender %+v receiver %+v", pr.a.SenderStats(), pr.b.ReceiverStats())
	}
	if wc := pr.ra.done[0]; wc.ID != 7 || wc.Status != StatusOK || wc.Bytes != size {
		t.Fatalf("completion %+v", wc)
	}
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("destination differs from source")
	}
	t.Logf("sent %+v; received %+v; at %v", pr.a.SenderStats(), pr.b.ReceiverStats(), n.sim.Now())
}
