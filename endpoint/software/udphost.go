package software

import (
	"context"
	"errors"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/udp"
)

// UDPHost is one endpoint on real UDP sockets: its engine, the UDP driver
// under it and the loop they run on, started and stopped together.
type UDPHost struct {
	sw     *Software
	drv    *udp.Driver
	cancel context.CancelFunc
	done   chan struct{}
}

// UDPOptions are a UDP host's settings beside its engine's.
type UDPOptions struct {
	// Tap, when set, sees every datagram the host sends (sent true) and
	// receives, on the host's loop goroutine; d is valid only during the
	// call. A capture (--pcap) is one.
	Tap func(d *link.Datagram, sent bool)
}

// OpenUDP binds cfg's sockets (its Planes, Port and SourcePorts) and starts
// its engine in real time. Timer settings left at zero get what real
// sockets want (RealTimeTimers), and MaxPacket, when zero, the largest
// datagram the planes' interfaces carry. Close stops it.
func OpenUDP(cfg engine.Config) (*UDPHost, error) { return OpenUDPWith(cfg, UDPOptions{}) }

// RealTimeTimers is cfg with the timer settings left at zero set to what
// real sockets want: udp.RTOMin (also as ProbeMin: the same host noise)
// and udp.RTOInitial.
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

// OpenUDPWith is OpenUDP with the host's own settings.
func OpenUDPWith(cfg engine.Config, opts UDPOptions) (*UDPHost, error) {
	if len(cfg.Planes) == 0 || cfg.Port == 0 {
		return nil, errors.New("software: a UDP host needs planes and a port")
	}
	if cfg.PlaceholderPayloads {
		// No CRC, and payload bytes left over from other packets: only a
		// simulation may send those.
		return nil, errors.New("software: placeholder payloads are for simulations, not sockets")
	}
	cfg = RealTimeTimers(cfg)
	loop := clock.NewLoop()
	drv, err := udp.New(udp.Config{Planes: cfg.Planes, Port: cfg.Port, SourcePorts: cfg.SourcePorts, MaxDatagram: cfg.MaxPacket}, loop)
	if err != nil {
		return nil, err
	}
	if cfg.MaxPacket == 0 {
		cfg.MaxPacket = drv.MaxDatagram()
	}
	var port link.Port = drv
	if opts.Tap != nil {
		port = tappedPort{drv, opts.Tap}
	}
	ep, err := engine.NewEndpoint(cfg, loop, port) // before the loop runs: timers are made here
	if err != nil {
		drv.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &UDPHost{drv: drv, cancel: cancel, done: make(chan struct{})}
	h.sw = NewSoftware(ep, NewRegistry(cfg.Random), NewLoopRunner(loop))
	if opts.Tap != nil {
		drv.Start(tappedReceiver{ep, opts.Tap})
	} else {
		drv.Start(ep)
	}
	go func() {
		loop.Run(ctx)
		close(h.done)
	}()
	return h, nil
}

// Device opens the host's device.
func (h *UDPHost) Device() *endpoint.Device { return endpoint.Open(h.sw) }

// Backend is the host's software backend.
func (h *UDPHost) Backend() *Software { return h.sw }

// Remote is how peers reach this host: its plane addresses and port.
func (h *UDPHost) Remote() endpoint.Remote {
	cfg := h.sw.ep.Config()
	return endpoint.Remote{Planes: cfg.Planes, Port: cfg.Port}
}

// DriverStats returns the UDP driver's counters.
func (h *UDPHost) DriverStats() (st udp.Stats) {
	h.sw.runner.Do(func() { st = h.drv.Stats() })
	return st
}

// Close stops the engine's loop and closes the sockets. Connections are
// not closed first: close them (QP.Close) before, for a clean teardown.
func (h *UDPHost) Close() error {
	h.cancel()
	<-h.done
	return h.drv.Close()
}

// tappedPort shows every datagram sent to a tap before the port sends it.
type tappedPort struct {
	link.Port
	tap func(d *link.Datagram, sent bool)
}

func (p tappedPort) Send(batch []link.Datagram) {
	for i := range batch {
		p.tap(&batch[i], true)
	}
	p.Port.Send(batch)
}

// tappedReceiver shows every datagram received to a tap before the engine
// gets it; batches and too-big reports pass through.
type tappedReceiver struct {
	ep  *engine.Endpoint
	tap func(d *link.Datagram, sent bool)
}

func (r tappedReceiver) Receive(d *link.Datagram, at clock.Time) {
	r.tap(d, false)
	r.ep.Receive(d, at)
}

func (r tappedReceiver) TooBig(d *link.Datagram) { r.ep.TooBig(d) }
