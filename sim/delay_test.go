package sim

import (
	"testing"
	"time"
)

// Eight senders on one leaf WRITE to eight receivers on another, over one
// spine: the leaf's uplink is eight times oversubscribed and its queue
// marks nothing. Every receiver's rate hint grants its whole link, so only
// the senders' delay signal can tell them of the queue (docs/cc.md, "Where
// no queue marks"). With it they share the uplink and lose at most what
// their first windows put beyond the queue; without it they fill the
// queue until it drops.
func TestDropTailUplinkIsShared(t *testing.T) {
	o := DefaultFabric(1)
	o.Hosts, o.HostsPerLeaf, o.Spines = 16, 8, 1
	o.ECNThreshold, o.Buffer = 0, 1<<20
	o.StartJitter = 2 * time.Microsecond
	// pairs has each of the first n hosts WRITE 8 MiB to its peer on the
	// other leaf, and run runs them.
	pairs := func(n int) []Flow {
		var flows []Flow
		for i := range n {
			flows = append(flows, Flow{Src: i, Dst: n + i, Bytes: 8 << 20})
		}
		return flows
	}
	run := func(o FabricOptions, n int) FlowsResult {
		r, err := RunFlows(o, pairs(n), 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Failed > 0 {
			t.Fatalf("%d senders: %d flows failed", n, r.Failed)
		}
		return r
	}
	signal := func(target time.Duration) FlowsResult {
		o := o
		o.DelayTarget = target
		return run(o, 8)
	}
	uplink := float64(o.LinkRate) / 8 * sizeFor(o.MTU).payloadShare()
	flows := pairs(8)
	for _, seed := range []uint64{1, 2} {
		o.Seed = seed
		with, without := signal(0), signal(-1)
		t.Logf("seed %d: resent %d of %d with the delay signal, %d of %d without; %.3f and %.3f of the uplink",
			seed, with.Retransmits, with.Packets, without.Retransmits, without.Packets,
			with.Goodput(flows)/uplink, without.Goodput(flows)/uplink)
		if with.Retransmits*100 > with.Packets {
			t.Errorf("seed %d: %d of %d packets resent with the delay signal, want under 1%%", seed, with.Retransmits, with.Packets)
		}
		if without.Retransmits*20 < without.Packets {
			t.Errorf("seed %d: %d of %d resent without it; the scenario no longer overflows the queue", seed, without.Retransmits, without.Packets)
		}
		if g := with.Goodput(flows) / uplink; g < 0.9 {
			t.Errorf("seed %d: %.3f of the uplink with the delay signal, want 0.9 or more", seed, g)
		}
	}
	// 6, 8, 10 or 12 senders through an uplink as many times oversubscribed,
	// started together, end within a fifth of each other. The first
	// packets of some queue behind the others' first windows; a base taken
	// from them would read the queue the senders then hold as none, and
	// those senders would keep more than their share. The handshake's
	// reading, before any data, starts the base below that queue (docs/cc.md,
	// "Where no queue marks").
	o.StartJitter, o.Seed = 0, 1
	for _, n := range []int{6, 8, 10, 12} {
		o := o
		o.Hosts, o.HostsPerLeaf = 2*n, n
		r := run(o, n)
		lo, hi := r.FCT[0], r.FCT[0]
		for _, f := range r.FCT {
			lo, hi = min(lo, f), max(hi, f)
		}
		t.Logf("%d senders started together: FCTs from %v to %v", n, lo, hi)
		if hi > lo*6/5 {
			t.Errorf("%d senders started together: FCTs from %v to %v: want within a fifth of each other", n, lo, hi)
		}
	}
}
