package engine

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// busySpineFabric is a leaf-spine plane of 400 Gb/s links of 2 µs, with 8
// spines and each host on its own leaf, whose switches' queues mark from
// 64 KiB. The leaf-to-spine links of host 0's leaf that ECMP gives paths 0
// to 3, whose source ports to the acceptor are 49152-49155, run at 25 Gb/s
// and mark from 16 KiB, as if other traffic took most of them. Other paths
// hash onto some of them too; the rest cross idle links.
func busySpineFabric(t *testing.T) netem.Config {
	nic := netem.LinkConfig{Rate: 400e9, Delay: 2 * time.Microsecond}
	l := nic
	l.Queue.ECNThreshold = 64 << 10
	fc := netem.Config{Seed: 1, Hosts: 2, Planes: 1, HostsPerLeaf: 1, Spines: 8,
		Uplink: nic, Downlink: l, FabricUp: l, FabricDown: l}
	probe, err := netem.New(fc, nil)
	if err != nil {
		t.Fatal(err)
	}
	busy := l
	busy.Rate = 25e9
	busy.Queue.ECNThreshold = 16 << 10
	dst := netip.AddrPortFrom(netem.Addr(0, 1), proto.DefaultPort)
	for port := uint16(49152); port < 49152+4; port++ {
		_, spine := probe.Path(netip.AddrPortFrom(netem.Addr(0, 0), port), dst)
		fc.Overrides = append(fc.Overrides, netem.Override{Plane: 0, Match: netem.LinkMatch{Kind: netem.FabricUp, Host: -1, Leaf: 0, Spine: spine}, Link: busy})
	}
	return fc
}

// writeOverBusySpine WRITEs 16 MiB over 8 paths of busySpineFabric, with
// routeClear off so that relief alone grows the never-marked paths, and
// returns how long it took and the sender. what names the run in failures.
func writeOverBusySpine(t *testing.T, what string) (time.Duration, *sender) {
	t.Helper()
	routeClearOff = true
	defer func() { routeClearOff = false }()
	n := newNet(t, busySpineFabric(t), Config{Paths: 8, InboundCapacity: 49e9})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 16<<20, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 16<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	start := n.sim.Now()
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 16 << 20}, RKey: dst.Key()})
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
		t.Fatalf("%s: %+v %v", what, pr.ra.done, pr.a.Err())
	}
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatalf("%s: data differs", what)
	}
	return n.sim.Now().Sub(start), &pr.a.snd
}

// TestClearPathsRelieveABusyRoute checks that where some paths' routes
// cross busy links, the connection's other paths take over what those
// paths' cuts gave up in a few round trips (relieves), not a packet a round
// trip: the transfer ends sooner with the rule than without, and the
// windows of the paths never marked end larger.
func TestClearPathsRelieveABusyRoute(t *testing.T) {
	run := func(off bool) (time.Duration, float64) {
		reliefOff = off
		defer func() { reliefOff = false }()
		took, s := writeOverBusySpine(t, fmt.Sprintf("relief off %v", off))
		clear, paths := 0.0, 0
		for _, p := range s.paths {
			if p.Counters.CEMarks == 0 {
				clear += p.cwin.Value()
				paths++
			}
		}
		if paths == 0 || paths == len(s.paths) {
			t.Fatalf("relief off %v: %d paths of %d unmarked: want the busy links to mark some, not all", off, paths, len(s.paths))
		}
		return took, clear
	}
	on, clearOn := run(false)
	off, clearOff := run(true)
	t.Logf("with relief: %v, clear paths' windows %.0f packets; without: %v, %.0f", on, clearOn, off, clearOff)
	if on >= off || clearOn <= clearOff {
		t.Errorf("with relief %v and %.0f packets, without %v and %.0f: want sooner, with larger windows", on, clearOn, off, clearOff)
	}
}

// TestReliefCountsQueuedWindowsAtTheirQueue checks that relief reads the
// windows' rate at each path's least round trip plus its route's own queue
// (underHintQueued): the busy paths' windows fill with packets queued on
// their links, and at their least round trips alone they count as carrying
// more than they do, so the clear paths take over less of what the busy
// ones give up. With the queue counted the transfer ends sooner.
func TestReliefCountsQueuedWindowsAtTheirQueue(t *testing.T) {
	queued, _ := writeOverBusySpine(t, "queue counted")
	reliefLeastOnly = true
	defer func() { reliefLeastOnly = false }()
	least, _ := writeOverBusySpine(t, "least RTTs only")
	t.Logf("queue counted: %v; least RTTs only: %v", queued, least)
	if queued >= least {
		t.Errorf("queue counted %v, least RTTs only %v: want sooner", queued, least)
	}
}
