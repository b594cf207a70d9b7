package report

import (
	"fmt"

	"github.com/mroce/mroce/sim"
)

// The bounds a run's routes put on its connections (sim.RouteBounds),
// beside what the slowest flow had.

// boundsColumns head the bounds' columns of a table.
var boundsColumns = []string{"every flow at once", "per-path fair: slowest", "p10", "median", "measured: slowest flow", "paths moved"}

// boundsNotes say what the bounds' columns hold.
var boundsNotes = []string{
	"Every flow at once: the largest share of its line that every connection can carry together, each splitting its bytes over its paths' routes as it likes.",
	"Per-path fair: each connection's share where every link is shared max-min fairly among the paths that cross it, each path on its own and all starting together: a static share, not a ceiling, since flows that end early leave their links to the rest.",
	"Measured: the slowest flow's bytes over its completion time, its start included, as a share of its line. The bounds take each path's last route.",
}

// boundsTable is an empty table of bounds whose rows start with the
// columns lead.
func boundsTable(lead ...string) *Table {
	return &Table{Title: "What the routes the paths hashed to allow", Columns: append(lead, boundsColumns...), Notes: boundsNotes}
}

// boundsCells are the bounds' cells of a row, with slowest the measured
// share of the slowest flow.
func boundsCells(b *sim.RouteBounds, slowest float64) []any {
	together := any(b.Together)
	if b.TogetherMax > b.Together*(1+sim.TogetherTolerance) {
		together = fmt.Sprintf("%.3f to %.3f", b.Together, b.TogetherMax)
	}
	fair := b.PathFair
	if len(fair) == 0 { // no connection had a path to bound
		return []any{"-", "-", "-", "-", slowest, b.Moved}
	}
	return []any{together, fair[0], fair[len(fair)/10], median(fair), slowest, b.Moved}
}
