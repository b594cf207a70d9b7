package sim

import (
	"strings"
	"testing"
	"time"
)

// A plane of 8 blackholed under an all-to-all of 56 connections loses no
// connection. The run keeps at least 0.95 x 7/8 of all planes' capacity
// over the measured window. After the repair the plane carries data
// again, for more than 7/8.
func TestPlaneFailAllToAll(t *testing.T) {
	if testing.Short() {
		t.Skip("56 connections, 900 MiB: run without -short")
	}
	o := DefaultPlaneFail()
	o.AllToAll, o.FlowBytes = true, 16<<20
	o.FailAt, o.RepairAt = 20*time.Microsecond, 600*time.Microsecond
	r, err := PlaneFail(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Window < r.Target {
		t.Errorf("%.3f of capacity over the window, target %.3f", r.Window, r.Target)
	}
	if r.AfterRepair <= 7.0/8 {
		t.Errorf("%.3f of capacity after the repair: the plane is not back", r.AfterRepair)
	}
	if r.Run.Failed != 0 || r.Run.Connections != 8*7 {
		t.Errorf("%d of %d connections lost, want 0 of %d", r.Run.Failed, r.Run.Connections, 8*7)
	}
}

// A repair inside the window the target is measured over is refused,
// since the figure would mix the failure with the recovery. So is one
// before the failure.
func TestPlaneFailRefusesRepairInTheWindow(t *testing.T) {
	o := DefaultPlaneFail()
	for _, c := range []struct {
		at   time.Duration
		want string
	}{{o.FailAt + 50*baseRTT(o.Fabric), "falls in the window"}, {o.FailAt / 2, "is not after the failure"}} {
		o.RepairAt = c.at
		if _, err := PlaneFail(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("repair at %v: %v, want %q", c.at, err, c.want)
		}
	}
}
