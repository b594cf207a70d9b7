package conformance

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is a run's results with what it ran against.
type Report struct {
	Implementation string    `json:"implementation"`
	Target         string    `json:"target"`
	Started        time.Time `json:"started"`
	Results        []Result  `json:"results"`
}

// Passed reports whether no case failed and at least one passed. An
// unsupported case is not a failure, since the implementation said it
// does not do it. A run in which nothing passed tested nothing, though,
// as when a wrapper's command is not found, which a shell also reports as
// 127.
func (r Report) Passed() bool { return Cell{Results: r.Results}.Class() == "pass" }

// Cell is one pair's results in the interop matrix.
type Cell struct {
	Requester, Responder string
	Results              []Result
}

// Summary says how many of the cell's cases passed, and names the others.
func (c Cell) Summary() string {
	pass := 0
	var failed, unsupported []string
	for _, x := range c.Results {
		switch x.Result {
		case "pass":
			pass++
		case "unsupported":
			unsupported = append(unsupported, x.Case)
		default:
			failed = append(failed, x.Case)
		}
	}
	s := fmt.Sprintf("%d/%d", pass, len(c.Results))
	if len(failed) > 0 {
		s += " fail: " + strings.Join(failed, ",")
	}
	if len(unsupported) > 0 {
		s += " unsupported: " + strings.Join(unsupported, ",")
	}
	return s
}

// Class is the cell's colour on the HTML page. It is fail if a case
// failed, unsupported if none passed, and pass otherwise.
func (c Cell) Class() string {
	class := "unsupported"
	for _, x := range c.Results {
		switch x.Result {
		case "fail":
			return "fail"
		case "pass":
			class = "pass"
		}
	}
	return class
}

// InteropMatrix is the runner's results by pair, a row per requester and
// a column per responder, each in the order it first appears.
type InteropMatrix struct {
	Requesters, Responders []string
	Cells                  [][]Cell // [row][column]
}

// Matrix arranges the results by pair. It is empty unless the results
// name more than one pair. One pair is a column of cases, which the case
// table shows.
func (r Report) Matrix() InteropMatrix {
	var requesters, responders []string
	var cells [][]Cell
	index := func(list *[]string, name string) int {
		if i := slices.Index(*list, name); i >= 0 {
			return i
		}
		*list = append(*list, name)
		return len(*list) - 1
	}
	type at struct{ row, col int }
	found := map[at][]Result{}
	for _, x := range r.Results {
		if x.Requester == "" {
			continue
		}
		k := at{index(&requesters, x.Requester), index(&responders, x.Responder)}
		found[k] = append(found[k], x)
	}
	for i, req := range requesters {
		cells = append(cells, nil)
		for j, resp := range responders {
			cells[i] = append(cells[i], Cell{req, resp, found[at{i, j}]})
		}
	}
	if len(requesters)*len(responders) < 2 {
		return InteropMatrix{}
	}
	return InteropMatrix{requesters, responders, cells}
}

// Text writes the results as a table, a row per case; for the runner's
// cases the interop matrix comes first, a row per requester and a column
// per responder.
func (r Report) Text(w io.Writer) error {
	fmt.Fprintf(w, "conformance of %s (%s)\n", r.Implementation, r.Target)
	m := r.Matrix()
	requesters, responders, cells := m.Requesters, m.Responders, m.Cells
	pairs := len(cells) > 0
	if pairs {
		fmt.Fprintln(w, "interop matrix: a row per requester, a column per responder; cases passed of those run")
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "requester \\ responder\t%s\n", strings.Join(responders, "\t"))
		for i, req := range requesters {
			row := []string{req}
			for _, c := range cells[i] {
				row = append(row, c.Summary())
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	if pairs {
		fmt.Fprintln(tw, "requester\tresponder\tcase\tresult\tspec\tdetails")
	} else {
		fmt.Fprintln(tw, "case\tresult\tspec\tdetails")
	}
	pass := 0
	for _, x := range r.Results {
		mark := strings.ToUpper(x.Result)
		if x.Result == "pass" {
			pass++
		}
		if pairs {
			fmt.Fprintf(tw, "%s\t%s\t", x.Requester, x.Responder)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Case, mark, x.Spec, x.Details)
	}
	tw.Flush()
	_, err := fmt.Fprintf(w, "%d of %d passed\n", pass, len(r.Results))
	return err
}

// JSON writes the report.
func (r Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>mroce conformance: {{.Implementation}}</title>
<style>body{font-family:sans-serif}table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #999;padding:4px 8px;text-align:left;vertical-align:top}
.pass{background:#bfe8bf}.fail{background:#f4b6b6}.unsupported{background:#ddd}a.pass,a.fail,a.unsupported{display:inline-block;margin:1px;padding:0 3px;color:#000}</style></head><body>
<h1>Conformance of {{.Implementation}}</h1>
<p>Target {{.Target}}, started {{.Started.Format "2006-01-02 15:04:05 MST"}}. The cases and their pass criteria are in docs/conformance.md.</p>
{{$m := .Matrix}}{{if $m.Cells}}<h2>Interop matrix</h2>
<p>A row per requester, a column per responder; each case links to its logs, coloured by its result.</p>
<table><tr><th>requester \ responder</th>{{range $m.Responders}}<th>{{.}}</th>{{end}}</tr>
{{range $i, $row := $m.Cells}}<tr><th>{{index $m.Requesters $i}}</th>{{range $row}}<td class="{{.Class}}">{{.Summary}}<br>{{range .Results}}<a class="{{.Result}}" href="{{.Logs}}" title="{{.Result}} {{.Details}}">{{.Case}}</a> {{end}}</td>{{end}}</tr>
{{end}}</table>{{end}}
<h2>Cases</h2>
<table><tr>{{if $m.Cells}}<th>requester</th><th>responder</th>{{end}}<th>case</th><th>result</th><th>spec</th><th>details</th><th>scenario</th><th>records</th></tr>
{{range .Results}}<tr>{{if $m.Cells}}<td>{{.Requester}}</td><td>{{.Responder}}</td>{{end}}<td>{{.Case}}</td><td class="{{.Result}}">{{.Result}}</td><td>{{.Spec}}</td><td>{{.Details}}</td><td>{{.Scenario}}{{if .Seed}}, seed {{.Seed}}{{end}}</td>
<td>{{if .Logs}}<a href="{{.Logs}}">logs</a>{{end}} {{if .Pcap}}<a href="{{.Pcap}}">pcap</a>{{end}}</td></tr>
{{end}}</table></body></html>
`))

// HTML writes the results as a static page, a cell per case coloured by
// its result. It links each runner case's logs and capture by the paths
// in the results, which RelativeTo makes relative to the page.
func (r Report) HTML(w io.Writer) error { return page.Execute(w, r) }

// RelativeTo returns the report with every result's Logs and Pcap made
// relative to dir, where an HTML page of it will be, when they can be.
func (r Report) RelativeTo(dir string) Report {
	out := r
	out.Results = append([]Result(nil), r.Results...)
	for i := range out.Results {
		for _, p := range []*string{&out.Results[i].Logs, &out.Results[i].Pcap} {
			if *p == "" {
				continue
			}
			abs, err := filepath.Abs(*p)
			if err != nil {
				continue
			}
			if rel, err := filepath.Rel(dir, abs); err == nil {
				*p = filepath.ToSlash(rel)
			}
		}
	}
	return out
}
