package netbench

import "testing"

// Each measurement runs and moves its bytes in a small run. mroce bench-net
// prints the figures themselves, and nothing asserts them.
func TestMeasurementsRun(t *testing.T) {
	m, err := Mroce(4<<20, 8)
	if err != nil {
		t.Fatal(err)
	}
	if m.Bytes != 4<<20 || m.Elapsed <= 0 {
		t.Fatalf("mroce: %+v", m)
	}
	u, err := RawUDP(4<<20, 4096, 64)
	if err != nil {
		t.Fatal(err)
	}
	if u.Bytes <= 0 || u.Bytes > 4<<20 {
		t.Fatalf("raw UDP: %+v", u)
	}
	c, err := TCP(4<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if c.Bytes != 4<<20 {
		t.Fatalf("TCP: %+v", c)
	}
	for _, r := range []Result{m, u, c} {
		t.Logf("%s: %.2f Gb/s, %v CPU per GB; %s", r.Name, r.Gbps(), r.CPUPerGB(), r.Detail)
	}
}
