package metrics

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mroce/mroce/endpoint"
)

func telemetry() []endpoint.PathTelemetry {
	return []endpoint.PathTelemetry{
		{Path: 0, Plane: 0, SrcPort: 50001, State: endpoint.PathGood, Window: 16, InFlight: 5,
			RTT:          endpoint.RTTEstimate{SRTT: 120 * time.Microsecond, Min: 100 * time.Microsecond, Samples: 9},
			PathCounters: endpoint.PathCounters{PacketsSent: 100, BytesSent: 409600, Retransmits: 2, CEMarks: 7, Acked: 98}},
		{Path: 1, Plane: 1, SrcPort: 50002, State: endpoint.PathAssumedBad, PathCounters: endpoint.PathCounters{Timeouts: 1, Repaths: 1}},
	}
}

// conn is a connection as the collector reads it, counting the reads.
type conn struct {
	calls int
	tel   []endpoint.PathTelemetry
}

func (c *conn) Telemetry() []endpoint.PathTelemetry { c.calls++; return c.tel }
func (c *conn) Received() endpoint.ReceiveCounters {
	return endpoint.ReceiveCounters{Packets: 40, Bytes: 163840, Duplicates: 1, CEMarks: 3, AcksSent: 12, Nacks: 2}
}

// The collector exports each path's counters and gauges with its labels,
// read at scrape time, and what the connection's receive side counted, and
// stops when the connection is removed. A path keeps its series when it
// moves to a new source port: the port is a value.
func TestCollectorExportsPaths(t *testing.T) {
	c := NewCollector()
	src := &conn{tel: telemetry()}
	c.Add("peer", src)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP mroce_path_packets_sent_total Packets a path sent, retransmissions included.
# TYPE mroce_path_packets_sent_total counter
mroce_path_packets_sent_total{conn="peer",path="0",plane="0"} 100
mroce_path_packets_sent_total{conn="peer",path="1",plane="1"} 0
# HELP mroce_path_ce_marks_total CE marks the receiver reported for a path's packets.
# TYPE mroce_path_ce_marks_total counter
mroce_path_ce_marks_total{conn="peer",path="0",plane="0"} 7
mroce_path_ce_marks_total{conn="peer",path="1",plane="1"} 0
# HELP mroce_path_rtt_seconds A path's smoothed round-trip time.
# TYPE mroce_path_rtt_seconds gauge
mroce_path_rtt_seconds{conn="peer",path="0",plane="0"} 0.00012
mroce_path_rtt_seconds{conn="peer",path="1",plane="1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mroce_path_packets_sent_total", "mroce_path_ce_marks_total", "mroce_path_rtt_seconds"); err != nil {
		t.Fatal(err)
	}
	if src.calls == 0 {
		t.Fatal("the telemetry was not read at scrape time")
	}
	// The state gauge is 1 for the present state only.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`mroce_path_state{conn="peer",path="1",plane="1",state="ASSUMED_BAD"} 1`,
		`mroce_path_state{conn="peer",path="1",plane="1",state="GOOD"} 0`,
		`mroce_path_repaths_total{conn="peer",path="1",plane="1"} 1`,
		`mroce_connection_paths{conn="peer"} 2`,
		`mroce_path_utilization_ratio{conn="peer",path="0",plane="0"} 0.3125`,
		`mroce_path_source_port{conn="peer",path="1",plane="1"} 50002`,
		`mroce_connection_received_bytes_total{conn="peer"} 163840`,
		`mroce_connection_received_ce_marks_total{conn="peer"} 3`,
		`mroce_connection_nacks_sent_total{conn="peer"} 2`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("missing %s", line)
		}
	}
	c.Remove("peer")
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("%d metrics after the connection was removed", n)
	}
}

// A path that moves to a new source port keeps its series.
func TestPathKeepsItsSeriesWhenItMoves(t *testing.T) {
	c := NewCollector()
	src := &conn{tel: telemetry()}
	c.Add("peer", src)
	src.tel[1].SrcPort, src.tel[1].Repaths = 50099, 2
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP mroce_path_source_port The UDP source port a path sends from now.
# TYPE mroce_path_source_port gauge
mroce_path_source_port{conn="peer",path="0",plane="0"} 50001
mroce_path_source_port{conn="peer",path="1",plane="1"} 50099
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mroce_path_source_port"); err != nil {
		t.Fatal(err)
	}
	// No series is keyed by the port, so none starts again when it moves.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source_port" {
					t.Fatalf("%s has a source_port label", f.GetName())
				}
			}
		}
	}
}

// Once frozen, a collector exports what its connections were then, and
// reads them no more.
func TestFreezeKeepsTheLastFigures(t *testing.T) {
	c := NewCollector()
	src := &conn{tel: telemetry()}
	c.Add("peer", src)
	c.Freeze()
	calls := src.calls
	src.tel = nil
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP mroce_connection_paths The paths of a connection.
# TYPE mroce_connection_paths gauge
mroce_connection_paths{conn="peer"} 2
`), "mroce_connection_paths"); err != nil {
		t.Fatal(err)
	}
	if src.calls != calls {
		t.Fatal("a frozen connection was read again")
	}
}

// Every query of the Grafana dashboard in tools/grafana names series the
// collector exports, and every series it exports has a panel.
func TestDashboardQueriesExportedSeries(t *testing.T) {
	b, err := os.ReadFile("../tools/grafana/mroce.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, d := range descs {
		name := regexp.MustCompile(`fqName: "([a-z_]+)"`).FindStringSubmatch(d.String())
		if name == nil {
			t.Fatalf("no name in %s", d)
		}
		exported[name[1]] = true
	}
	series := regexp.MustCompile(`mroce_[a-z_]+`)
	queried := map[string]bool{}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
		}
	}
	for _, e := range exprs {
		for _, name := range series.FindAllString(e, -1) {
			if !exported[name] {
				t.Errorf("the dashboard queries %s, which mroce does not export: %s", name, e)
			}
			queried[name] = true
		}
	}
	for name := range exported {
		if !queried[name] {
			t.Errorf("%s has no panel", name)
		}
	}
}
