package sim

import "testing"

// With one path of eight congested by cross traffic, the connection shifts
// its packets to the other paths and keeps at least 90% of the capacity
// left to it.
func TestCrossTrafficOnOnePath(t *testing.T) {
	r, err := Cross(CrossConfig{Bytes: 128 << 20, Planes: 8, LinkRate: 100e9, CrossShare: 0.8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if r.Goodput < 0.9*r.Left {
		t.Errorf("%.3f of the capacity left", r.Goodput/r.Left)
	}
	if r.ShareOnCrossed > 0.5/8 {
		t.Errorf("%.1f%% of packets still on the crossed path", 100*r.ShareOnCrossed)
	}
}
