package xferstats

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
)

func path(i int, bytes, retx, ce uint64, srtt time.Duration) endpoint.PathTelemetry {
	p := endpoint.PathTelemetry{Path: i, Plane: i % 2, SrcPort: uint16(50000 + i)}
	p.BytesSent, p.PacketsSent, p.Retransmits, p.CEMarks = bytes, bytes/1000, retx, ce
	if srtt > 0 {
		p.RTT = endpoint.RTTEstimate{SRTT: srtt, Samples: 1}
	}
	return p
}

// Totals adds the counters and averages only the paths with a sample.
// PathRows gives each path its share of the bytes.
func TestTotalsAndRows(t *testing.T) {
	tel := []endpoint.PathTelemetry{path(0, 3000, 2, 1, 100*time.Microsecond), path(1, 1000, 1, 0, 300*time.Microsecond), path(2, 0, 0, 0, 0)}
	retx, ce, rtt := Totals(tel)
	if retx != 3 || ce != 1 || rtt != 200 {
		t.Errorf("totals %d %d %v", retx, ce, rtt)
	}
	rows := PathRows(tel)
	if len(rows) != 3 || rows[0].Share != 0.75 || rows[1].Share != 0.25 || rows[2].Share != 0 || rows[1].SourcePort != 50001 {
		t.Errorf("%+v", rows)
	}
	if rows := PathRows([]endpoint.PathTelemetry{path(0, 0, 0, 0, 0)}); rows[0].Share != 0 {
		t.Errorf("no bytes at all: %+v", rows)
	}
}

// Intervals follow one another, each with the bytes and counters since the
// last. Before any progress Tick closes none.
func TestMeterIntervals(t *testing.T) {
	var m Meter
	if _, ok := m.Tick(nil); ok {
		t.Fatal("an interval before any progress")
	}
	if b, _ := json.Marshal(m.Intervals()); string(b) != "[]" {
		t.Errorf("no intervals print as %s, want []", b)
	}
	m.Progress(1000)
	a := m.TickAt([]endpoint.PathTelemetry{path(0, 1000, 2, 1, 0)}, 0.5)
	m.Progress(4000)
	b := m.TickAt([]endpoint.PathTelemetry{path(0, 4000, 5, 1, 0)}, 1.5)
	if a.Start != 0 || a.End != 0.5 || a.Bytes != 1000 || a.Retransmits != 2 || a.CEMarks != 1 || math.Abs(a.Gbps-16e-6) > 1e-12 {
		t.Errorf("first %+v", a)
	}
	if b.Start != 0.5 || b.End != 1.5 || b.Bytes != 3000 || b.Retransmits != 3 || b.CEMarks != 0 {
		t.Errorf("second %+v", b)
	}
	if iv, ok := m.Tick(nil); !ok || iv.Bytes != 0 {
		t.Errorf("a tick by the wall clock: %+v %v", iv, ok)
	}
	if len(m.Intervals()) != 3 || m.Bytes() != 4000 {
		t.Errorf("%d intervals, %d bytes", len(m.Intervals()), m.Bytes())
	}
	s := m.Summary(time.Second, "ab", true, []endpoint.PathTelemetry{path(0, 4000, 5, 1, 0)})
	if s.Bytes != 4000 || s.Gbps != 32e-6 || s.Retransmits != 5 || s.CEMarks != 1 || !s.Verified || s.SHA256 != "ab" {
		t.Errorf("summary %+v", s)
	}
}

// The report's JSON keeps the field names scripts read.
func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(Report{Role: "sender", Intervals: []Interval{{}}, End: &Summary{}, PerPath: []PathRow{{}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"role"`, `"intervals"`, `"rtt_us"`, `"end"`, `"verified"`, `"paths_detail"`, `"source_port"`, `"ecn_pct"`, `"tail_probes"`} {
		if !strings.Contains(string(b), name) {
			t.Errorf("no %s in %s", name, b)
		}
	}
}
