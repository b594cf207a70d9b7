package conformance

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"path/filepath"
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

// Passed reports whether every case passed.
func (r Report) Passed() bool {
	for _, x := range r.Results {
		if x.Result != "pass" {
			return false
		}
	}
	return true
}

// Text writes the results as a table: a row per case.
func (r Report) Text(w io.Writer) error {
	fmt.Fprintf(w, "conformance of %s (%s): packet-level cases\n", r.Implementation, r.Target)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tresult\tspec\tdetails")
	pass := 0
	for _, x := range r.Results {
		mark := "PASS"
		if x.Result != "pass" {
			mark = "FAIL"
		} else {
			pass++
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
<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #999;padding:4px 8px;text-align:left}
.pass{background:#bfe8bf}.fail{background:#f4b6b6}</style></head><body>
<h1>Conformance of {{.Implementation}}</h1>
<p>Target {{.Target}}, started {{.Started.Format "2006-01-02 15:04:05 MST"}}. The cases and their pass criteria are in docs/conformance.md.</p>
<table><tr><th>case</th><th>result</th><th>spec</th><th>details</th><th>scenario</th><th>records</th></tr>
{{range .Results}}<tr><td>{{.Case}}</td><td class="{{.Result}}">{{.Result}}</td><td>{{.Spec}}</td><td>{{.Details}}</td><td>{{.Scenario}}{{if .Seed}}, seed {{.Seed}}{{end}}</td>
<td>{{if .Logs}}<a href="{{.Logs}}">logs</a>{{end}} {{if .Pcap}}<a href="{{.Pcap}}">pcap</a>{{end}}</td></tr>
{{end}}</table></body></html>
`))

// HTML writes the results as a static page, a cell per case coloured by
// its result, linking each runner case's logs and capture (paths as they
// are in the results: RelativeTo makes them relative to the page).
func (r Report) HTML(w io.Writer) error { return page.Execute(w, r) }

// RelativeTo returns the report with every result's Logs and Pcap made
// relative to dir (where an HTML page of it will be), when they can be.
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
