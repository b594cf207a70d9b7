package software

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
	"github.com/mroce/mroce/udp"
)

// UDPHost is one endpoint on real UDP sockets. Its engine, the UDP driver
// under it and the loop they run on start and stop together.
type UDPHost struct {
	sw     *Software
	drv    *udp.Driver
	cancel context.CancelFunc
	done   chan struct{}
}

// Tap sees every datagram a host sends, with sent true, and every one it
// receives, on the host's loop goroutine. d is valid only during the
// call. The capture of --pcap is a Tap.
type Tap func(d *link.Datagram, sent bool)

// UDPOptions are what a user sets of a host on real UDP sockets. The rest
// takes the engine's defaults, with the timer settings of RealTimeTimers
// that real sockets want.
type UDPOptions struct {
	// Planes are the host's addresses, one per plane or NIC port, and
	// Port the UDP port it receives on. Both are required.
	Planes []netip.Addr
	Port   uint16
	// SourcePorts are the local UDP ports paths and control packets are
	// sent from. Default 49152-49407.
	SourcePorts []uint16
	// Paths and Streams are what a connection offers or accepts. Defaults
	// 8 and 8.
	Paths, Streams int
	// MaxPacket is the largest datagram payload sent or accepted. Default
	// the largest the planes' interfaces carry.
	MaxPacket int
	// InboundCapacity is the rate the host can receive, in bytes of
	// payload a second. Its rate hints share it among the connections
	// sending to it. Zero leaves the hints without a limit.
	InboundCapacity float64
	// NoProgress is how long a connection with work outstanding may go
	// without forward progress before it fails. Default 1 s.
	NoProgress time.Duration
	// ConnectTimeout bounds the handshake. Default 1 s.
	ConnectTimeout time.Duration
	// Baseline makes the connections the host opens RoCEv2-like, by
	// docs/spec.md section 10. It accepts either kind regardless.
	Baseline bool
	// Tap, when set, sees the host's datagrams.
	Tap Tap
	// Auth, when set, runs every connection of the host in the
	// authenticated mode with these credentials (docs/spec.md section 13),
	// and KeyLog, when set, receives their secrets (engine.Config.KeyLog).
	Auth   *auth.Credentials
	KeyLog io.Writer
	// Tracer, when set, hears of the engine's decisions
	// (engine.Config.Tracer).
	Tracer engine.Tracer
}

// EngineConfig is the engine configuration the options make, for a caller
// that must set one of the engine's own knobs before OpenUDPEngine.
func (o UDPOptions) EngineConfig() engine.Config {
	cfg := engine.Config{Planes: o.Planes, Port: o.Port, SourcePorts: o.SourcePorts, Paths: o.Paths, Streams: o.Streams,
		MaxPacket: o.MaxPacket, InboundCapacity: o.InboundCapacity, NoProgress: o.NoProgress,
		ConnectTimeout: o.ConnectTimeout, Auth: o.Auth, KeyLog: o.KeyLog, Tracer: o.Tracer}
	if o.Baseline {
		cfg.Mode = proto.ModeBaseline
	}
	return cfg
}

// OpenUDP binds the host's sockets and starts its engine in real time.
// Close stops it.
func OpenUDP(opts UDPOptions) (*UDPHost, error) {
	if opts.Tap != nil {
		return OpenUDPEngine(opts.EngineConfig(), opts.Tap.Wrapper())
	}
	return OpenUDPEngine(opts.EngineConfig())
}

// A Wrapper stands between a host's engine and its sockets. Given the port
// below it, it returns the port the layer above sends through and a
// function that, given the receiver above it, returns the receiver the
// port below delivers to. A tap and the broken builds of package
// conformance/bugs are wrappers.
type Wrapper func(below link.Port) (link.Port, func(above link.Receiver) link.Receiver)

// RealTimeTimers is cfg with the timer settings left at zero set to what
// real sockets want. They are udp.RTOMin, also as ProbeMin since the host
// noise is the same, and udp.RTOInitial.
func RealTimeTimers(cfg engine.Config) engine.Config {
	if cfg.RTOMin == 0 {
		cfg.RTOMin = udp.RTOMin
	}
	if cfg.ProbeMin == 0 {
		cfg.ProbeMin = cfg.RTOMin
	}
	if cfg.RTOInitial == 0 {
		cfg.RTOInitial = udp.RTOInitial
	}
	return cfg
}

// OpenUDPEngine is OpenUDP from a whole engine configuration. It serves
// the simulations, the conformance suite's deliberately broken builds and
// experiments that need the engine's own knobs. It binds cfg's Planes,
// Port and SourcePorts. Timer settings left at zero get what real sockets
// want, and a MaxPacket of zero gets the largest datagram the planes'
// interfaces carry. A BasePacket of zero gets udp.BaseDatagram, so that
// connections search their path MTU (spec section 6.7) rather than trust
// the interfaces; one at MaxPacket or above searches nothing. The wrappers stand between the engine and the
// sockets, the first nearest the sockets.
func OpenUDPEngine(cfg engine.Config, wrappers ...Wrapper) (*UDPHost, error) {
	if len(cfg.Planes) == 0 || cfg.Port == 0 {
		return nil, errors.New("software: a UDP host needs planes and a port")
	}
	if cfg.PlaceholderPayloads {
		// Placeholder payloads have no CRC and carry bytes left over from
		// other packets. Only a simulation may send those.
		return nil, errors.New("software: placeholder payloads are for simulations, not sockets")
	}
	cfg = RealTimeTimers(cfg)
	if cfg.BasePacket == 0 {
		cfg.BasePacket = udp.BaseDatagram
	}
	loop := clock.NewEndpointLoop()
	drv, err := udp.New(udp.Config{Planes: cfg.Planes, Port: cfg.Port, SourcePorts: cfg.SourcePorts, MaxDatagram: cfg.MaxPacket}, loop)
	if err != nil {
		return nil, err
	}
	if cfg.MaxPacket == 0 {
		cfg.MaxPacket = drv.MaxDatagram()
	}
	var port link.Port = drv
	attach := make([]func(link.Receiver) link.Receiver, len(wrappers))
	for i, w := range wrappers {
		port, attach[i] = w(port)
	}
	ep, err := engine.NewEndpoint(cfg, loop, port) // before the loop runs, since timers are made here
	if err != nil {
		drv.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &UDPHost{drv: drv, cancel: cancel, done: make(chan struct{})}
	runner := NewLoopRunner(loop)
	h.sw = NewSoftware(ep, NewRegistry(cfg.Random), runner)
	var recv link.Receiver = ep
	for i := len(attach) - 1; i >= 0; i-- {
		recv = attach[i](recv)
	}
	drv.Start(recv)
	go func() {
		runner.Run(ctx)
		close(h.done)
	}()
	return h, nil
}

// Device opens a device on the host's backend. Each call opens another,
// which closes only what was made through it.
func (h *UDPHost) Device() *endpoint.Device { return endpoint.Open(h.sw) }

// Backend is the host's software backend.
func (h *UDPHost) Backend() *Software { return h.sw }

// Remote is how peers reach this host, by its plane addresses and port.
func (h *UDPHost) Remote() endpoint.Remote {
	cfg := h.sw.ep.Config()
	return endpoint.Remote{Planes: cfg.Planes, Port: cfg.Port}
}

// DriverStats returns the UDP driver's counters; none once the host is
// closed.
func (h *UDPHost) DriverStats() (st udp.Stats) {
	h.sw.runner.Do(func() { st = h.drv.Stats() })
	return st
}

// Close stops the engine's loop and closes the sockets. Connections are
// not closed first. Close them with QP.Close before, for a clean
// teardown.
func (h *UDPHost) Close() error {
	h.cancel()
	<-h.done
	return h.drv.Close()
}

// Wrapper is the tap as a Wrapper. It sees every datagram sent before the
// port below sends it, and every datagram received before the layer above
// gets it.
func (tap Tap) Wrapper() Wrapper {
	return func(below link.Port) (link.Port, func(link.Receiver) link.Receiver) {
		return tappedPort{below, tap}, func(above link.Receiver) link.Receiver {
			return tappedReceiver{above, tap}
		}
	}
}

// tappedPort shows every datagram sent to a tap before the port sends it.
type tappedPort struct {
	link.Port
	tap Tap
}

func (p tappedPort) Send(batch []link.Datagram) {
	for i := range batch {
		p.tap(&batch[i], true)
	}
	p.Port.Send(batch)
}

// tappedReceiver shows every datagram received to a tap before the layer
// above gets it.
type tappedReceiver struct {
	above link.Receiver
	tap   Tap
}

func (r tappedReceiver) Receive(d *link.Datagram, at clock.Time) {
	r.tap(d, false)
	r.above.Receive(d, at)
}

// TooBig, LocalDrop and Overflowed pass the port's reports through the tap
// to the layer above, where it takes them.
func (r tappedReceiver) TooBig(d *link.Datagram) {
	if h, ok := r.above.(link.TooBigHandler); ok {
		h.TooBig(d)
	}
}

func (r tappedReceiver) LocalDrop(d *link.Datagram) {
	if h, ok := r.above.(link.LocalDropHandler); ok {
		h.LocalDrop(d)
	}
}

func (r tappedReceiver) Overflowed(lost int) {
	if h, ok := r.above.(link.OverflowHandler); ok {
		h.Overflowed(lost)
	}
}
