// Package metrics exports connections' per-path telemetry to Prometheus
// with the official client library. A Collector reads the telemetry when it
// is scraped, so nothing is counted twice and nothing runs between scrapes.
package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mroce/mroce/endpoint"
)

// Source reads a connection now: its paths' telemetry, as
// endpoint.QP.Telemetry does, and what its receive side counted, as
// endpoint.QP.Received does.
type Source interface {
	Telemetry() []endpoint.PathTelemetry
	Received() endpoint.ReceiveCounters
}

// Collector exports the telemetry of the connections added to it.
type Collector struct {
	mu    sync.Mutex
	conns map[string]Source
}

// NewCollector returns a collector with no connections.
func NewCollector() *Collector { return &Collector{conns: map[string]Source{}} }

// Add exports a connection under the label conn, a name the operator
// recognises, such as the peer.
func (c *Collector) Add(conn string, src Source) {
	c.mu.Lock()
	c.conns[conn] = src
	c.mu.Unlock()
}

// Freeze reads every connection now and exports what it read from then
// on: the connections' last figures stay scrapeable once their host has
// stopped.
func (c *Collector) Freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, src := range c.conns {
		c.conns[name] = snapshot{src.Telemetry(), src.Received()}
	}
}

// snapshot is a connection as it was read once.
type snapshot struct {
	tel []endpoint.PathTelemetry
	rc  endpoint.ReceiveCounters
}

func (s snapshot) Telemetry() []endpoint.PathTelemetry { return s.tel }
func (s snapshot) Received() endpoint.ReceiveCounters  { return s.rc }

// Remove stops exporting a connection.
func (c *Collector) Remove(conn string) {
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
}

var (
	// A path keeps its series when it moves to a new source port: the
	// port is a value (mroce_path_source_port), not a label.
	pathLabels = []string{"conn", "path", "plane"}

	pathPackets = prometheus.NewDesc("mroce_path_packets_sent_total",
		"Packets a path sent, retransmissions included.", pathLabels, nil)
	pathBytes = prometheus.NewDesc("mroce_path_bytes_sent_total",
		"Bytes a path sent, retransmissions included.", pathLabels, nil)
	pathRetransmits = prometheus.NewDesc("mroce_path_retransmits_total",
		"Transmissions of content sent before (gap, timeout, tail probe).", pathLabels, nil)
	pathLost = prometheus.NewDesc("mroce_path_lost_total",
		"Transmissions a path declared lost.", pathLabels, nil)
	pathTimeouts = prometheus.NewDesc("mroce_path_timeouts_total",
		"Retransmission timeouts of a path.", pathLabels, nil)
	pathSpurious = prometheus.NewDesc("mroce_path_spurious_timeouts_total",
		"Retransmission timeouts whose packets an ACK later reported received.", pathLabels, nil)
	pathLocalDrops = prometheus.NewDesc("mroce_path_local_drops_total",
		"Transmissions the local host dropped on their way out, its queue full.", pathLabels, nil)
	pathCE = prometheus.NewDesc("mroce_path_ce_marks_total",
		"CE marks the receiver reported for a path's packets.", pathLabels, nil)
	pathAcked = prometheus.NewDesc("mroce_path_acked_total",
		"Transmissions the receiver reported received.", pathLabels, nil)
	pathRepaths = prometheus.NewDesc("mroce_path_repaths_total",
		"Moves of a path to a new source port.", pathLabels, nil)
	pathRTT = prometheus.NewDesc("mroce_path_rtt_seconds",
		"A path's smoothed round-trip time.", pathLabels, nil)
	pathMinRTT = prometheus.NewDesc("mroce_path_min_rtt_seconds",
		"A path's smallest round-trip time seen.", pathLabels, nil)
	pathWindow = prometheus.NewDesc("mroce_path_window_packets",
		"A path's congestion window.", pathLabels, nil)
	pathInFlight = prometheus.NewDesc("mroce_path_in_flight_packets",
		"A path's packets sent and not yet resolved.", pathLabels, nil)
	pathUtilization = prometheus.NewDesc("mroce_path_utilization_ratio",
		"The share of its congestion window a path holds in flight (0 to 1): near 1 the window limits it, near 0 something else does.", pathLabels, nil)
	pathState = prometheus.NewDesc("mroce_path_state",
		"1 for a path's present state (GOOD, SKIP, ASSUMED_BAD, DOWN), 0 for the others.", append(pathLabels, "state"), nil)
	pathSourcePort = prometheus.NewDesc("mroce_path_source_port",
		"The UDP source port a path sends from now.", pathLabels, nil)
	connPaths = prometheus.NewDesc("mroce_connection_paths",
		"The paths of a connection.", []string{"conn"}, nil)
	recvPackets = prometheus.NewDesc("mroce_connection_received_packets_total",
		"Data packets of the peer's placed.", []string{"conn"}, nil)
	recvBytes = prometheus.NewDesc("mroce_connection_received_bytes_total",
		"Payload bytes of the peer's placed.", []string{"conn"}, nil)
	recvDuplicates = prometheus.NewDesc("mroce_connection_received_duplicates_total",
		"Data packets of the peer's whose DSN had arrived before.", []string{"conn"}, nil)
	recvOutOfWindow = prometheus.NewDesc("mroce_connection_received_out_of_window_total",
		"Data packets of the peer's beyond the DSN window, dropped.", []string{"conn"}, nil)
	recvCE = prometheus.NewDesc("mroce_connection_received_ce_marks_total",
		"Data packets of the peer's that arrived marked CE.", []string{"conn"}, nil)
	recvAcks = prometheus.NewDesc("mroce_connection_acks_sent_total",
		"ACKs sent to the peer.", []string{"conn"}, nil)
	recvNacks = prometheus.NewDesc("mroce_connection_nacks_sent_total",
		"Data packets of the peer's refused with a NACK.", []string{"conn"}, nil)
)

// descs are every series the collector exports.
var descs = []*prometheus.Desc{pathPackets, pathBytes, pathRetransmits, pathLost, pathTimeouts, pathSpurious, pathLocalDrops, pathCE, pathAcked,
	pathRepaths, pathRTT, pathMinRTT, pathWindow, pathInFlight, pathUtilization, pathState, pathSourcePort, connPaths,
	recvPackets, recvBytes, recvDuplicates, recvOutOfWindow, recvCE, recvAcks, recvNacks}

var states = []endpoint.PathState{endpoint.PathGood, endpoint.PathSkip, endpoint.PathAssumedBad, endpoint.PathDown}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It reads every connection's
// telemetry now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	conns := make(map[string]Source, len(c.conns))
	for k, v := range c.conns {
		conns[k] = v
	}
	c.mu.Unlock()
	for name, src := range conns {
		tel := src.Telemetry()
		ch <- prometheus.MustNewConstMetric(connPaths, prometheus.GaugeValue, float64(len(tel)), name)
		rc := src.Received()
		for _, m := range []struct {
			d *prometheus.Desc
			v uint64
		}{{recvPackets, rc.Packets}, {recvBytes, rc.Bytes}, {recvDuplicates, rc.Duplicates}, {recvOutOfWindow, rc.OutOfWindow},
			{recvCE, rc.CEMarks}, {recvAcks, rc.AcksSent}, {recvNacks, rc.Nacks}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v), name)
		}
		for _, p := range tel {
			l := []string{name, strconv.Itoa(p.Path), strconv.Itoa(p.Plane)}
			counter := func(d *prometheus.Desc, v uint64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
			}
			gauge := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
			}
			counter(pathPackets, p.PacketsSent)
			counter(pathBytes, p.BytesSent)
			counter(pathRetransmits, p.Retransmits)
			counter(pathLost, p.Lost)
			counter(pathTimeouts, p.Timeouts)
			counter(pathSpurious, p.SpuriousTimeouts)
			counter(pathLocalDrops, p.LocalDrops)
			counter(pathCE, p.CEMarks)
			counter(pathAcked, p.Acked)
			counter(pathRepaths, p.Repaths)
			gauge(pathRTT, p.RTT.SRTT.Seconds())
			gauge(pathMinRTT, p.RTT.Min.Seconds())
			gauge(pathWindow, float64(p.Window))
			gauge(pathInFlight, float64(p.InFlight))
			gauge(pathUtilization, p.Utilization())
			gauge(pathSourcePort, float64(p.SrcPort))
			for _, s := range states {
				v := 0.0
				if p.State == s {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(pathState, prometheus.GaugeValue, v, append(l, s.String())...)
			}
		}
	}
}
