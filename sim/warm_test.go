package sim

import (
	"regexp"
	"strings"
	"testing"
)

var warmedCount = regexp.MustCompile(`Warmed:[0-9]+`)

// Warming events before they fire changes no result: over processes on
// two cores and on one clock (a leaf-spine), with loss, the same result
// with warming on as off. And auto warms from WarmFrom connections.
func TestWarmingChangesNoResult(t *testing.T) {
	o := DefaultFabric(4)
	o.Hosts, o.Loss, o.Workers = 8, 0.01, 2
	spine := o
	spine.HostsPerLeaf, spine.Spines = 4, 2
	for i, c := range []struct {
		o     FabricOptions
		flows []Flow
		procs bool
	}{{o, AllToAll(o.Hosts, 256<<10), true}, {spine, AllToAll(o.Hosts, 128<<10), false}} {
		var runs [2]string
		for k, warm := range []Warming{WarmOff, WarmOn} {
			c.o.Warm = warm
			runs[k] = lossyRun(t, c.o, c.flows, 0)
			warmed := warmedCount.FindString(runs[k])
			if (warmed != "Warmed:0") != (warm == WarmOn) {
				t.Fatalf("case %d: warming on %v, %s", i, warm == WarmOn, warmed)
			}
			runs[k] = warmedCount.ReplaceAllString(runs[k], "Warmed:-")
		}
		if runs[0] != runs[1] {
			t.Fatalf("case %d: warmed:\n%s\nnot warmed:\n%s", i, runs[1], runs[0])
		}
		if over := "OverProcesses:true"; c.procs != strings.Contains(runs[0], over) {
			t.Fatalf("case %d: over processes %v, want %v", i, !c.procs, c.procs)
		}
	}
	if WarmAuto.on(WarmFrom-1) || !WarmAuto.on(WarmFrom) || !WarmOn.on(1) || WarmOff.on(1<<20) {
		t.Fatal("auto warms from WarmFrom connections, on always, off never")
	}
}
