package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/app/filexfer"
	"github.com/mroce/mroce/conformance/bugs"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/metrics"
)

// transferFlags are the settings send and recv share, each with an
// environment variable.
func transferFlags() []cli.Flag {
	return []cli.Flag{
		&cli.UintFlag{Name: "port", Value: 4797, EnvVars: []string{"MROCE_PORT"}, Usage: "the receiver's UDP port"},
		&cli.IntFlag{Name: "paths", Value: 8, EnvVars: []string{"MROCE_PATHS"}, Usage: "paths of the connection, 1 to 256"},
		&cli.IntFlag{Name: "source-ports", Value: 16, EnvVars: []string{"MROCE_SOURCE_PORTS"}, Usage: "UDP source ports in the pool (a path moves to a fresh one when it fails), 1 to 1024"},
		&cli.IntFlag{Name: "mtu", Value: 0, EnvVars: []string{"MROCE_MTU"}, Usage: "the largest packet (UDP payload), 256 to 9000; 0: what the interfaces carry"},
		&cli.Float64Flag{Name: "inbound-gbps", EnvVars: []string{"MROCE_INBOUND_GBPS"}, Usage: "the receiving capacity shared among senders (rate hints), Gb/s; 0: none"},
		&cli.BoolFlag{Name: "baseline", EnvVars: []string{"MROCE_BASELINE"}, Usage: "run the connection in baseline mode (RoCEv2-like: one path, go-back-N, DCQCN)"},
		&cli.IntFlag{Name: "chunk-kib", Value: 1024, EnvVars: []string{"MROCE_CHUNK_KIB"}, Usage: "bytes per SEND, KiB, 1 to 16384"},
		&cli.DurationFlag{Name: "interval", Value: time.Second, EnvVars: []string{"MROCE_INTERVAL"}, Usage: "time between interval reports (0: none)"},
		&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, EnvVars: []string{"MROCE_TIMEOUT"}, Usage: "give up when the peer does not answer for this long"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON document at the end instead of text"},
		&cli.StringFlag{Name: "metrics", EnvVars: []string{"MROCE_METRICS"}, Usage: "serve Prometheus metrics (per path) at http://ADDR/metrics while running"},
		&cli.StringFlag{Name: "pcap", EnvVars: []string{"MROCE_PCAP"}, Usage: "write every packet sent and received to this pcap file (for Wireshark or mroce decode)"},
		&cli.StringFlag{Name: "log-level", Value: "warn", EnvVars: []string{"MROCE_LOG_LEVEL"}, Usage: "log to standard error from this level: debug, info (path events), warn, error"},
	}
}

// transferOptions are the checked settings.
type transferOptions struct {
	port                 uint16
	paths, sourcePorts   int
	mtu, chunk           int
	inbound              float64 // bytes/s
	baseline, json       bool
	interval, noProgress time.Duration
	metrics              string // address to serve /metrics at, or ""
	pcap                 string // file to capture to, or ""
	log                  *slog.Logger
	broken               bugs.Set // deliberate bugs: the conformance suite's self-test only
}

func parseTransferOptions(c *cli.Context) (transferOptions, error) {
	o := transferOptions{port: uint16(c.Uint("port")), paths: c.Int("paths"), sourcePorts: c.Int("source-ports"),
		mtu: c.Int("mtu"), chunk: c.Int("chunk-kib") << 10, inbound: c.Float64("inbound-gbps") * 1e9 / 8,
		baseline: c.Bool("baseline"), json: c.Bool("json"), interval: c.Duration("interval"), noProgress: c.Duration("timeout"),
		metrics: c.String("metrics"), pcap: c.String("pcap")}
	name := c.Command.Name
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return o, usagef(c, "%s: --log-level %q: want debug, info, warn or error", name, c.String("log-level"))
	}
	o.log = slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	switch {
	case c.Uint("port") == 0 || c.Uint("port") > 65535:
		return o, usagef(c, "%s: --port must be 1 to 65535", name)
	case o.paths < 1 || o.paths > 256:
		return o, usagef(c, "%s: --paths must be 1 to 256", name)
	case o.sourcePorts < 1 || o.sourcePorts > 1024:
		return o, usagef(c, "%s: --source-ports must be 1 to 1024", name)
	case o.mtu != 0 && (o.mtu < 256 || o.mtu > 9000):
		return o, usagef(c, "%s: --mtu must be 0 or 256 to 9000", name)
	case defined(c, "chunk-kib") && (c.Int("chunk-kib") < 1 || c.Int("chunk-kib") > 16384):
		return o, usagef(c, "%s: --chunk-kib must be 1 to 16384", name)
	case o.inbound < 0:
		return o, usagef(c, "%s: --inbound-gbps must not be negative", name)
	case o.interval < 0 || o.noProgress <= 0:
		return o, usagef(c, "%s: --interval must not be negative, --timeout must be positive", name)
	}
	return o, nil
}

// defined reports whether the running command has the flag name.
func defined(c *cli.Context, name string) bool {
	for _, f := range c.Command.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// fill gives options made without the command line what it would.
func (o *transferOptions) fill() {
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
}

// maxPlanes is how many planes (NIC ports) the tool takes: as many as the
// emulators build.
const maxPlanes = 8

// parseAddrs reads a list of plane addresses (comma-separated, or the
// flag repeated).
func parseAddrs(c *cli.Context, flag string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, v := range c.StringSlice(flag) {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil || a.Is4In6() || a.Zone() != "" {
				return nil, usagef(c, "%s: --%s: %q is not an IPv4 or IPv6 address", c.Command.Name, flag, s)
			}
			out = append(out, a)
		}
	}
	if len(out) > maxPlanes {
		return nil, usagef(c, "%s: --%s: %d addresses, at most %d planes", c.Command.Name, flag, len(out), maxPlanes)
	}
	return out, nil
}

// openHost starts an endpoint on planes: on port (0: a free one chosen
// here) with a pool of source ports after it, its packets captured when
// the options ask.
func openHost(planes []netip.Addr, port uint16, o transferOptions, uo software.UDPOptions) (*software.UDPHost, error) {
	var lastErr error
	for try := 0; try < 20; try++ {
		p := port
		if p == 0 {
			p = uint16(20000 + rand.IntN(40000-o.sourcePorts))
		}
		uo.Planes, uo.Port, uo.Paths, uo.Streams, uo.MaxPacket = planes, p, o.paths, 2, o.mtu
		uo.InboundCapacity, uo.NoProgress, uo.Baseline = o.inbound, o.noProgress, o.baseline
		uo.SourcePorts = nil
		for i := 1; i <= o.sourcePorts; i++ {
			uo.SourcePorts = append(uo.SourcePorts, p+uint16(i))
		}
		// The deliberate bugs of the conformance suite's self-test stand
		// between the engine and the sockets, below the capture's tap.
		var wrappers []software.Wrapper
		if uo.Tap != nil {
			wrappers = append(wrappers, uo.Tap.Wrapper())
		}
		if !o.broken.Empty() {
			wrappers = append(wrappers, o.broken.Wrapper)
		}
		h, err := software.OpenUDPEngine(uo.EngineConfig(), wrappers...)
		if err == nil {
			return h, nil
		}
		lastErr = err
		if port != 0 {
			break // the port was asked for: say why it cannot be had
		}
	}
	return nil, fmt.Errorf("cannot open the endpoint: %w", lastErr)
}

func recvCommand() *cli.Command {
	return &cli.Command{
		Name:      "recv",
		Usage:     "receive a file (or data) from mroce send over real UDP",
		UsageText: progName + " recv [--listen ADDR[,ADDR...]] [--out FILE] [options]",
		Description: "recv listens on one address per plane (NIC port) and receives one transfer: the\n" +
			"data is checked against the sender's SHA-256 and written to --out (nothing is written\n" +
			"without it). It reports the goodput every --interval and a summary at the end.",
		Flags: append([]cli.Flag{
			&cli.StringSliceFlag{Name: "listen", Value: cli.NewStringSlice("127.0.0.1"), EnvVars: []string{"MROCE_LISTEN"}, Usage: "local address of each plane"},
			&cli.StringFlag{Name: "out", EnvVars: []string{"MROCE_OUT"}, Usage: "file (or existing directory) to write the data to"},
		}, transferFlags()...),
		Action: func(c *cli.Context) error {
			o, err := parseTransferOptions(c)
			if err != nil {
				return err
			}
			planes, err := parseAddrs(c, "listen")
			if err != nil {
				return err
			}
			if len(planes) == 0 {
				return usagef(c, "recv: --listen: no address")
			}
			return runRecv(c.Context, c.App.Writer, c.App.ErrWriter, planes, c.String("out"), o)
		},
	}
}

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send a file (or generated data) to mroce recv over real UDP",
		UsageText: progName + " send --to ADDR[,ADDR...] [FILE | --size-mib N] [options]",
		Description: "send connects to a receiver's address on each plane (--to, in plane order) from a\n" +
			"local address per plane (--local; by default the one the system would use for each),\n" +
			"sprays the data over --paths paths, and waits for the receiver to confirm the SHA-256.\n" +
			"It reports goodput, retransmissions, CE marks and RTT every --interval, and at the end\n" +
			"a summary and what each path carried.",
		Flags: append([]cli.Flag{
			&cli.StringSliceFlag{Name: "to", EnvVars: []string{"MROCE_TO"}, Usage: "the receiver's address on each plane"},
			&cli.StringSliceFlag{Name: "local", EnvVars: []string{"MROCE_LOCAL"}, Usage: "local address of each plane (default: the system's choice for each --to)"},
			&cli.IntFlag{Name: "size-mib", Value: 64, EnvVars: []string{"MROCE_SIZE_MIB"}, Usage: "MiB of generated data to send when no FILE is given"},
		}, transferFlags()...),
		Action: func(c *cli.Context) error {
			o, err := parseTransferOptions(c)
			if err != nil {
				return err
			}
			to, err := parseAddrs(c, "to")
			if err != nil {
				return err
			}
			if len(to) == 0 {
				return usagef(c, "send: --to: the receiver's address is needed")
			}
			local, err := parseAddrs(c, "local")
			if err != nil {
				return err
			}
			if len(local) == 0 {
				for _, a := range to {
					l, err := localFor(a)
					if err != nil {
						return fmt.Errorf("send: no local address reaches %v: %w", a, err)
					}
					local = append(local, l)
				}
			}
			if len(local) != len(to) {
				return usagef(c, "send: %d --local addresses for %d --to addresses: one per plane", len(local), len(to))
			}
			if c.NArg() > 1 {
				return usagef(c, "send: one FILE at most")
			}
			src, err := openSource(c.Args().First(), c.Int("size-mib"))
			if err != nil {
				return err
			}
			defer src.Close()
			return runSend(c.Context, c.App.Writer, c.App.ErrWriter, local, to, src, o)
		},
	}
}

// localFor is the local address the system would send to dst from.
func localFor(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	a := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	return a, nil
}

// source is what send sends: a file, or generated bytes.
type source struct {
	io.Reader
	name string
	size int64
	file *os.File
}

func (s *source) Close() error {
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}

func openSource(path string, sizeMiB int) (*source, error) {
	if path == "" {
		if sizeMiB < 0 || sizeMiB > 1<<20 {
			return nil, &usageError{msg: "send: --size-mib must be 0 to 1048576", command: "send"}
		}
		return &source{Reader: rand.NewChaCha8([32]byte{'m', 'r', 'o', 'c', 'e'}), name: "generated", size: int64(sizeMiB) << 20}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &usageError{msg: fmt.Sprintf("send: %v", err), command: "send"}
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, &usageError{msg: fmt.Sprintf("send: %s: not a regular file", path), command: "send"}
	}
	return &source{Reader: f, name: filepath.Base(path), size: st.Size(), file: f}, nil
}

// transferReport is what send and recv print (as text while they run, or as one
// JSON document at the end).
type transferReport struct {
	Role      string     `json:"role"`
	Local     []string   `json:"local"`
	Remote    []string   `json:"remote"`
	Port      uint16     `json:"port"`
	Paths     int        `json:"paths"`
	Mode      string     `json:"mode"`
	Name      string     `json:"name"`
	Size      int64      `json:"size"`
	Intervals []interval `json:"intervals"`
	End       *summary   `json:"end,omitempty"`
	PerPath   []pathRow  `json:"paths_detail,omitempty"`
	Error     string     `json:"error,omitempty"`
	mu        sync.Mutex `json:"-"`
	started   time.Time  `json:"-"`
	bytes     int64      `json:"-"`
	last      interval   `json:"-"`
	out       io.Writer  `json:"-"`
	text      bool       `json:"-"`
	micro     bool       `json:"-"` // intervals in microseconds (the demo's virtual time)
	bar       *progressbar.ProgressBar
}

type interval struct {
	Start       float64 `json:"start"` // seconds from the first byte
	End         float64 `json:"end"`
	Bytes       int64   `json:"bytes"`
	Gbps        float64 `json:"gbps"`
	Retransmits uint64  `json:"retransmits"`
	CEMarks     uint64  `json:"ce_marks"`
	RTTMicros   float64 `json:"rtt_us"`
}

type summary struct {
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Gbps        float64 `json:"gbps"`
	SHA256      string  `json:"sha256"`
	Verified    bool    `json:"verified"`
	Retransmits uint64  `json:"retransmits"`
	CEMarks     uint64  `json:"ce_marks"`
}

type pathRow struct {
	Path        int     `json:"path"`
	Plane       int     `json:"plane"`
	SourcePort  uint16  `json:"source_port"`
	State       string  `json:"state"`
	RTTMicros   float64 `json:"rtt_us"`
	ECNPercent  float64 `json:"ecn_pct"`
	Share       float64 `json:"share"`
	Packets     uint64  `json:"packets"`
	Retransmits uint64  `json:"retransmits"` // transmissions on this path of content sent before
	// Lost counts this path's transmissions declared lost (a gap in an
	// ACK's bitvector, or a timeout; each is resent on whichever path is
	// free, not necessarily this one); TailProbes its tail probes (of
	// Retransmits); Timeouts its retransmission timeouts. Summed over the
	// paths, Retransmits less Lost and TailProbes is about the packets the
	// receiver refused (RNR) and that were resent.
	Lost       uint64 `json:"lost"`
	TailProbes uint64 `json:"tail_probes"`
	Timeouts   uint64 `json:"timeouts"`
	Repaths    uint64 `json:"repaths"`
}

// totals sums what the paths report.
func totals(tel []endpoint.PathTelemetry) (retx, ce uint64, rtt float64) {
	n := 0
	for _, p := range tel {
		retx += p.Retransmits
		ce += p.CEMarks
		if p.RTT.Samples > 0 {
			rtt += float64(p.RTT.SRTT.Microseconds())
			n++
		}
	}
	if n > 0 {
		rtt /= float64(n)
	}
	return retx, ce, rtt
}

func pathRows(tel []endpoint.PathTelemetry) []pathRow {
	var all uint64
	for _, p := range tel {
		all += p.BytesSent
	}
	rows := make([]pathRow, len(tel))
	for i, p := range tel {
		rows[i] = pathRow{Path: p.Path, Plane: p.Plane, SourcePort: p.SrcPort, State: p.State.String(),
			RTTMicros: float64(p.RTT.SRTT.Microseconds()), ECNPercent: 100 * p.ECNFraction(), Packets: p.PacketsSent,
			Retransmits: p.Retransmits, Lost: p.Lost, TailProbes: p.TailProbes, Timeouts: p.Timeouts, Repaths: p.Repaths}
		if all > 0 {
			rows[i].Share = float64(p.BytesSent) / float64(all)
		}
	}
	return rows
}

// progress notes bytes moved (from the transfer's goroutine).
func (r *transferReport) progress(p filexfer.Progress) {
	r.mu.Lock()
	if r.started.IsZero() {
		r.started = time.Now()
	}
	r.bytes = p.Bytes
	r.mu.Unlock()
	if r.bar != nil {
		r.bar.Set64(p.Bytes)
	}
}

// tick closes an interval: the bytes since the last, and the connection's
// counters since the last (tel nil on the receiving side).
func (r *transferReport) tick(tel []endpoint.PathTelemetry) {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if started.IsZero() {
		return
	}
	r.tickAt(tel, time.Since(started).Seconds())
}

// tickAt closes the interval that ends at now (seconds from the start; the
// demo's are virtual).
func (r *transferReport) tickAt(tel []endpoint.PathTelemetry, now float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	retx, ce, rtt := totals(tel)
	iv := interval{Start: r.last.End, End: now, Bytes: r.bytes - r.lastBytes(), RTTMicros: rtt,
		Retransmits: retx - r.last.Retransmits, CEMarks: ce - r.last.CEMarks}
	if d := iv.End - iv.Start; d > 0 {
		iv.Gbps = float64(iv.Bytes) * 8 / d / 1e9
	}
	r.Intervals = append(r.Intervals, iv)
	r.last = interval{End: now, Bytes: r.bytes, Retransmits: retx, CEMarks: ce}
	if r.text {
		r.clearBar()
		if r.micro {
			fmt.Fprintf(r.out, "[%6.0f-%6.0f µs]  %9s  %7.2f Gb/s", iv.Start*1e6, iv.End*1e6, sizeText(iv.Bytes), iv.Gbps)
		} else {
			fmt.Fprintf(r.out, "[%6.2f-%6.2f s]  %9s  %7.2f Gb/s", iv.Start, iv.End, sizeText(iv.Bytes), iv.Gbps)
		}
		if tel != nil {
			fmt.Fprintf(r.out, "  retransmits %-6d  CE %-6d  RTT %.0f µs", iv.Retransmits, iv.CEMarks, rtt)
		}
		fmt.Fprintln(r.out)
	}
}

func (r *transferReport) lastBytes() int64 { return r.last.Bytes }

func (r *transferReport) clearBar() {
	if r.bar != nil {
		r.bar.Clear()
	}
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// newReport starts a report; a progress bar goes to errOut when it is a
// terminal and the output is text.
func newReport(role string, out, errOut io.Writer, o transferOptions, local, remote []netip.Addr) *transferReport {
	r := &transferReport{Role: role, Port: o.port, Paths: o.paths, Mode: "mroce", out: out, text: !o.json, Intervals: []interval{}}
	if o.baseline {
		r.Mode = "baseline"
	}
	for _, a := range local {
		r.Local = append(r.Local, a.String())
	}
	for _, a := range remote {
		r.Remote = append(r.Remote, a.String())
	}
	return r
}

// startBar shows a progress bar of size bytes on errOut, if it is a
// terminal and the output is text.
func (r *transferReport) startBar(errOut io.Writer, size int64) {
	f, ok := errOut.(*os.File)
	if !r.text || !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return
	}
	r.bar = progressbar.NewOptions64(size, progressbar.OptionSetWriter(f), progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
}

// every runs f every d until stop is closed.
func every(d time.Duration, stop <-chan struct{}, f func()) {
	if d <= 0 {
		return
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f()
		case <-stop:
			return
		}
	}
}

// finish prints the summary (and, for the sender, the per-path table), or
// the JSON document.
func (r *transferReport) finish(res filexfer.Result, tel []endpoint.PathTelemetry, err error) error {
	r.clearBar()
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.Header.Name != "" {
		r.Name, r.Size = res.Header.Name, res.Header.Size
	}
	retx, ce, _ := totals(tel)
	r.End = &summary{Bytes: r.bytes, Seconds: res.Elapsed.Seconds(), SHA256: res.SHA256, Verified: err == nil,
		Retransmits: retx, CEMarks: ce}
	if res.Elapsed > 0 {
		r.End.Gbps = float64(r.bytes) * 8 / res.Elapsed.Seconds() / 1e9
	}
	if tel != nil {
		r.PerPath = pathRows(tel)
	}
	if err != nil {
		r.Error = err.Error()
	}
	if !r.text {
		enc := json.NewEncoder(r.out)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(r); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil {
		return err
	}
	verdict := "SHA-256 verified by the receiver"
	if r.Role == "receiver" {
		verdict = "SHA-256 matches the sender's"
	}
	fmt.Fprintf(r.out, "%s %s in %.3f s: %.2f Gb/s; %s (%s)\n", r.Role, sizeText(r.bytes), res.Elapsed.Seconds(), r.End.Gbps, verdict, res.SHA256)
	if tel != nil {
		fmt.Fprintf(r.out, "%d retransmissions, %d CE marks\n\n", retx, ce)
		tw := tabwriter.NewWriter(r.out, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "path\tplane\tsource port\tstate\tRTT µs\tECN %\tshare\tpackets\tretransmits\tmoves\t")
		for _, p := range r.PerPath {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%.0f\t%.1f\t%.1f%%\t%d\t%d\t%d\t\n", p.Path, p.Plane, p.SourcePort, p.State,
				p.RTTMicros, p.ECNPercent, 100*p.Share, p.Packets, p.Retransmits, p.Repaths)
		}
		tw.Flush()
	}
	return nil
}

// capture opens the pcap file of --pcap and returns the tap that writes
// to it (on the host's loop goroutine) and what closes it.
func capture(path string, log *slog.Logger) (software.UDPOptions, func() error, error) {
	if path == "" {
		return software.UDPOptions{}, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return software.UDPOptions{}, nil, fmt.Errorf("--pcap: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	pw, err := pcapio.NewWriter(bw)
	if err != nil {
		f.Close()
		return software.UDPOptions{}, nil, fmt.Errorf("--pcap: %w", err)
	}
	failed := false
	tap := func(d *link.Datagram, _ bool) {
		if err := pw.WriteDatagram(time.Now(), d.Src, d.Dst, d.DSCP, d.ECN, d.Data); err != nil && !failed {
			failed = true
			log.Error("capture stopped", "file", path, "err", err)
		}
	}
	done := func() error {
		if err := bw.Flush(); err != nil {
			f.Close()
			return fmt.Errorf("--pcap: %w", err)
		}
		return f.Close()
	}
	return software.UDPOptions{Tap: tap}, done, nil
}

// logPathEvents logs what the connection's paths did since the last call.
func logPathEvents(log *slog.Logger, qp *endpoint.QP) {
	for _, ev := range qp.PathEvents() {
		if ev.Repath {
			log.Info("path moved", "path", ev.Path, "source_port", ev.SrcPort, "epoch", ev.Epoch)
			continue
		}
		log.Info("path state", "path", ev.Path, "from", ev.From.String(), "to", ev.To.String())
	}
}

// serveMetrics serves Prometheus metrics at addr until stop is called; its
// collector exports the connections added to it.
func serveMetrics(addr string) (*metrics.Collector, func(), error) {
	col := metrics.NewCollector()
	if addr == "" {
		return col, func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return col, func() { srv.Close() }, nil
}

// openWithTools opens a host on planes (port 0: a free one) with what the
// options ask beside it: the metrics server and the packet capture. done
// closes all three.
func openWithTools(planes []netip.Addr, port uint16, o transferOptions) (*software.UDPHost, *metrics.Collector, func(), error) {
	col, stopMetrics, err := serveMetrics(o.metrics)
	if err != nil {
		return nil, nil, nil, err
	}
	uo, closeCapture, err := capture(o.pcap, o.log)
	if err != nil {
		stopMetrics()
		return nil, nil, nil, err
	}
	host, err := openHost(planes, port, o, uo)
	if err != nil {
		stopMetrics()
		closeCapture()
		return nil, nil, nil, err
	}
	return host, col, func() {
		host.Close()
		stopMetrics()
		if err := closeCapture(); err != nil {
			o.log.Error("capture", "err", err)
		}
	}, nil
}

func runSend(ctx context.Context, out, errOut io.Writer, local, to []netip.Addr, src *source, o transferOptions) error {
	o.fill()
	host, col, done, err := openWithTools(local, 0, o)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer done()
	dev := host.Device()
	pd, _ := dev.AllocPD()
	conn := filexfer.Conn{PD: pd, Send: dev.CreateCQ(64), Recv: dev.CreateCQ(64)}
	cctx, cancel := context.WithTimeout(ctx, o.noProgress)
	conn.QP, err = pd.Connect(cctx, endpoint.Remote{Planes: to, Port: o.port}, conn.Send, conn.Recv, endpoint.QPOptions{})
	cancel()
	if err != nil {
		return fmt.Errorf("send: no answer from %v port %d (is mroce recv running there?): %w", to, o.port, err)
	}
	o.log.Info("connected", "to", to, "port", o.port, "paths", o.paths)
	col.Add(fmt.Sprintf("%v:%d", to[0], o.port), conn.QP.Telemetry)
	r := newReport("sender", out, errOut, o, local, to)
	r.Name, r.Size = src.name, src.size
	if r.text {
		fmt.Fprintf(out, "sending %s (%s) to %v port %d over %d paths on %d planes\n", src.name, sizeText(src.size), to, o.port, o.paths, len(to))
	}
	r.startBar(errOut, src.size)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		every(max(o.interval, 0), stop, func() { r.tick(conn.QP.Telemetry()); logPathEvents(o.log, conn.QP) })
	}()
	res, err := filexfer.SendFile(ctx, conn, src, src.name, src.size, o.chunk, filexfer.DefaultDepth, r.progress)
	close(stop)
	wg.Wait()
	logPathEvents(o.log, conn.QP)
	if err != nil {
		o.log.Error("transfer failed", "err", err)
	}
	tel := conn.QP.Telemetry()
	if err == nil {
		r.tick(tel)
		conn.QP.Close()
	}
	return r.finish(res, tel, err)
}

func runRecv(ctx context.Context, out, errOut io.Writer, planes []netip.Addr, outPath string, o transferOptions) error {
	o.fill()
	host, col, done, err := openWithTools(planes, o.port, o)
	if err != nil {
		return fmt.Errorf("recv: %w", err)
	}
	defer done()
	dev := host.Device()
	pd, _ := dev.AllocPD()
	conn := filexfer.Conn{PD: pd, Send: dev.CreateCQ(64), Recv: dev.CreateCQ(64)}
	lis, err := pd.Listen(conn.Send, conn.Recv, endpoint.QPOptions{})
	if err != nil {
		return err
	}
	r := newReport("receiver", out, errOut, o, planes, nil)
	if r.text {
		fmt.Fprintf(out, "listening on %v port %d\n", planes, o.port)
	}
	if conn.QP, err = lis.Accept(ctx); err != nil {
		return err
	}
	col.Add("sender", conn.QP.Telemetry)
	o.log.Info("accepted a connection")
	var file *os.File
	open := func(h filexfer.Header) (io.Writer, error) {
		r.startBar(errOut, h.Size)
		if r.text {
			r.clearBar()
			fmt.Fprintf(out, "receiving %q (%s)\n", h.Name, sizeText(h.Size))
		}
		if outPath == "" {
			return io.Discard, nil
		}
		path := outPath
		if st, err := os.Stat(outPath); err == nil && st.IsDir() {
			name := filepath.Base(filepath.Clean("/" + h.Name)) // the sender's name, never a path
			if name == "/" || name == "." {
				name = "received"
			}
			path = filepath.Join(outPath, name)
		}
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		file = f
		return f, nil
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); every(o.interval, stop, func() { r.tick(nil) }) }()
	res, err := filexfer.ReceiveFile(ctx, conn, filexfer.DefaultDepth, max(o.chunk, 16<<20), open, r.progress)
	close(stop)
	wg.Wait()
	if file != nil {
		if cerr := file.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err == nil {
		r.tick(nil)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return r.finish(res, nil, err)
}
