package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
)

// TestPlaceholderPayloadsChangeNoResult checks that an all-to-all under
// loss gives the same result, to the last counter and nanosecond, whether
// the engines move real payloads or the default placeholders. Only the
// wall time and the heap differ.
func TestPlaceholderPayloadsChangeNoResult(t *testing.T) {
	o := DefaultFabric(2)
	o.Hosts, o.Loss = 6, 0.01
	flows := AllToAll(o.Hosts, 256<<10)
	var got [2]string
	for i, realPayloads := range []bool{true, false} {
		o.RealPayloads = realPayloads
		got[i] = lossyRun(t, o, flows, 10*time.Microsecond)
	}
	if got[0] != got[1] {
		t.Fatalf("real payloads:\n%s\nplaceholders:\n%s", got[0], got[1])
	}
}

// lossyRun runs flows on o under loss and returns as text all it measured
// but the wall time and the heap, which differ from run to run. It fails
// t when nothing was resent, as the loss then did not bite, or when a
// flow failed.
func lossyRun(t *testing.T, o FabricOptions, flows []Flow, bucket time.Duration) string {
	t.Helper()
	r, err := RunFlows(o, flows, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if r.Retransmits == 0 || r.Failed != 0 {
		t.Fatalf("%d resent, %d failed: the loss did not bite, or flows failed", r.Retransmits, r.Failed)
	}
	r.WallTime, r.HeapBytes = 0, 0
	return fmt.Sprintf("%+v", r)
}

// TestWhenPayloadsAreReal checks that the engines carry placeholder
// payloads unless asked for real ones or a link flips bits, which only a
// CRC would notice. With placeholders, every host's regions are views of
// one allocation.
func TestWhenPayloadsAreReal(t *testing.T) {
	clean := netem.Config{Hosts: 2, Planes: 1, Uplink: netem.LinkConfig{Rate: 100e9}, Downlink: netem.LinkConfig{Rate: 100e9}}
	corrupting := clean
	corrupting.FabricDown.Impair.Corrupt = 0.01
	oneLink := clean
	flips := netem.LinkConfig{Rate: 100e9}
	flips.Impair.Corrupt = 0.01
	oneLink.Overrides = []netem.Override{{Plane: 0, Match: netem.LinkMatch{Kind: netem.Downlink, Host: 1, Leaf: -1, Spine: -1}, Link: flips}}
	for _, c := range []struct {
		fc                 netem.Config
		realPayloads, want bool
	}{{clean, false, true}, {clean, true, false}, {corrupting, false, false}, {oneLink, false, false}} {
		w, err := newWorld(c.fc, 1, c.realPayloads, func(int) engine.Config { return engine.Config{Paths: 1, Streams: 1} })
		if err != nil {
			t.Fatal(err)
		}
		if got := w.hosts[0].ep.Config().PlaceholderPayloads; got != c.want {
			t.Fatalf("corrupting %v, real payloads asked %v: placeholders %v", corrupts(c.fc), c.realPayloads, got)
		}
		a, b := w.hosts[0].region(4096, memreg.LocalWrite), w.hosts[1].region(100, memreg.LocalWrite|memreg.RemoteWrite)
		if shared := &a.Bytes()[0] == &b.Bytes()[0]; shared != c.want || len(a.Bytes()) != 4096 || len(b.Bytes()) != 100 {
			t.Fatalf("placeholders %v: regions share memory %v (%d and %d bytes)", c.want, shared, len(a.Bytes()), len(b.Bytes()))
		}
	}
}
