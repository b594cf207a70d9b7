package report

import (
	"testing"
	"time"

	"github.com/mroce/mroce/sim"
)

// column is row's cell under the column named name.
func column(t *testing.T, tb *Table, row int, name string) any {
	t.Helper()
	for i, c := range tb.Columns {
		if c == name {
			return tb.Rows[row][i]
		}
	}
	t.Fatalf("%q: no column %q in %q", tb.Title, name, tb.Columns)
	return nil
}

// A traffic file's summary shows each of the run's counters under its own
// column, and the flows' table a flow's FCT in µs.
func TestFlowsTablesShowTheRunsCounters(t *testing.T) {
	f := sim.DefaultFabric(2)
	f.Hosts = 2
	res := sim.FlowsScenarioResult{
		Traffic: sim.Traffic{Fabric: f, Flows: []sim.Flow{{Src: 0, Dst: 1, Bytes: 1 << 20}}},
		Run: sim.FlowsResult{FCT: []time.Duration{12500 * time.Nanosecond}, Makespan: 13 * time.Microsecond, Connections: 1,
			Packets: 1001, Retransmits: 7, TailProbes: 3, Timeouts: 2},
		Bytes: 1 << 20,
	}
	tables := FlowsTables(res)
	want := map[string]any{"data packets": uint64(1001), "resent": uint64(7), "tail probes": uint64(3), "timeouts": uint64(2),
		"makespan µs": 13.0, "bytes": 1 << 20}
	for name, w := range want {
		if got := column(t, tables[0], 0, name); got != w {
			t.Errorf("column %q is %v, want %v", name, got, w)
		}
	}
	if got := column(t, tables[1], 0, "FCT µs"); got != 12.5 {
		t.Errorf("flow 0's FCT is %v µs, want 12.5", got)
	}
}

// A run over seeds shows each seed's figures, then the minimum, median
// and maximum of each column over the seeds, counts as whole numbers
// where they are.
func TestFlowsSeedsTablesSummarize(t *testing.T) {
	f := sim.DefaultFabric(1)
	f.Hosts = 2
	tr := sim.Traffic{Fabric: f, Flows: []sim.Flow{{Src: 0, Dst: 1, Bytes: 1 << 20}}}
	run := func(makespan time.Duration, resent uint64) sim.FlowsScenarioResult {
		return sim.FlowsScenarioResult{Traffic: tr, Run: sim.FlowsResult{Makespan: makespan, Retransmits: resent}, FCTMax: makespan}
	}
	res := sim.FlowsSeedsResult{Seeds: []uint64{7, 8, 9, 10},
		Runs: []sim.FlowsScenarioResult{run(40*time.Microsecond, 3), run(10*time.Microsecond, 0), run(30*time.Microsecond, 5), run(20*time.Microsecond, 2)}}
	tb := FlowsSeedsTables(res)[0]
	if len(tb.Rows) != 7 || tb.Rows[0][0] != uint64(7) || tb.Rows[4][0] != "min" || tb.Rows[5][0] != "median" || tb.Rows[6][0] != "max" {
		t.Fatalf("rows %v: want seeds 7 to 10, then min, median and max", tb.Rows)
	}
	for row, want := range map[int][2]any{0: {40.0, int64(3)}, 4: {10.0, int64(0)}, 5: {25.0, 2.5}, 6: {40.0, int64(5)}} {
		if got := [2]any{column(t, tb, row, "FCT max µs"), column(t, tb, row, "resent")}; got != want {
			t.Errorf("row %d (%v): FCT max and resent %v, want %v", row, tb.Rows[row][0], got, want)
		}
	}
}

// The planes table leaves "vs half the planes" empty where no run had half
// the planes, and the speed table the heap where runs shared it.
func TestPlanesTablesLeaveOutWhatWasNotMeasured(t *testing.T) {
	run := sim.FlowsResult{Packets: 10, WallTime: time.Second, HeapBytes: 1 << 20}
	res := sim.PlanesResult{Options: sim.DefaultPlanes(), Rows: []sim.PlanesRow{{Planes: 1, Run: run}, {Planes: 2, Run: run, VsHalf: 1.9}}}
	tables := PlanesTables(res)
	if got := column(t, tables[0], 0, "vs half the planes"); got != nil {
		t.Errorf("1 plane: vs half %v, want none", got)
	}
	if got := column(t, tables[0], 1, "vs half the planes"); got != 1.9 {
		t.Errorf("2 planes: vs half %v, want 1.9", got)
	}
	if got := column(t, tables[1], 0, "heap MiB"); got != 1.0 {
		t.Errorf("heap %v MiB, want 1", got)
	}
	res.HeapShared = true
	if got := column(t, PlanesTables(res)[1], 0, "heap MiB"); got != nil {
		t.Errorf("heap shared: %v MiB, want none", got)
	}
}
