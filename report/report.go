// Package report lays out the results of mroce sim's scenarios as tables
// and line plots. Tables are written as text, CSV or JSON, and plots as
// SVG or PNG, drawn with gonum.org/v1/plot. Each scenario of package sim
// returns a typed result, and its Tables and Plot functions here lay it
// out, so the scenarios need no plotting code.
package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Table is a scenario's result. It has named columns, rows of values and
// notes printed under it. A value is a number, a string, or nil for none.
type Table struct {
	Title   string   `json:"title"`
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"rows"`
	Notes   []string `json:"notes,omitempty"`
}

// Add appends a row.
func (t *Table) Add(row ...any) { t.Rows = append(t.Rows, row) }

// cell formats one value for text and CSV. Floats get 3 decimals, or
// more when small, and NaN reads "never".
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case float64:
		switch {
		case math.IsNaN(x):
			return "never"
		case x == 0:
			return "0"
		case math.Abs(x) < 0.01:
			return strconv.FormatFloat(x, 'g', 3, 64)
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	return fmt.Sprint(v)
}

// Text writes the table aligned, its title above and notes below.
func (t *Table) Text(w io.Writer) error {
	fmt.Fprintln(w, t.Title)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.Columns, "\t")+"\t")
	for _, r := range t.Rows {
		cells := make([]string, len(r))
		for i, v := range r {
			cells[i] = cell(v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range t.Notes {
		fmt.Fprintln(w, n)
	}
	return nil
}

// CSV writes the columns and rows.
func (t *Table) CSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(t.Columns)
	for _, r := range t.Rows {
		cells := make([]string, len(r))
		for i, v := range r {
			if f, ok := v.(float64); ok && !math.IsNaN(f) {
				cells[i] = strconv.FormatFloat(f, 'g', -1, 64)
			} else {
				cells[i] = cell(v)
			}
		}
		cw.Write(cells)
	}
	cw.Flush()
	return cw.Error()
}

// JSON is the table as JSON, NaN as null.
func (t *Table) JSON() any {
	rows := make([][]any, len(t.Rows))
	for i, r := range t.Rows {
		rows[i] = make([]any, len(r))
		for j, v := range r {
			if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
				v = nil
			}
			rows[i][j] = v
		}
	}
	return struct {
		Title   string   `json:"title"`
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
		Notes   []string `json:"notes,omitempty"`
	}{t.Title, t.Columns, rows, t.Notes}
}

// WriteJSON writes tables as one JSON document.
func WriteJSON(w io.Writer, scenario string, tables []*Table) error {
	doc := struct {
		Scenario string `json:"scenario"`
		Tables   []any  `json:"tables"`
	}{Scenario: scenario}
	for _, t := range tables {
		doc.Tables = append(doc.Tables, t.JSON())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// Series is one line of a plot.
type Series struct {
	Name string
	X, Y []float64
	// Points draws the series as points alone, such as the packets of a
	// time-sequence plot, where a line between them would mean nothing.
	Points bool
	// Color, when set, is the series' color in place of the palette's,
	// which repeats after seven: marks such as losses stay apart from
	// however many series come before them.
	Color color.Color
}

// Plot is a line plot of series.
type Plot struct {
	Title, XLabel, YLabel string
	Series                []Series
	// YMin, YMax fix the Y axis when YMax > YMin.
	YMin, YMax float64
	// LegendBottomLeft puts the legend in the lower left corner rather
	// than the top right.
	LegendBottomLeft bool
	// Below, when set, is a panel drawn under this one over the same X,
	// such as an incast's queue under its senders' rates; it may have one
	// below it in turn. Its Series, YLabel and Y range are its own.
	Below *Plot
}

// CheckPlotPath reports whether Save can write a plot to path. Its
// extension must be .svg or .png.
func CheckPlotPath(path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".svg" && ext != ".png" {
		return fmt.Errorf("report: plot %s: want a .svg or .png file", path)
	}
	return nil
}

// Save draws the plot to path, as SVG or PNG by its extension, with the
// panels below it under it.
func (p *Plot) Save(path string) error {
	if err := CheckPlotPath(path); err != nil {
		return err
	}
	var panels [][]*plot.Plot
	for q := p; q != nil; q = q.Below {
		pl, err := q.panel()
		if err != nil {
			return err
		}
		panels = append(panels, []*plot.Plot{pl})
	}
	// One X for all: the span of every panel's.
	lo, hi := panels[0][0].X.Min, panels[0][0].X.Max
	for _, row := range panels[1:] {
		lo, hi = math.Min(lo, row[0].X.Min), math.Max(hi, row[0].X.Max)
	}
	for _, row := range panels {
		row[0].X.Min, row[0].X.Max = lo, hi
	}
	if len(panels) == 1 {
		return panels[0][0].Save(7*vg.Inch, 4.5*vg.Inch, path)
	}
	height := 1.5*vg.Inch + vg.Length(len(panels))*3*vg.Inch
	c, err := draw.NewFormattedCanvas(7*vg.Inch, height, strings.ToLower(filepath.Ext(path))[1:])
	if err != nil {
		return err
	}
	tiles := plot.Align(panels, draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Points(12)}, draw.New(c))
	for i := range panels {
		panels[i][0].Draw(tiles[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// panel is the plot as one gonum plot.
func (p *Plot) panel() (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text, pl.X.Label.Text, pl.Y.Label.Text = p.Title, p.XLabel, p.YLabel
	pl.Legend.Top, pl.Legend.Left = !p.LegendBottomLeft, p.LegendBottomLeft
	if p.LegendBottomLeft {
		pl.Legend.XOffs, pl.Legend.YOffs = vg.Points(10), vg.Points(10)
	}
	pl.Add(plotter.NewGrid())
	for i, s := range p.Series {
		pts := make(plotter.XYs, 0, len(s.X))
		for k := range s.X {
			if !math.IsNaN(s.Y[k]) && !math.IsInf(s.Y[k], 0) {
				pts = append(pts, plotter.XY{X: s.X[k], Y: s.Y[k]})
			}
		}
		if s.Points {
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return nil, err
			}
			sc.Color, sc.Shape, sc.Radius = plotutil.Color(i), plotutil.Shape(i), vg.Points(1.5)
			if s.Color != nil {
				sc.Color, sc.Radius = s.Color, vg.Points(2)
			}
			pl.Add(sc)
			pl.Legend.Add(s.Name, sc)
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		if s.Color != nil {
			line.Color, points.Color = s.Color, s.Color
		}
		line.Dashes = plotutil.Dashes(i)
		points.Shape = plotutil.Shape(i)
		if len(pts) > 60 {
			points.Radius = 0 // a time series draws the line alone
		}
		pl.Add(line, points)
		pl.Legend.Add(s.Name, line, points)
	}
	if p.YMax > p.YMin {
		pl.Y.Min, pl.Y.Max = p.YMin, p.YMax
	}
	return pl, nil
}
