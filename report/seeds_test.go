package report

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// Over seeds a cell all runs agree on keeps its value, a number that moved
// shows its minimum, maximum and median, a figure never reached reads
// "never", and text that differs lists its values. A note that differs
// is given for each seed. Tables of different shapes are refused.
func TestOverSeeds(t *testing.T) {
	run := func(conv float64, resent uint64, name string) []*Table {
		tb := &Table{Title: "incast", Columns: []string{"variant", "converged", "resent", "N"},
			Notes: []string{"Targets: 2 base RTTs.", fmt.Sprintf("Lost: %d.", resent%2)}}
		tb.Add(name, conv, resent, 8)
		return []*Table{tb}
	}
	got, err := OverSeeds([][]*Table{run(3, 10, "mroce"), run(math.NaN(), 20, "mroce"), run(1, 13, "mroce")}, []uint64{4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	row := got[0].Rows[0]
	if row[0] != "mroce" || row[1] != "1.000-never (3.000)" || row[2] != "10-20 (13)" || row[3] != 8 {
		t.Errorf("row %q", row)
	}
	if !strings.Contains(got[0].Title, "seeds 4 to 6") {
		t.Errorf("title %q", got[0].Title)
	}
	if n := got[0].Notes; len(n) != 4 || n[0] != "Targets: 2 base RTTs." || n[1] != "Seed 4: Lost: 0." || n[3] != "Seed 6: Lost: 1." {
		t.Errorf("notes %q: want the common one once and the others a seed each", n)
	}
	even, _ := OverSeeds([][]*Table{run(1, 1, "a"), run(2, 2, "b")}, []uint64{1, 2})
	if r := even[0].Rows[0]; r[0] != "[a b]" || r[2] != "1-2 (1.500)" {
		t.Errorf("two seeds: row %q", r)
	}
	short := run(1, 1, "a")
	short[0].Rows = nil
	if _, err := OverSeeds([][]*Table{short, run(1, 1, "a")}, []uint64{1, 2}); err == nil {
		t.Error("tables of different shapes folded")
	}
	renamed := run(1, 1, "a")
	renamed[0].Columns = []string{"variant", "converged", "sent", "N"}
	if _, err := OverSeeds([][]*Table{run(1, 1, "a"), renamed}, []uint64{1, 2}); err == nil {
		t.Error("tables of different columns folded")
	}
}
