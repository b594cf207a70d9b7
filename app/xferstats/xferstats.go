// Package xferstats measures a transfer while it runs and holds the report
// that mroce send, recv and demo print of it.
//
// A Meter counts the bytes moved and closes an interval on each tick, with
// the connection's retransmissions, CE marks and round trip since the last.
// The types carry the JSON field names of the tools' --json output, which
// scripts read, so the names stay as they are.
package xferstats

import (
	"sync"
	"time"

	"github.com/mroce/mroce/endpoint"
)

// Report is one side of a transfer as send and recv print it with --json.
type Report struct {
	Role      string     `json:"role"`
	Local     []string   `json:"local"`
	Remote    []string   `json:"remote"`
	Port      uint16     `json:"port"`
	Paths     int        `json:"paths"`
	MaxPacket int        `json:"max_packet,omitempty"` // the largest packet the handshake settled on, bytes
	PathMTU   []int      `json:"path_mtu,omitempty"`   // by plane, the largest packet seen to cross it (spec section 6.7), bytes
	Mode      string     `json:"mode"`
	Name      string     `json:"name"`
	Size      int64      `json:"size"`
	Intervals []Interval `json:"intervals"`
	End       *Summary   `json:"end,omitempty"`
	PerPath   []PathRow  `json:"paths_detail,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// Interval is what moved between two ticks. Start and End count seconds
// from the first byte. The counters are the connection's and stay zero on
// a receiver, which has no telemetry of the sender's paths.
type Interval struct {
	Start       float64 `json:"start"`
	End         float64 `json:"end"`
	Bytes       int64   `json:"bytes"`
	Gbps        float64 `json:"gbps"`
	Retransmits uint64  `json:"retransmits"`
	CEMarks     uint64  `json:"ce_marks"`
	RTTMicros   float64 `json:"rtt_us"`
}

// Summary is a finished transfer.
type Summary struct {
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Gbps        float64 `json:"gbps"`
	SHA256      string  `json:"sha256"`
	Verified    bool    `json:"verified"`
	Retransmits uint64  `json:"retransmits"`
	CEMarks     uint64  `json:"ce_marks"`
	// LocalDrops counts packets the sending host dropped on their way out,
	// its own queue full; each was resent at once.
	LocalDrops uint64 `json:"local_drops"`
}

// PathRow is what one path carried.
type PathRow struct {
	Path       int     `json:"path"`
	Plane      int     `json:"plane"`
	SourcePort uint16  `json:"source_port"`
	State      string  `json:"state"`
	RTTMicros  float64 `json:"rtt_us"`
	ECNPercent float64 `json:"ecn_pct"`
	Share      float64 `json:"share"`
	Packets    uint64  `json:"packets"`
	// Retransmits counts this path's transmissions of content sent before.
	Retransmits uint64 `json:"retransmits"`
	// Lost counts this path's transmissions declared lost, by a gap in an
	// ACK's bitvector or by a timeout. Each is resent on whichever path is
	// free. Summed over the paths, Retransmits less Lost and TailProbes is
	// about the packets the receiver refused with RNR and that were resent.
	Lost uint64 `json:"lost"`
	// TailProbes counts the tail probes among Retransmits.
	TailProbes uint64 `json:"tail_probes"`
	Timeouts   uint64 `json:"timeouts"`
	// Spurious counts the Timeouts whose packets an ACK later reported
	// received: they were late, not lost.
	Spurious uint64 `json:"spurious_timeouts"`
	Repaths  uint64 `json:"repaths"`
	// LocalDrops counts this path's packets the sending host dropped on
	// their way out, its own queue full. They are not in Lost.
	LocalDrops uint64 `json:"local_drops"`
}

// Totals sums the paths' retransmissions and CE marks and averages the
// smoothed round trips of the paths that have one.
func Totals(tel []endpoint.PathTelemetry) (retx, ce uint64, rttMicros float64) {
	n := 0
	for _, p := range tel {
		retx += p.Retransmits
		ce += p.CEMarks
		if p.RTT.Samples > 0 {
			rttMicros += float64(p.RTT.SRTT.Microseconds())
			n++
		}
	}
	if n > 0 {
		rttMicros /= float64(n)
	}
	return retx, ce, rttMicros
}

// PathRows is a row for each path, its share the fraction of all bytes
// sent.
func PathRows(tel []endpoint.PathTelemetry) []PathRow {
	var all uint64
	for _, p := range tel {
		all += p.BytesSent
	}
	rows := make([]PathRow, len(tel))
	for i, p := range tel {
		rows[i] = PathRow{Path: p.Path, Plane: p.Plane, SourcePort: p.SrcPort, State: p.State.String(),
			RTTMicros: float64(p.RTT.SRTT.Microseconds()), ECNPercent: 100 * p.ECNFraction(), Packets: p.PacketsSent,
			Retransmits: p.Retransmits, Lost: p.Lost, TailProbes: p.TailProbes, Timeouts: p.Timeouts, Spurious: p.SpuriousTimeouts, Repaths: p.Repaths,
			LocalDrops: p.LocalDrops}
		if all > 0 {
			rows[i].Share = float64(p.BytesSent) / float64(all)
		}
	}
	return rows
}

// Meter counts a running transfer's bytes and closes its intervals. The
// transfer's goroutine calls Progress while a ticker's calls Tick, so its
// methods lock.
type Meter struct {
	mu        sync.Mutex
	started   time.Time
	bytes     int64
	last      Interval // the end of the last interval, with the counters then
	intervals []Interval
}

// Progress notes that bytes have moved so far. The first call starts the
// clock Tick measures from, so that connecting is not counted.
func (m *Meter) Progress(bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started.IsZero() {
		m.started = time.Now()
	}
	m.bytes = bytes
}

// Tick closes the interval that ends now by the wall clock. It reports
// false before the first Progress, when nothing has moved to measure.
func (m *Meter) Tick(tel []endpoint.PathTelemetry) (Interval, bool) {
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if started.IsZero() {
		return Interval{}, false
	}
	return m.TickAt(tel, time.Since(started).Seconds()), true
}

// TickAt closes the interval that ends now seconds from the start. It is
// for a caller with a clock of its own, such as the demo's virtual time.
// tel is the connection's telemetry, nil on a receiver.
func (m *Meter) TickAt(tel []endpoint.PathTelemetry, now float64) Interval {
	m.mu.Lock()
	defer m.mu.Unlock()
	retx, ce, rtt := Totals(tel)
	iv := Interval{Start: m.last.End, End: now, Bytes: m.bytes - m.last.Bytes, RTTMicros: rtt,
		Retransmits: retx - m.last.Retransmits, CEMarks: ce - m.last.CEMarks}
	if d := iv.End - iv.Start; d > 0 {
		iv.Gbps = float64(iv.Bytes) * 8 / d / 1e9
	}
	m.intervals = append(m.intervals, iv)
	m.last = Interval{End: now, Bytes: m.bytes, Retransmits: retx, CEMarks: ce}
	return iv
}

// Bytes is what has moved so far.
func (m *Meter) Bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}

// Intervals returns the intervals closed so far. It is never nil, so that
// a report with none prints an empty list rather than null.
func (m *Meter) Intervals() []Interval {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Interval{}, m.intervals...)
}

// Summary describes the finished transfer. It holds the bytes moved in
// elapsed, the data's SHA-256 and whether both sides agreed on it, and the
// connection's counters.
func (m *Meter) Summary(elapsed time.Duration, sha256 string, verified bool, tel []endpoint.PathTelemetry) Summary {
	retx, ce, _ := Totals(tel)
	s := Summary{Bytes: m.Bytes(), Seconds: elapsed.Seconds(), SHA256: sha256, Verified: verified, Retransmits: retx, CEMarks: ce}
	for _, p := range tel {
		s.LocalDrops += p.LocalDrops
	}
	if elapsed > 0 {
		s.Gbps = float64(s.Bytes) * 8 / elapsed.Seconds() / 1e9
	}
	return s
}
