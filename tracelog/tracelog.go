// Package tracelog writes the engine's trace events (engine.Tracer) as JSON
// lines, one event a line, in the manner of QUIC's qlog, reads them back,
// sums them up and draws them: how the sender decided, over time.
package tracelog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/report"
)

// Writer is an engine.Tracer that writes each event as one JSON line. Its
// Trace builds the line in a buffer it keeps, so it allocates nothing per
// event; the engine calls it on its goroutine, and Flush after the engine
// has stopped.
type Writer struct {
	w   *bufio.Writer
	buf []byte
	err error
}

// NewWriter writes the events to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriterSize(w, 1<<16)} }

// Trace writes one event. The members are those of Event.
func (t *Writer) Trace(ev engine.TraceEvent) {
	if t.err != nil {
		return
	}
	b := t.buf[:0]
	b = append(b, `{"t_ns":`...)
	b = strconv.AppendInt(b, int64(ev.At), 10)
	b = append(b, `,"kind":"`...)
	b = append(b, ev.Kind.String()...)
	b = append(b, `","conn":`...)
	b = strconv.AppendUint(b, uint64(ev.Conn), 10)
	b = append(b, `,"path":`...)
	b = strconv.AppendInt(b, int64(ev.Path), 10)
	switch ev.Kind {
	case engine.TraceSent, engine.TraceAcked, engine.TraceLost:
		b = append(b, `,"psn":`...)
		b = strconv.AppendUint(b, uint64(ev.PSN), 10)
		b = append(b, `,"dsn":`...)
		b = strconv.AppendUint(b, uint64(ev.DSN), 10)
	}
	switch ev.Kind {
	case engine.TraceSent:
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, int64(ev.Bytes), 10)
		b = append(b, `,"retransmit":`...)
		b = strconv.AppendBool(b, ev.Retransmit)
		b = append(b, `,"probe":`...)
		b = strconv.AppendBool(b, ev.Probe)
	case engine.TraceAcked:
		b = append(b, `,"rtt_ns":`...)
		b = strconv.AppendInt(b, int64(ev.RTT), 10)
	case engine.TraceLost:
		b = append(b, `,"loss":"`...)
		b = append(b, ev.Loss.String()...)
		b = append(b, '"')
	case engine.TracePath, engine.TraceTimer:
		b = append(b, `,"from":"`...)
		b = append(b, ev.From.String()...)
		b = append(b, `","to":"`...)
		b = append(b, ev.To.String()...)
		b = append(b, '"')
		if ev.Repath {
			b = append(b, `,"repath":true,"src_port":`...)
			b = strconv.AppendUint(b, uint64(ev.SrcPort), 10)
			b = append(b, `,"epoch":`...)
			b = strconv.AppendUint(b, uint64(ev.Epoch), 10)
		}
	case engine.TraceWindow, engine.TraceHint:
		b = append(b, `,"value":`...)
		if math.IsInf(ev.Value, 1) {
			b = append(b, `"inf"`...) // no limit; JSON has no infinity
		} else {
			b = strconv.AppendFloat(b, ev.Value, 'g', -1, 64)
		}
	}
	b = append(b, "}\n"...)
	t.buf = b
	_, t.err = t.w.Write(b)
}

// Flush writes what is buffered and reports the first error.
func (t *Writer) Flush() error {
	if t.err != nil {
		return t.err
	}
	return t.w.Flush()
}

// Event is one line of a trace as it is read back.
type Event struct {
	TNs        int64  `json:"t_ns"`
	Kind       string `json:"kind"`
	Conn       uint32 `json:"conn"`
	Path       int    `json:"path"`
	PSN        uint32 `json:"psn"`
	DSN        uint32 `json:"dsn"`
	Bytes      int    `json:"bytes"`
	Retransmit bool   `json:"retransmit"`
	Probe      bool   `json:"probe"`
	RTTNs      int64  `json:"rtt_ns"`
	Loss       string `json:"loss"`
	From, To   string
	Repath     bool            `json:"repath"`
	SrcPort    uint16          `json:"src_port"`
	Epoch      uint8           `json:"epoch"`
	Value      json.RawMessage `json:"value"`
}

// At is the event's time.
func (e Event) At() time.Duration { return time.Duration(e.TNs) }

// Number is Value as a number, +Inf for "inf".
func (e Event) Number() float64 {
	if string(e.Value) == `"inf"` {
		return math.Inf(1)
	}
	v, _ := strconv.ParseFloat(string(e.Value), 64)
	return v
}

// Read reads a trace's events. A line that is not an event is an error
// that names it.
func Read(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Kind == "" {
			return out, fmt.Errorf("tracelog: line %d is not an event: %.80q", line, sc.Text())
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// PathSummary is what one path of a connection did over a trace.
type PathSummary struct {
	Conn                    uint32
	Path                    int
	Sent, Resent, Probes    int
	Acked                   int
	Lost                    map[string]int // by cause
	Timeouts, Repaths       int
	States                  []string // the states it went through, in order
	MinRTT, MeanRTT, MaxRTT time.Duration
	LastWindow              float64
}

// Summarize sums a trace up per connection and path, in their order.
func Summarize(evs []Event) []PathSummary {
	type key struct {
		conn uint32
		path int
	}
	byKey := map[key]*PathSummary{}
	get := func(e Event) *PathSummary {
		k := key{e.Conn, e.Path}
		s := byKey[k]
		if s == nil {
			s = &PathSummary{Conn: e.Conn, Path: e.Path, Lost: map[string]int{}}
			byKey[k] = s
		}
		return s
	}
	for _, e := range evs {
		if e.Path < 0 {
			continue // a connection's event: the hint
		}
		s := get(e)
		switch e.Kind {
		case engine.TraceSent.String():
			s.Sent++
			if e.Retransmit {
				s.Resent++
			}
			if e.Probe {
				s.Probes++
			}
		case engine.TraceAcked.String():
			s.Acked++
			rtt := time.Duration(e.RTTNs)
			if s.Acked == 1 || rtt < s.MinRTT {
				s.MinRTT = rtt
			}
			s.MaxRTT = max(s.MaxRTT, rtt)
			s.MeanRTT += rtt // the sum until every event is read
		case engine.TraceLost.String():
			s.Lost[e.Loss]++
			if e.Loss == engine.LossTimeout.String() {
				s.Timeouts++
			}
		case engine.TracePath.String():
			if e.Repath {
				s.Repaths++
			}
			if len(s.States) == 0 || s.States[len(s.States)-1] != e.To {
				s.States = append(s.States, e.To)
			}
		case engine.TraceWindow.String():
			s.LastWindow = e.Number()
		}
	}
	out := make([]PathSummary, 0, len(byKey))
	for _, s := range byKey {
		if s.Acked > 0 {
			s.MeanRTT /= time.Duration(s.Acked)
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Conn != out[j].Conn {
			return out[i].Conn < out[j].Conn
		}
		return out[i].Path < out[j].Path
	})
	return out
}

// WriteSummary prints the summary as a table.
func WriteSummary(w io.Writer, evs []Event) {
	if len(evs) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	span := evs[len(evs)-1].At() - evs[0].At()
	fmt.Fprintf(w, "%d events over %v\n", len(evs), span)
	fmt.Fprintf(w, "%8s %4s %8s %7s %6s %8s %6s %8s %7s %10s %10s %10s %7s  %s\n", "conn", "path", "sent", "resent", "probes", "acked",
		"lost", "timeouts", "repaths", "min RTT", "mean RTT", "max RTT", "window", "states")
	for _, s := range Summarize(evs) {
		lost := 0
		for _, n := range s.Lost {
			lost += n
		}
		fmt.Fprintf(w, "%08x %4d %8d %7d %6d %8d %6d %8d %7d %10v %10v %10v %7.1f  %s\n", s.Conn, s.Path, s.Sent, s.Resent, s.Probes, s.Acked,
			lost, s.Timeouts, s.Repaths, s.MinRTT, s.MeanRTT, s.MaxRTT, s.LastWindow, strings.Join(s.States, " > "))
	}
	hints, last := 0, Event{}
	for _, e := range evs {
		if e.Kind == engine.TraceHint.String() {
			hints, last = hints+1, e
		}
	}
	if hints > 0 {
		fmt.Fprintf(w, "rate hints: %d, the last %.3g Gb/s at %v\n", hints, last.Number()*8/1e9, last.At())
	}
}

// Plot draws the trace of connection conn, or of the first connection
// that sent data when conn is 0, in panels over one time axis: each
// path's DSNs as it sent them, first sends and resends apart, with the
// losses marked; under it each path's own PSNs, counted from its first,
// with its losses (spec section 6.2); each path's window; each path's RTT
// as its ACKs measured it; and, when the peer sent any, the rate hint the
// sender followed (spec sections 5.5 and 6.6).
func Plot(evs []Event, conn uint32) *report.Plot {
	if conn == 0 {
		for _, e := range evs {
			if e.Kind == engine.TraceSent.String() {
				conn = e.Conn
				break
			}
		}
	}
	var first int64
	if len(evs) > 0 {
		first = evs[0].TNs
	}
	us := func(e Event) float64 { return float64(e.TNs-first) / 1e3 }
	var base uint32
	haveBase := false
	sent, psns, windows, rtts := perPath{}, perPath{}, perPath{}, perPath{}
	firstPSN := map[int]uint32{}
	psnOf := func(e Event) float64 {
		if _, ok := firstPSN[e.Path]; !ok {
			firstPSN[e.Path] = e.PSN
		}
		return float64(e.PSN - firstPSN[e.Path])
	}
	lostPSN := &report.Series{Name: "lost", Points: true, Color: color.Black}
	resent := &report.Series{Name: "resent", Points: true, Color: color.Gray{Y: 0x60}}
	lost := &report.Series{Name: "lost", Points: true, Color: color.Black}
	hint := &report.Series{Name: "rate hint"}
	var last float64
	for _, e := range evs {
		if e.Conn != conn {
			continue
		}
		last = us(e)
		switch e.Kind {
		case engine.TraceSent.String():
			if !haveBase {
				base, haveBase = e.DSN, true
			}
			y := float64(e.DSN - base)
			psns.add(e.Path, true, us(e), psnOf(e))
			if e.Retransmit {
				resent.X, resent.Y = append(resent.X, us(e)), append(resent.Y, y)
				continue
			}
			sent.add(e.Path, true, us(e), y)
		case engine.TraceLost.String():
			if haveBase {
				lost.X, lost.Y = append(lost.X, us(e)), append(lost.Y, float64(e.DSN-base))
			}
			lostPSN.X, lostPSN.Y = append(lostPSN.X, us(e)), append(lostPSN.Y, psnOf(e))
		case engine.TraceAcked.String():
			if e.RTTNs > 0 {
				rtts.add(e.Path, false, us(e), float64(e.RTTNs)/1e3)
			}
		case engine.TraceWindow.String():
			windows.add(e.Path, false, us(e), e.Number())
		case engine.TraceHint.String():
			// A hint holds until the next: a step. No limit is left out of
			// the line.
			gbps := e.Number() * 8 / 1e9
			if n := len(hint.Y); n > 0 {
				hint.X, hint.Y = append(hint.X, us(e)), append(hint.Y, hint.Y[n-1])
			}
			hint.X, hint.Y = append(hint.X, us(e)), append(hint.Y, gbps)
		}
	}
	if n := len(hint.Y); n > 0 {
		hint.X, hint.Y = append(hint.X, last), append(hint.Y, hint.Y[n-1])
	}
	top := &report.Plot{Title: fmt.Sprintf("Connection %08x: data sequence over time", conn), XLabel: "time (µs)", YLabel: "DSN (from the first)",
		Series: append(sent.series(), *resent, *lost)}
	bottom := top
	below := func(p *report.Plot) {
		if len(p.Series) > 0 {
			bottom.Below = p
			bottom = p
		}
	}
	if len(psns) > 0 {
		below(&report.Plot{XLabel: "time (µs)", YLabel: "PSN (from the path's first)", Series: append(psns.series(), *lostPSN)})
	}
	below(&report.Plot{XLabel: "time (µs)", YLabel: "window (packets)", Series: windows.series()})
	below(&report.Plot{XLabel: "time (µs)", YLabel: "RTT (µs)", Series: rtts.series()})
	if slices.ContainsFunc(hint.Y, func(v float64) bool { return !math.IsInf(v, 0) }) {
		below(&report.Plot{XLabel: "time (µs)", YLabel: "rate hint (Gb/s)", Series: []report.Series{*hint}})
	}
	return top
}

// perPath is a series for each path, by path number.
type perPath map[int]*report.Series

func (pp perPath) add(path int, points bool, x, y float64) {
	s := pp[path]
	if s == nil {
		s = &report.Series{Name: fmt.Sprintf("path %d", path), Points: points}
		pp[path] = s
	}
	s.X, s.Y = append(s.X, x), append(s.Y, y)
}

// series is the paths' series in the order of their numbers.
func (pp perPath) series() []report.Series {
	var out []report.Series
	for _, p := range slices.Sorted(maps.Keys(pp)) {
		out = append(out, *pp[p])
	}
	return out
}

var _ engine.Tracer = (*Writer)(nil)
