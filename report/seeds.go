package report

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// OverSeeds folds the tables of one scenario run once with each seed of
// seeds into tables of the same shape. A cell that every run filled alike
// keeps its value. A number that moved becomes "min-max (median)" over the
// seeds, "never" standing for a figure a run never reached. The runs'
// tables must match in number, rows and columns, as a scenario's do when
// only the seed changes.
func OverSeeds(runs [][]*Table, seeds []uint64) ([]*Table, error) {
	if len(runs) == 0 || len(runs) != len(seeds) {
		return nil, errors.New("report: no runs, or not one a seed")
	}
	first := runs[0]
	out := make([]*Table, len(first))
	for i, t := range first {
		for _, run := range runs {
			if len(run) != len(first) || !slices.Equal(run[i].Columns, t.Columns) || len(run[i].Rows) != len(t.Rows) {
				return nil, fmt.Errorf("report: %q: the seeds' tables differ in shape", t.Title)
			}
		}
		o := &Table{Title: fmt.Sprintf("%s; seeds %d to %d: min-max (median) where they differ", t.Title, seeds[0], seeds[len(seeds)-1]),
			Columns: t.Columns, Notes: foldNotes(runs, i, seeds)}
		for r, row := range t.Rows {
			cells := make([]any, len(row))
			for k := range row {
				var vals []any
				for _, run := range runs {
					if len(run[i].Rows[r]) != len(row) {
						return nil, fmt.Errorf("report: %q: the seeds' tables differ in shape", t.Title)
					}
					vals = append(vals, run[i].Rows[r][k])
				}
				cells[k] = foldCell(vals)
			}
			o.Add(cells...)
		}
		out[i] = o
	}
	return out, nil
}

// foldNotes is table i's notes over the seeds: a note every run wrote
// alike once, and one that differs once a seed, named.
func foldNotes(runs [][]*Table, i int, seeds []uint64) []string {
	var notes []string
	for n, note := range runs[0][i].Notes {
		same := true
		for _, run := range runs {
			same = same && n < len(run[i].Notes) && run[i].Notes[n] == note
		}
		if same {
			notes = append(notes, note)
			continue
		}
		for k, run := range runs {
			if n < len(run[i].Notes) {
				notes = append(notes, fmt.Sprintf("Seed %d: %s", seeds[k], run[i].Notes[n]))
			}
		}
	}
	return notes
}

// foldCell is one cell over the seeds: its value where all agree, the
// spread of a number that moved, and the distinct values otherwise.
func foldCell(vals []any) any {
	same := true
	for _, v := range vals[1:] {
		same = same && cell(v) == cell(vals[0])
	}
	if same {
		return vals[0]
	}
	nums := make([]float64, 0, len(vals))
	whole := true
	for _, v := range vals {
		x, integer, ok := number(v)
		if !ok {
			var texts []string
			for _, v := range vals {
				if s := cell(v); !slices.Contains(texts, s) {
					texts = append(texts, s)
				}
			}
			return fmt.Sprint(texts)
		}
		if math.IsNaN(x) {
			x = math.Inf(1) // never reached sorts last
		}
		whole = whole && integer
		nums = append(nums, x)
	}
	slices.Sort(nums)
	show := func(x float64) string {
		switch {
		case math.IsInf(x, 1):
			return "never"
		case whole:
			return strconv.FormatFloat(x, 'f', 0, 64)
		}
		return cell(x)
	}
	med := median(nums)
	if whole && med != math.Trunc(med) {
		return fmt.Sprintf("%s-%s (%s)", show(nums[0]), show(nums[len(nums)-1]), cell(med))
	}
	return fmt.Sprintf("%s-%s (%s)", show(nums[0]), show(nums[len(nums)-1]), show(med))
}

// number is v as a float64, if it is a number, and whether it is an
// integer type, a count.
func number(v any) (x float64, integer, ok bool) {
	switch n := v.(type) {
	case float64:
		return n, false, true
	case int:
		return float64(n), true, true
	case int64:
		return float64(n), true, true
	case uint64:
		return float64(n), true, true
	case uint32:
		return float64(n), true, true
	case int32:
		return float64(n), true, true
	}
	return 0, false, false
}
