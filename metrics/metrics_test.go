package metrics

import (
	"io"
	"net/http/httptest"
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

// The collector exports each path's counters and gauges with its labels,
// read at scrape time, and stops when the connection is removed.
func TestCollectorExportsPaths(t *testing.T) {
	c := NewCollector()
	calls := 0
	c.Add("peer", func() []endpoint.PathTelemetry { calls++; return telemetry() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP mroce_path_packets_sent_total Packets a path sent, retransmissions included.
# TYPE mroce_path_packets_sent_total counter
mroce_path_packets_sent_total{conn="peer",path="0",plane="0",source_port="50001"} 100
mroce_path_packets_sent_total{conn="peer",path="1",plane="1",source_port="50002"} 0
# HELP mroce_path_ce_marks_total CE marks the receiver reported for a path's packets.
# TYPE mroce_path_ce_marks_total counter
mroce_path_ce_marks_total{conn="peer",path="0",plane="0",source_port="50001"} 7
mroce_path_ce_marks_total{conn="peer",path="1",plane="1",source_port="50002"} 0
# HELP mroce_path_rtt_seconds A path's smoothed round-trip time.
# TYPE mroce_path_rtt_seconds gauge
mroce_path_rtt_seconds{conn="peer",path="0",plane="0",source_port="50001"} 0.00012
mroce_path_rtt_seconds{conn="peer",path="1",plane="1",source_port="50002"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mroce_path_packets_sent_total", "mroce_path_ce_marks_total", "mroce_path_rtt_seconds"); err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
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
		`mroce_path_state{conn="peer",path="1",plane="1",source_port="50002",state="ASSUMED_BAD"} 1`,
		`mroce_path_state{conn="peer",path="1",plane="1",source_port="50002",state="GOOD"} 0`,
		`mroce_path_repaths_total{conn="peer",path="1",plane="1",source_port="50002"} 1`,
		`mroce_connection_paths{conn="peer"} 2`,
		`mroce_path_utilization_ratio{conn="peer",path="0",plane="0",source_port="50001"} 0.3125`,
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
