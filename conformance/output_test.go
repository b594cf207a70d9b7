package conformance

import (
	"strings"
	"testing"
)

// The matrix arranges runner results by pair, a row per requester and a
// column per responder; a cell names its failed and unsupported cases; an
// unsupported case does not fail the report, a failed one does.
func TestReportMatrix(t *testing.T) {
	res := func(req, resp, c, r string) Result {
		return Result{Requester: req, Responder: resp, Case: c, Result: r, Spec: "runner"}
	}
	rep := Report{Implementation: "a, b", Target: "test", Results: []Result{
		res("a", "a", "write", "pass"), res("a", "a", "ecn", "pass"),
		res("a", "b", "write", "pass"), res("a", "b", "ecn", "fail"),
		res("b", "a", "write", "unsupported"), res("b", "a", "ecn", "pass"),
		res("b", "b", "write", "unsupported"), res("b", "b", "ecn", "fail"),
	}}
	m := rep.Matrix()
	if strings.Join(m.Requesters, ",") != "a,b" || strings.Join(m.Responders, ",") != "a,b" {
		t.Fatalf("rows %v, columns %v", m.Requesters, m.Responders)
	}
	want := [][]string{{"2/2", "1/2 fail: ecn"}, {"1/2 unsupported: write", "0/2 fail: ecn unsupported: write"}}
	for i := range want {
		for j := range want[i] {
			if got := m.Cells[i][j].Summary(); got != want[i][j] {
				t.Errorf("cell %s -> %s: %q, want %q", m.Requesters[i], m.Responders[j], got, want[i][j])
			}
		}
	}
	if m.Cells[1][0].Class() != "pass" || m.Cells[0][1].Class() != "fail" {
		t.Errorf("classes %s, %s", m.Cells[1][0].Class(), m.Cells[0][1].Class())
	}
	if rep.Passed() {
		t.Error("a report with failed cases passed")
	}
	var text strings.Builder
	if err := rep.Text(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "1/2 fail: ecn") || !strings.Contains(text.String(), "b          a          write  UNSUPPORTED") {
		t.Errorf("the text:\n%s", text.String())
	}
	only := Report{Results: []Result{res("a", "b", "write", "pass"), res("a", "b", "ecn", "unsupported")}}
	if !only.Passed() {
		t.Error("an unsupported case failed the report")
	}
	if len(only.Matrix().Cells) != 0 {
		t.Error("one pair made a matrix")
	}
	nothing := Report{Results: []Result{res("a", "b", "write", "unsupported")}}
	if nothing.Passed() {
		t.Error("a report in which nothing passed passed")
	}
	none := Report{Results: []Result{res("a", "a", "write", "pass"), res("a", "b", "write", "unsupported")}}
	if c := none.Matrix().Cells[0][1]; c.Class() != "unsupported" {
		t.Errorf("a cell with nothing passed is %q", c.Class())
	}
	if probe := (Report{Results: []Result{{Case: "handshake", Result: "pass"}}}); len(probe.Matrix().Cells) != 0 {
		t.Error("packet-level results made a matrix")
	}
}
