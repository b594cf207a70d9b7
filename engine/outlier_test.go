package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// lossySpineFabric is a leaf-spine plane with 8 spines and each host on its
// own leaf. The leaf-to-spine link of host 0's leaf that ECMP gives path 0,
// whose source port to the acceptor is 49152, drops 20%. So one route of
// the connection's eight is bad.
func lossySpineFabric(t *testing.T) netem.Config {
	fc := netem.Config{Seed: 1, Hosts: 2, Planes: 1, HostsPerLeaf: 1, Spines: 8,
		Uplink: link100(), Downlink: link100(), FabricUp: link100(), FabricDown: link100()}
	probe, err := netem.New(fc, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := netip.AddrPortFrom(netem.Addr(0, 0), 49152)
	dst := netip.AddrPortFrom(netem.Addr(0, 1), proto.DefaultPort)
	_, spine := probe.Path(src, dst)
	bad := link100()
	bad.Impair.Loss = &netem.RandomLoss{P: 0.2}
	fc.Overrides = []netem.Override{{Plane: 0, Match: netem.LinkMatch{Kind: netem.FabricUp, Host: -1, Leaf: 0, Spine: spine}, Link: bad}}
	return fc
}

// TestLossOutlierIsRepathed checks that a path whose route crosses a bad
// link, and so loses far more than the others, moves to a new source port.
// The transfer then loses less than with the rule off.
func TestLossOutlierIsRepathed(t *testing.T) {
	run := func(factor float64) (SenderStats, uint64) {
		n := newNet(t, lossySpineFabric(t), Config{Paths: 8, LossOutlierFactor: factor})
		pr := n.connect(0, 1)
		src := pr.ha.region(t, 16<<20, 1, memreg.LocalWrite)
		dst := pr.hb.region(t, 16<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
		pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 16 << 20}, RKey: dst.Key()})
		if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
			t.Fatalf("factor %v: %+v %v", factor, pr.ra.done, pr.a.Err())
		}
		if digest(src.Bytes()) != digest(dst.Bytes()) {
			t.Fatal("data differs")
		}
		var lost uint64
		for _, tm := range pr.a.Telemetry() {
			lost += tm.Counters.Lost
		}
		return pr.a.SenderStats(), lost
	}
	on, lostOn := run(0)
	off, lostOff := run(-1)
	t.Logf("rule on: %d lost, %+v; off: %d lost, %+v", lostOn, on, lostOff, off)
	if on.LossRepaths == 0 || off.LossRepaths != 0 {
		t.Fatalf("loss repaths: %d with the rule, %d without", on.LossRepaths, off.LossRepaths)
	}
	if lostOn*2 > lostOff {
		t.Errorf("lost %d with the rule, %d without: want less than half", lostOn, lostOff)
	}
}
