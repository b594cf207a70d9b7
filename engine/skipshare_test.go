package engine

import (
	"math"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/pathmgr"
)

// TestMarkedPathsTakeHalfAClearPathsTurns checks skipWeight: by their
// ports' rates, paths in SKIP take half the new data a clear path takes,
// and the clear ones the rest. Without the ports' rates, round robin still
// leaves them out while a clear path has room.
func TestMarkedPathsTakeHalfAClearPathsTurns(t *testing.T) {
	for _, rated := range []bool{true, false} {
		cfg := Config{Paths: 4}
		if rated {
			cfg.PortRates = []float64{portPayload}
		}
		n := newNet(t, twoHostFabric(1), cfg)
		pr := n.connect(0, 1)
		n.writeWhole(t, pr, 1<<20) // the paths are dealt, and nothing is left in flight
		s := &pr.a.snd
		s.unsent = 1 << 30 // the end of what is posted is far off (tailCut, endInSight)
		now := n.sim.Now()
		for _, p := range s.paths[:2] {
			p.Marked(now, time.Second)
			if p.State() != pathmgr.Skip {
				t.Fatalf("path %d is %v after a mark, want SKIP", p.ID(), p.State())
			}
		}
		var picked [4]int
		const picks = 600
		for range picks {
			p := s.pickPath(-1)
			if p == nil {
				t.Fatalf("rated %v: no path took new data", rated)
			}
			picked[p.ID()]++
		}
		marked := float64(picked[0]+picked[1]) / picks
		t.Logf("rated %v: packets by path %v, %.3f on the marked ones", rated, picked, marked)
		want := 0.0
		if rated {
			want = 1.0 / 3 // two paths at half a share, two at a whole one
		}
		if math.Abs(marked-want) > 0.01 {
			t.Errorf("rated %v: the paths in SKIP took %.3f of the new data, want %.3f", rated, marked, want)
		}
	}
}

// TestLargeMarkedPathsKeepAShare runs the reference permutation of 16 MB
// on the k = 8 fat tree at 400 Gb/s: each of 128 hosts WRITEs to the host
// 64 on, over 128 paths, held by its receiver's hint rather than its
// windows. Sent only to the paths that were clear at each instant, the new
// data of the hosts under one switch went to the same few routes at once,
// and those queues overflowed; taking half their share, the marked paths
// keep it spread, and the switches drop fewer packets.
func TestLargeMarkedPathsKeepAShare(t *testing.T) {
	if testing.Short() {
		t.Skip("large")
	}
	const hosts, size = 128, 3906 * 4096 // 16 MB
	run := func(first bool) (took time.Duration, drops uint64) {
		skipFirst = first
		defer func() { skipFirst = false }()
		cfg := atLineRate400(128)
		cfg.PlaceholderPayloads = true
		n := newNet(t, fatTreeAt400(1, 8, hosts), cfg)
		memory := make([]byte, size) // placeholders: every host's regions view it
		var pairs []*pair
		var wrs []SendWR
		for h := range hosts {
			pr := n.connect(h, (h+hosts/2)%hosts)
			src, err := pr.ha.pd.Register(memory, memreg.LocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := pr.hb.pd.Register(memory, memreg.LocalWrite|memreg.RemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			pairs = append(pairs, pr)
			wrs = append(wrs, SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
		}
		start := n.sim.Now()
		for i, pr := range pairs {
			if err := pr.a.Post(wrs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if !n.runUntilSent(pairs, 10*time.Millisecond) {
			t.Fatalf("clear paths first %v: the WRITEs did not end within 10 ms", first)
		}
		for _, l := range n.fab.Links() {
			if l.Kind() != netem.Uplink {
				drops += l.Stats().Drops[netem.DropQueueFull]
			}
		}
		return n.sim.Now().Sub(start), drops
	}
	took, drops := run(false)
	tookFirst, dropsFirst := run(true)
	t.Logf("marked paths at half a share: the slowest WRITE ended %v after the posts, %d packets dropped by the switches; clear paths first: %v, %d", took, drops, tookFirst, dropsFirst)
	if drops*4 > dropsFirst*3 || took > tookFirst {
		t.Errorf("at half a share %v and %d drops, clear paths first %v and %d: want at most three quarters of the drops, and no later", took, drops, tookFirst, dropsFirst)
	}
}
