package sim

import "testing"

// The all-to-all posts each host's flows in pairwise order. Host h sends
// first to h+1, then to h+2 and so on, so no two hosts start on the same
// receiver.
func TestAllToAllPairwiseOrder(t *testing.T) {
	const hosts = 4
	flows := AllToAll(hosts, 1)
	if len(flows) != hosts*(hosts-1) {
		t.Fatalf("%d flows, want %d", len(flows), hosts*(hosts-1))
	}
	first := map[int]bool{}
	for i, f := range flows {
		h, k := i/(hosts-1), i%(hosts-1)
		if f.Src != h || f.Dst != (h+k+1)%hosts {
			t.Fatalf("flow %d: %d -> %d, want %d -> %d", i, f.Src, f.Dst, h, (h+k+1)%hosts)
		}
		if k == 0 {
			if first[f.Dst] {
				t.Fatalf("two hosts start on host %d", f.Dst)
			}
			first[f.Dst] = true
		}
	}
}
