package sim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/engine"
)

const sampleTraffic = `# two hosts, then a chain
hosts 4
planes 2
rate-gbps 100
delay 2us   # per link
ecn-kib 100
ecn-max-kib 300
shared-buffer-kib 2048
shared-buffer-alpha 0.5
fat-tree-k 4
mtu 2048
paths 4
loss 0.001
first-window fixed
0->1 start 0 size 1MiB
1->2 start 5us size 64KiB after 0
3->0 start 0 size 4096
`

func TestParseTraffic(t *testing.T) {
	tr, err := ParseTraffic(strings.NewReader(sampleTraffic))
	if err != nil {
		t.Fatal(err)
	}
	f := tr.Fabric
	if f.Hosts != 4 || f.Planes != 2 || f.LinkRate != 100e9 || f.Delay != 2*time.Microsecond || f.ECNThreshold != 100<<10 ||
		f.ECNMax != 300<<10 || f.SharedBuffer != 2<<20 || f.SharedAlpha != 0.5 || f.FatTreeK != 4 || f.MTU != 2048 || f.Paths != 4 || f.Loss != 0.001 || f.FirstWindow != engine.FirstWindowFixed || f.Baseline {
		t.Fatalf("fabric %+v", f)
	}
	want := []Flow{{Src: 0, Dst: 1, Bytes: 1 << 20}, {Src: 1, Dst: 2, Bytes: 64 << 10, Start: 5 * time.Microsecond, After: []int{0}}, {Src: 3, Dst: 0, Bytes: 4096}}
	if len(tr.Flows) != 3 {
		t.Fatalf("flows %+v", tr.Flows)
	}
	for i, w := range want {
		g := tr.Flows[i]
		if g.Src != w.Src || g.Dst != w.Dst || g.Bytes != w.Bytes || g.Start != w.Start || len(g.After) != len(w.After) {
			t.Errorf("flow %d: %+v, want %+v", i, g, w)
		}
	}
}

// Errors name the line and say what is wrong.
func TestParseTrafficErrors(t *testing.T) {
	for _, c := range []struct{ text, msg string }{
		{"", "no flows"},
		{"hosts 1\n0->1 start 0 size 1", "line 1: hosts \"1\": want 2 to 256"},
		{"0->0 start 0 size 1", "line 1: \"0->0\": want SRC->DST, two different hosts"},
		{"0->1 start 0", "line 1: \"0->1 start 0\": no size"},
		{"0->1 size 5TiB", "size \"5TiB\": want 1 byte to 1 GiB"},
		{"0->1 size 1 after 0", "line 1: after \"0\": want the numbers of earlier flows"},
		{"speed 9", "line 1: unknown setting \"speed\""},
		{"mtu 128\n0->1 size 1", "line 1: mtu \"128\": want 256 to 8192"},
		{"buffer-kib 2\n0->1 size 1", "buffer of 2048 bytes: want at least one full packet, 4160 bytes"},
		{"delay 20ms\n0->1 size 1", "want a duration of 0 to 10ms"},
		{"ecn-kib 100\necn-max-kib 50\n0->1 size 1", "want the top above the threshold"},
		{"shared-buffer-kib 2\n0->1 size 1", "shared buffer of 2048 bytes: want 0 (none) or at least one full packet"},
		{"shared-buffer-alpha 0\n0->1 size 1", "shared-buffer-alpha \"0\": want above 0, at most 1024"},
		{"shared-buffer-alpha 2\n0->1 size 1", "shared buffer alpha 2: given without a shared buffer"},
		{"hosts 4\n\n0->9 size 1", "flow 0: 0->9, but there are 4 hosts"},
		{"0->1 size 1 start -1s", "start \"-1s\""},
		{"0->1 size", "has no value"},
		{"first-window 32\n0->1 size 1", "first-window \"32\": want bdp or fixed"},
	} {
		_, err := ParseTraffic(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.text, err, c.msg)
		}
	}
}

// A traffic file runs, and its flows complete on its fabric.
func TestTrafficRuns(t *testing.T) {
	tr, err := ParseTraffic(strings.NewReader(sampleTraffic))
	if err != nil {
		t.Fatal(err)
	}
	r, err := RunFlows(tr.Fabric, tr.Flows, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Failed != 0 || r.FCT[0] <= 0 || r.FCT[1] <= 0 || r.FCT[2] <= 0 {
		t.Fatalf("%+v", r)
	}
}

// FuzzParseTraffic checks that no text makes ParseTraffic panic, and that
// what it accepts is runnable. Hosts are in range and different, sizes
// run from 1 byte to 1 GiB, and flows wait only for earlier flows.
func FuzzParseTraffic(f *testing.F) {
	f.Add(sampleTraffic)
	f.Add("0->1 start 0 size 1KiB\n1->0 size 1 after 0")
	f.Add("baseline\nhosts 256\n255->0 size 1GiB")
	f.Fuzz(func(t *testing.T, text string) {
		tr, err := ParseTraffic(strings.NewReader(text))
		if err != nil {
			return
		}
		for i, fl := range tr.Flows {
			if fl.Src == fl.Dst || fl.Src < 0 || fl.Dst < 0 || fl.Src >= tr.Fabric.Hosts || fl.Dst >= tr.Fabric.Hosts ||
				fl.Bytes < 1 || fl.Bytes > 1<<30 || fl.Start < 0 {
				t.Fatalf("flow %d: %+v", i, fl)
			}
			for _, a := range fl.After {
				if a < 0 || a >= i {
					t.Fatalf("flow %d waits for %d", i, a)
				}
			}
		}
	})
}

// A traffic file's run counts what the senders resent, nothing on a clean
// fabric and the losses on a lossy one. Its counters are the run's own,
// and as the run is deterministic RunFlows gives the same again.
func TestFlowsScenarioCountsResends(t *testing.T) {
	for _, loss := range []string{"0", "0.02"} {
		tr, err := ParseTraffic(strings.NewReader("hosts 2\nplanes 2\nloss " + loss + "\n0->1 start 0 size 4MiB\n"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := FlowsScenario(tr)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Run
		if r.Packets < 1000 || (loss == "0") != (r.Retransmits == 0) {
			t.Errorf("loss %s: %d data packets, %d resent", loss, r.Packets, r.Retransmits)
		}
		if res.Bytes != 4<<20 || len(res.SortedFCT) != 1 || res.FCTMax != res.Run.FCT[0] {
			t.Errorf("loss %s: %d bytes, FCTs %v, max %v", loss, res.Bytes, res.SortedFCT, res.FCTMax)
		}
	}
}

// A traffic file runs once a seed, from its own seed up. With start
// jitter the seeds draw different starts, so the runs differ; each
// completes every flow. Run two at once, they give what they give one
// after the other.
func TestFlowsSeeds(t *testing.T) {
	tr, err := ParseTraffic(strings.NewReader("hosts 8\nplanes 2\nhosts-per-leaf 4\nspines 2\nseed 5\nstart-jitter 3us\n" +
		"0->4 size 256KiB\n1->5 size 256KiB\n2->6 size 256KiB\n3->7 size 256KiB\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := FlowsSeeds(tr, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	side, err := FlowsSeeds(tr, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Runs {
		if !slices.Equal(side.Runs[i].Run.FCT, r.Runs[i].Run.FCT) || side.Seeds[i] != r.Seeds[i] {
			t.Errorf("seed %d: FCTs %v two at once, %v one after the other", r.Seeds[i], side.Runs[i].Run.FCT, r.Runs[i].Run.FCT)
		}
	}
	if len(r.Runs) != 3 || r.Seeds[0] != 5 || r.Seeds[2] != 7 {
		t.Fatalf("seeds %v, %d runs: want 5 to 7", r.Seeds, len(r.Runs))
	}
	differ := false
	for i, run := range r.Runs {
		if run.Traffic.Fabric.Seed != r.Seeds[i] || run.Run.Failed != 0 {
			t.Errorf("run %d: seed %d, %d failed", i, run.Traffic.Fabric.Seed, run.Run.Failed)
		}
		differ = differ || !slices.Equal(run.Run.Started, r.Runs[0].Run.Started)
	}
	if !differ {
		t.Error("every seed started the flows at the same times")
	}
}
