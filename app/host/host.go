// Package host opens an mroce endpoint on real UDP sockets the way mroce's
// applications run one, with a packet capture and a metrics server beside
// it when asked.
//
// mroce send, recv and bench open their hosts here, and so does the
// conformance endpoint contract, so that all of them bind the same way and
// the contract tests the host a user runs.
package host

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/metrics"
)

// Streams is how many streams a host's connections offer. The applications
// keep control messages on stream 0 and data on stream 1, so that a control
// message never waits behind data.
const Streams = 2

// Options are what an application sets of a host.
type Options struct {
	// Port is the UDP port the host receives on. Zero picks a free one,
	// which suits a host that only connects out.
	Port uint16
	// Paths is how many paths a connection offers. SourcePorts is how many
	// UDP source ports the pool holds, numbered after Port.
	Paths, SourcePorts int
	// MaxPacket is the largest UDP payload. Zero takes what the interfaces
	// carry.
	MaxPacket int
	// InboundCapacity is the receiving rate in bytes of payload a second
	// that the host's rate hints share among senders. Zero takes it from
	// the planes' link speeds (InboundFromLinks), or sets no limit where
	// the system reports none.
	InboundCapacity float64
	// Baseline makes the connections the host opens RoCEv2-like.
	Baseline bool
	// NoProgress is how long a connection may wait on its peer before it
	// fails.
	NoProgress time.Duration
	// ConnectTimeout bounds a handshake; zero takes the engine's 1 s.
	ConnectTimeout time.Duration
	// Pcap names a file that receives every packet sent and received.
	// Empty captures nothing.
	Pcap string
	// Metrics is an address to serve Prometheus metrics at. Empty serves
	// none.
	Metrics string
	// MetricsLinger keeps serving the metrics that long after Close, so
	// that a scrape finds a command's last figures once it has ended.
	MetricsLinger time.Duration
	// Log receives the errors of the capture. Nil discards them.
	Log *slog.Logger
	// Wrappers stand between the engine and the capture, the first nearest
	// the capture. The capture is nearest the sockets, so that it records
	// what went on the wire.
	Wrappers []software.Wrapper
	// Auth, when set, runs the host's connections in the authenticated
	// mode, and KeyLog receives their secrets (software.UDPOptions).
	Auth   *auth.Credentials
	KeyLog io.Writer
	// Tracer, when set, hears of the engine's decisions
	// (engine.Config.Tracer); package tracelog writes them to a file.
	Tracer engine.Tracer
}

// Host is an open endpoint with its capture and metrics server.
type Host struct {
	*software.UDPHost
	// Inbound is the capacity the host's rate hints share, bytes of
	// payload a second, 0 for none; InboundFrom says where it came from.
	Inbound     float64
	InboundFrom string
	// Metrics exports the connections added to it. It exists whether or
	// not Options.Metrics serves it, so callers add connections without
	// checking.
	Metrics *metrics.Collector

	stopMetrics   func()
	metricsLinger time.Duration // 0 when no metrics are served
	closeCapture  func() error
}

// Open binds a host on planes, one address per plane, and starts what the
// options ask for beside it.
func Open(planes []netip.Addr, o Options) (*Host, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Host{stopMetrics: func() {}, closeCapture: func() error { return nil }}
	h.Inbound, h.InboundFrom = o.InboundCapacity, "given"
	if o.InboundCapacity == 0 {
		h.Inbound, h.InboundFrom = InboundFromLinks(planes, o.MaxPacket)
		o.InboundCapacity = h.Inbound
	}
	var err error
	if h.Metrics, h.stopMetrics, err = serveMetrics(o.Metrics); err != nil {
		return nil, err
	}
	if o.Metrics != "" {
		h.metricsLinger = o.MetricsLinger
	}
	tap, closeCapture, err := capture(o.Pcap, log)
	if err != nil {
		h.stopMetrics()
		return nil, err
	}
	h.closeCapture = closeCapture
	var wrappers []software.Wrapper
	if tap != nil {
		wrappers = append(wrappers, tap.Wrapper())
	}
	wrappers = append(wrappers, o.Wrappers...)
	if h.UDPHost, err = bind(planes, o, wrappers); err != nil {
		h.stopMetrics()
		h.closeCapture()
		return nil, err
	}
	return h, nil
}

// Close stops the host, then, after Options.MetricsLinger, the metrics
// server, then flushes and closes the capture. It returns the capture's
// error, the only one a caller can act on.
func (h *Host) Close() error {
	if h.metricsLinger > 0 {
		h.Metrics.Freeze() // a stopped host's connections read as nothing
	}
	h.UDPHost.Close()
	if h.metricsLinger > 0 {
		time.Sleep(h.metricsLinger)
	}
	h.stopMetrics()
	return h.closeCapture()
}

// bind opens the sockets and the engine. A free port is tried 20 times
// because another program may take it between the choice and the bind.
// A port the caller named is tried once, so the error says why it cannot
// be had.
func bind(planes []netip.Addr, o Options, wrappers []software.Wrapper) (*software.UDPHost, error) {
	var lastErr error
	for try := 0; try < 20; try++ {
		port := o.Port
		if port == 0 {
			port = uint16(20000 + rand.IntN(40000-o.SourcePorts))
		}
		uo := software.UDPOptions{Planes: planes, Port: port, Paths: o.Paths, Streams: Streams, MaxPacket: o.MaxPacket,
			InboundCapacity: o.InboundCapacity, NoProgress: o.NoProgress, ConnectTimeout: o.ConnectTimeout, Baseline: o.Baseline,
			Auth: o.Auth, KeyLog: o.KeyLog, Tracer: o.Tracer}
		for i := 1; i <= o.SourcePorts; i++ {
			uo.SourcePorts = append(uo.SourcePorts, port+uint16(i))
		}
		h, err := software.OpenUDPEngine(uo.EngineConfig(), wrappers...)
		if err == nil {
			return h, nil
		}
		lastErr = err
		if o.Port != 0 {
			break
		}
	}
	return nil, fmt.Errorf("cannot open the endpoint: %w", lastErr)
}

// capture opens the pcap file at path and returns the tap that writes to
// it and what flushes and closes it. The tap runs on the host's loop
// goroutine, so it logs its first write error and drops the rest rather
// than stall the loop.
func capture(path string, log *slog.Logger) (software.Tap, func() error, error) {
	if path == "" {
		return nil, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("pcap: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	pw, err := pcapio.NewWriter(bw)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("pcap: %w", err)
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
			return fmt.Errorf("pcap: %w", err)
		}
		return f.Close()
	}
	return tap, done, nil
}

// serveMetrics serves Prometheus metrics at addr until stop is called. The
// Go and process collectors sit beside the paths' so that a scrape also
// shows the process's health.
func serveMetrics(addr string) (col *metrics.Collector, stop func(), err error) {
	col = metrics.NewCollector()
	if addr == "" {
		return col, func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return col, func() { srv.Close() }, nil
}

// LocalFor is the local address the system would send to dst from. It
// dials UDP, which sends nothing but makes the kernel choose a route.
func LocalFor(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	a, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok {
		return netip.Addr{}, errors.New("no UDP address")
	}
	return a.AddrPort().Addr().Unmap(), nil
}
