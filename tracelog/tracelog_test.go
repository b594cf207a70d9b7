package tracelog

import (
	"bytes"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/pathmgr"
)

func events() []engine.TraceEvent {
	us := func(n int) clock.Time { return clock.Time(time.Duration(n) * time.Microsecond) }
	return []engine.TraceEvent{
		{Kind: engine.TraceHint, At: us(0), Conn: 7, Path: -1, Value: math.Inf(1)},
		{Kind: engine.TraceSent, At: us(1), Conn: 7, Path: 0, PSN: 10, DSN: 100, Bytes: 4096},
		{Kind: engine.TraceSent, At: us(1), Conn: 7, Path: 1, PSN: 20, DSN: 101, Bytes: 4096},
		{Kind: engine.TraceAcked, At: us(9), Conn: 7, Path: 0, PSN: 10, DSN: 100, RTT: 8 * time.Microsecond},
		{Kind: engine.TraceLost, At: us(10), Conn: 7, Path: 1, PSN: 20, DSN: 101, Loss: engine.LossGap},
		{Kind: engine.TraceSent, At: us(10), Conn: 7, Path: 0, PSN: 11, DSN: 101, Bytes: 4096, Retransmit: true},
		{Kind: engine.TraceWindow, At: us(10), Conn: 7, Path: 1, Value: 8},
		{Kind: engine.TracePath, At: us(12), Conn: 7, Path: 1, From: pathmgr.Good, To: pathmgr.AssumedBad, Repath: true, SrcPort: 50003, Epoch: 1},
		{Kind: engine.TraceHint, At: us(13), Conn: 7, Path: -1, Value: 1.25e10},
	}
}

// What the writer writes reads back event for event, and sums up as it
// happened: sends, the resend, the acknowledgment with its RTT, the loss
// by cause, the move, the window and the hints.
func TestWriteReadSummarize(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, ev := range events() {
		w.Trace(ev)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	evs, err := Read(&b)
	if err != nil || len(evs) != len(events()) {
		t.Fatalf("%d events read (%v), %d written", len(evs), err, len(events()))
	}
	if evs[0].Number() != math.Inf(1) || evs[8].Number() != 1.25e10 || evs[5].Retransmit != true || evs[4].Loss != "gap" || evs[7].SrcPort != 50003 {
		t.Fatalf("events read back wrong: %+v", evs)
	}
	s := Summarize(evs)
	if len(s) != 2 {
		t.Fatalf("%d paths summed up, want 2", len(s))
	}
	p0, p1 := s[0], s[1]
	if p0.Sent != 2 || p0.Resent != 1 || p0.Acked != 1 || p0.MinRTT != 8*time.Microsecond {
		t.Errorf("path 0: %+v", p0)
	}
	if p1.Sent != 1 || p1.Lost["gap"] != 1 || p1.Repaths != 1 || p1.LastWindow != 8 || strings.Join(p1.States, ",") != "ASSUMED_BAD" {
		t.Errorf("path 1: %+v", p1)
	}
	var out bytes.Buffer
	WriteSummary(&out, evs)
	if !strings.Contains(out.String(), "9 events over 13µs") || !strings.Contains(out.String(), "rate hints: 2, the last 100 Gb/s at 13µs") {
		t.Errorf("summary:\n%s", out.String())
	}
	p := Plot(evs, 0)
	if len(p.Series) != 4 || p.Below == nil { // paths 0 and 1, resent, lost; the windows under them
		t.Fatalf("plot of %d series", len(p.Series))
	}
	// Under it each path's PSNs from its first, path 0's resend at 1 and
	// path 1's loss at 0; then the windows; then path 0's RTT; then the
	// hint as a step: no limit until 13 µs, then 100 Gb/s.
	psn := p.Below
	if psn.YLabel != "PSN (from the path's first)" || len(psn.Series) != 3 || !slices.Equal(psn.Series[0].Y, []float64{0, 1}) ||
		!slices.Equal(psn.Series[1].Y, []float64{0}) || !slices.Equal(psn.Series[2].Y, []float64{0}) || psn.Series[2].Name != "lost" {
		t.Fatalf("PSN panel %+v", psn)
	}
	rtt := p.Below.Below.Below
	if rtt == nil || rtt.YLabel != "RTT (µs)" || len(rtt.Series) != 1 || rtt.Series[0].Name != "path 0" || !slices.Equal(rtt.Series[0].Y, []float64{8}) {
		t.Fatalf("RTT panel %+v", rtt)
	}
	hint := rtt.Below
	if hint == nil || hint.Below != nil || len(hint.Series) != 1 || !slices.Equal(hint.Series[0].X, []float64{0, 13, 13, 13}) ||
		!slices.Equal(hint.Series[0].Y, []float64{math.Inf(1), math.Inf(1), 100, 100}) {
		t.Fatalf("hint panel %+v", hint)
	}
	if q := Plot(evs[1:8], 0); q.Below == nil || q.Below.Below.Below == nil || q.Below.Below.Below.Below != nil {
		t.Fatal("a trace with no hint has a hint panel, or lacks another")
	}
	if err := p.Save(filepath.Join(t.TempDir(), "t.svg")); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(strings.NewReader("{\"kind\":\"sent\"}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a bad line: %v", err)
	}
}

// Tracing allocates nothing per event once its buffer has grown.
func TestTraceAllocatesNothing(t *testing.T) {
	w := NewWriter(io.Discard)
	evs := events()
	w.Trace(evs[1])
	if n := testing.AllocsPerRun(1000, func() {
		for _, ev := range evs {
			w.Trace(ev)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per round of events", n)
	}
}
