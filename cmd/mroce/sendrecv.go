package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/app/filexfer"
	"github.com/mroce/mroce/app/host"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
)

// transferFlags are the settings send and recv share, each with an
// environment variable.
func transferFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.UintFlag{Name: "port", Value: 4797, EnvVars: []string{"MROCE_PORT"}, Usage: "the receiver's UDP port"},
		&cli.IntFlag{Name: "paths", Value: 8, EnvVars: []string{"MROCE_PATHS"}, Usage: "paths of the connection, 1 to 256"},
		&cli.IntFlag{Name: "source-ports", Value: 16, EnvVars: []string{"MROCE_SOURCE_PORTS"}, Usage: "UDP source ports in the pool (a path moves to a fresh one when it fails), 1 to 1024"},
		&cli.IntFlag{Name: "mtu", Value: 0, EnvVars: []string{"MROCE_MTU"}, Usage: "the largest packet (UDP payload), 256 to 9000; 0: what the interfaces carry"},
		&cli.Float64Flag{Name: "inbound-gbps", EnvVars: []string{"MROCE_INBOUND_GBPS"}, Usage: "the receiving capacity shared among senders (rate hints), Gb/s of payload; 0: the planes' link speed where the system reports it, else none"},
		&cli.BoolFlag{Name: "baseline", EnvVars: []string{"MROCE_BASELINE"}, Usage: "run the connection in baseline mode (RoCEv2-like: one path, go-back-N, DCQCN)"},
		&cli.IntFlag{Name: "chunk-kib", Value: 1024, EnvVars: []string{"MROCE_CHUNK_KIB"}, Usage: "bytes per SEND, KiB, 1 to 16384"},
		&cli.DurationFlag{Name: "interval", Value: time.Second, EnvVars: []string{"MROCE_INTERVAL"}, Usage: "time between interval reports (0: none)"},
		&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, EnvVars: []string{"MROCE_TIMEOUT"}, Usage: "give up when the peer does not answer for this long"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON document at the end instead of text"},
		&cli.StringFlag{Name: "metrics", EnvVars: []string{"MROCE_METRICS"}, Usage: "serve Prometheus metrics (per path, and what the connection received) at http://ADDR/metrics while running"},
		&cli.DurationFlag{Name: "metrics-linger", EnvVars: []string{"MROCE_METRICS_LINGER"}, Usage: "with --metrics, keep serving them this long after the transfer ends, so that a scrape sees its last figures (2 scrape intervals, say)"},
		&cli.StringFlag{Name: "pcap", EnvVars: []string{"MROCE_PCAP"}, Usage: "write every packet sent and received to this pcap file (for Wireshark or mroce decode)"},
		traceFlag,
		&cli.StringFlag{Name: "cpuprofile", EnvVars: []string{"MROCE_CPUPROFILE"}, Usage: "write a CPU profile of this side to this file (go tool pprof reads it)"},
		&cli.StringFlag{Name: "log-level", Value: "warn", EnvVars: []string{"MROCE_LOG_LEVEL"}, Usage: "log to standard error from this level: debug, info (path events), warn, error"},
	}, authFlags()...)
}

// transferOptions are the checked settings.
type transferOptions struct {
	port                 uint16
	localPort            uint16 // a sender's own receive port, or 0 for a free one
	paths, sourcePorts   int
	mtu, chunk           int
	inbound              float64 // bytes/s
	baseline, json       bool
	interval, noProgress time.Duration
	metrics              string // address to serve /metrics at, or ""
	metricsLinger        time.Duration
	pcap                 string // file to capture to, or ""
	tracer               engine.Tracer
	log                  *slog.Logger
	auth                 authOptions
}

func parseTransferOptions(c *cli.Context) (transferOptions, error) {
	o := transferOptions{port: uint16(c.Uint("port")), paths: c.Int("paths"), sourcePorts: c.Int("source-ports"),
		mtu: c.Int("mtu"), chunk: c.Int("chunk-kib") << 10, inbound: c.Float64("inbound-gbps") * 1e9 / 8,
		baseline: c.Bool("baseline"), json: c.Bool("json"), interval: c.Duration("interval"), noProgress: c.Duration("timeout"),
		metrics: c.String("metrics"), metricsLinger: c.Duration("metrics-linger"), pcap: c.String("pcap")}
	if defined(c, "local-port") {
		o.localPort = uint16(min(c.Uint("local-port"), 65535))
	}
	name := c.Command.Name
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return o, usagef(c, "%s: --log-level %q: want debug, info, warn or error", name, c.String("log-level"))
	}
	o.log = slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	switch {
	case c.Uint("port") == 0 || c.Uint("port") > 65535:
		return o, usagef(c, "%s: --port must be 1 to 65535", name)
	case defined(c, "local-port") && c.Uint("local-port")+uint(c.Int("source-ports")) > 65535:
		return o, usagef(c, "%s: --local-port must leave room for --source-ports after it, within 65535", name)
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
	case o.metricsLinger < 0 || o.metricsLinger > time.Hour || o.metricsLinger > 0 && o.metrics == "":
		return o, usagef(c, "%s: --metrics-linger must be 0 to 1h, and comes with --metrics", name)
	case o.interval < 0 || o.noProgress <= 0:
		return o, usagef(c, "%s: --interval must not be negative, --timeout must be positive", name)
	case o.baseline && (c.String("psk-file") != "" || c.String("key-file") != ""):
		return o, usagef(c, "%s: --baseline cannot be authenticated: it resends under the same PSN, which would repeat a nonce (docs/spec.md section 13.3)", name)
	}
	var err error
	o.auth, err = parseAuthOptions(c)
	return o, err
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

// hostOptions are the host's settings, receiving on port. A sender gives
// --local-port, or 0 for a free one, since --port names the receiver's.
func (o transferOptions) hostOptions(port uint16) host.Options {
	return host.Options{Port: port, Paths: o.paths, SourcePorts: o.sourcePorts, MaxPacket: o.mtu,
		InboundCapacity: o.inbound, Baseline: o.baseline, NoProgress: o.noProgress,
		Pcap: o.pcap, Metrics: o.metrics, MetricsLinger: o.metricsLinger, Log: o.log, Tracer: o.tracer, Auth: o.auth.cred, KeyLog: o.auth.keyLog}
}

// maxPlanes is how many planes, or NIC ports, the tool takes. It is as
// many as the emulators build.
const maxPlanes = 8

// parseAddrs reads a list of plane addresses, given comma-separated or by
// repeating the flag, each an IP address or a host name.
func parseAddrs(c *cli.Context, flag string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, v := range c.StringSlice(flag) {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			a, err := resolveAddr(s)
			if err != nil {
				return nil, usagef(c, "%s: --%s: %v", c.Command.Name, flag, err)
			}
			out = append(out, a)
		}
	}
	if len(out) > maxPlanes {
		return nil, usagef(c, "%s: --%s: %d addresses, at most %d planes", c.Command.Name, flag, len(out), maxPlanes)
	}
	return out, nil
}

// resolveAddr reads an IP address, or looks a host name up and takes its
// first IPv4 address, or its first address when it has none: a plane has
// one address, and the names users give (localhost) list IPv4 first.
func resolveAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is4In6() || a.Zone() != "" {
			return netip.Addr{}, fmt.Errorf("%q is not an IPv4 or IPv6 address of a plane", s)
		}
		return a, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", s)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%q is neither an IP address nor a host name that resolves", s)
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return addrs[0], nil
}

// recvCommand defines mroce recv.
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
			&cli.StringFlag{Name: "out", EnvVars: []string{"MROCE_OUT"}, Usage: "file (or existing directory) to write the data to; it appears only once verified"},
			&cli.BoolFlag{Name: "overwrite", EnvVars: []string{"MROCE_OVERWRITE"}, Usage: "replace an existing output file"},
			&cli.BoolFlag{Name: "keep-partial", EnvVars: []string{"MROCE_KEEP_PARTIAL"}, Usage: "when the transfer fails, keep what arrived as FILE.partial"},
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
			warnOpen(c.App.ErrWriter, planes, o.auth)
			out := outputOptions{overwrite: c.Bool("overwrite"), keepPartial: c.Bool("keep-partial")}
			return withTrace(c, func(tr engine.Tracer) error {
				o.tracer = tr
				return transferCommand(c, func(ctx context.Context) error {
					return runRecv(ctx, c.App.Writer, c.App.ErrWriter, planes, c.String("out"), out, o)
				})
			})
		},
	}
}

// sendCommand defines mroce send.
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
			&cli.UintFlag{Name: "local-port", EnvVars: []string{"MROCE_LOCAL_PORT"}, Usage: "the UDP port to receive on, the source ports following it (0: a free one); mroce netem relay carries only the ports it was given"},
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
			local, err := clientLocal(c, to)
			if err != nil {
				return err
			}
			if c.NArg() > 1 {
				return usagef(c, "send: one FILE at most")
			}
			src, err := openSource(c.Args().First(), c.Int("size-mib"))
			if err != nil {
				return err
			}
			defer src.Close()
			return withTrace(c, func(tr engine.Tracer) error {
				o.tracer = tr
				return transferCommand(c, func(ctx context.Context) error {
					return runSend(ctx, c.App.Writer, c.App.ErrWriter, local, to, src, o)
				})
			})
		},
	}
}

// transferCommand runs send's or recv's run with a context that SIGINT
// and SIGTERM cancel, under --cpuprofile, and gives its failure the exit
// status of the side that failed.
func transferCommand(c *cli.Context, run func(ctx context.Context) error) error {
	ctx, stop := interruptible(c.Context)
	defer stop()
	stopProfile, err := startCPUProfile(c.String("cpuprofile"))
	if err != nil {
		return err
	}
	defer stopProfile()
	return transferStatus(ctx, run(ctx))
}

// clientLocal is --local, or else the system's source address for each
// --to.
func clientLocal(c *cli.Context, to []netip.Addr) ([]netip.Addr, error) {
	local, err := parseAddrs(c, "local")
	if err != nil {
		return nil, err
	}
	if len(local) == 0 {
		for _, a := range to {
			l, err := host.LocalFor(a)
			if err != nil {
				return nil, fmt.Errorf("%s: no local address reaches %v: %w", c.Command.Name, a, err)
			}
			local = append(local, l)
		}
	}
	if len(local) != len(to) {
		return nil, usagef(c, "%s: %d --local addresses for %d --to addresses: one per plane", c.Command.Name, len(local), len(to))
	}
	return local, nil
}

// source is what send sends, a file or generated bytes.
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

// runSend sends src to the receiver at to and prints the transfer.
func runSend(ctx context.Context, out, errOut io.Writer, local, to []netip.Addr, src *source, o transferOptions) error {
	o.fill()
	h, err := host.Open(local, o.hostOptions(o.localPort))
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer closeHost(h, o.log)
	cctx, cancel := context.WithTimeout(ctx, o.noProgress)
	conn, err := filexfer.Dial(cctx, h.Device(), endpoint.Remote{Planes: to, Port: o.port})
	cancel()
	if err != nil {
		return fmt.Errorf("send: no answer from %v port %d (is mroce recv running there?): %w", to, o.port, err)
	}
	got := conn.QP.Params()
	o.log.Info("connected", "to", to, "port", o.port, "paths", got.Paths, "max_packet", got.MaxPacket)
	h.Metrics.Add(fmt.Sprintf("%v:%d", to[0], o.port), conn.QP)
	p := newPrinter("sender", out, o, local, to)
	p.report.Name, p.report.Size = src.name, src.size
	p.report.Paths, p.report.MaxPacket = got.Paths, got.MaxPacket
	if p.text {
		fmt.Fprintf(out, "sending %s (%s) to %v port %d over %s on %s, packets of up to %d bytes\n",
			src.name, sizeText(src.size), to, o.port, count(got.Paths, "path"), count(len(to), "plane"), got.MaxPacket)
		for _, note := range settled(o, got) {
			fmt.Fprintln(out, "note: "+note)
		}
	}
	p.startBar(errOut, src.size)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		every(o.interval, stop, func() { p.tick(conn.QP.Telemetry()); logPathEvents(o.log, conn.QP) })
	})
	res, err := filexfer.SendFile(ctx, conn, src, src.name, src.size, filexfer.Options{Chunk: o.chunk, Patience: o.noProgress, Progress: p.progress})
	close(stop)
	wg.Wait()
	logPathEvents(o.log, conn.QP)
	tel := conn.QP.Telemetry()
	learned := conn.QP.Params()
	p.report.PathMTU = learned.PathMTU
	if note := pathMTUNote(learned); note != "" && p.text {
		fmt.Fprintln(out, "note: "+note)
	}
	if err == nil {
		p.tick(tel)
	}
	if err == nil || errors.Is(err, filexfer.ErrMismatch) {
		conn.QP.Close() // the verdict came: the protocol ended (docs/apps.md)
	}
	return p.finish(res, tel, mtuAdvice(err))
}

// pathMTUNote says what the path MTU search (spec section 6.7) found where
// a plane carries less than the handshake allowed, or "" where every plane
// carries it.
func pathMTUNote(got endpoint.ConnParams) string {
	if len(got.PathMTU) == 0 || slices.Min(got.PathMTU) == got.MaxPacket {
		return ""
	}
	sizes := make([]string, len(got.PathMTU))
	for i, m := range got.PathMTU {
		sizes[i] = strconv.Itoa(m)
	}
	state := "as the path MTU search found"
	if !got.PathMTUDone {
		state = "so far: the path MTU search goes on"
	}
	return fmt.Sprintf("packets of up to %d bytes: the planes carry %s bytes, %s (--mtu caps it)",
		slices.Min(got.PathMTU), strings.Join(sizes, ", "), state)
}

// count is n things, in the singular for one.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// settled says where the handshake settled below what this side asked
// for, and which setting of the peer's did it.
func settled(o transferOptions, got endpoint.ConnParams) []string {
	var notes []string
	if got.Paths < o.paths {
		notes = append(notes, fmt.Sprintf("%d of the %d paths asked for: the receiver's --paths allows no more", got.Paths, o.paths))
	}
	if o.mtu != 0 && got.MaxPacket < o.mtu {
		notes = append(notes, fmt.Sprintf("packets of up to %d bytes, not the %d of --mtu: the receiver's --mtu, or its interfaces, allow no more", got.MaxPacket, o.mtu))
	}
	return notes
}

// runRecv receives one transfer on planes, writes it to outPath when
// given, and prints it. It serves the first connection whose header
// arrives. One that fails before, a stray or dead handshake's peer, is
// dropped, and recv goes on serving.
func runRecv(ctx context.Context, out, errOut io.Writer, planes []netip.Addr, outPath string, save outputOptions, o transferOptions) error {
	o.fill()
	h, err := host.Open(planes, o.hostOptions(o.port))
	if err != nil {
		return fmt.Errorf("recv: %w", err)
	}
	defer closeHost(h, o.log)
	p := newPrinter("receiver", out, o, planes, nil)
	srv, err := serveTransfers(ctx, h.Device(), o)
	if err != nil {
		return err
	}
	defer srv.stop()
	if p.text {
		// Only once the listener is up: a CONNECT before it is refused.
		fmt.Fprintf(out, "listening on %v port %d\n", planes, o.port)
		if h.Inbound > 0 {
			fmt.Fprintf(out, "rate hints share %.2f Gb/s of payload among senders (%s; --inbound-gbps sets it)\n", h.Inbound*8/1e9, h.InboundFrom)
		} else {
			fmt.Fprintf(out, "no rate hints: %s (--inbound-gbps sets a capacity)\n", h.InboundFrom)
		}
	}
	conn, in, err := srv.next(ctx)
	if err != nil {
		return err
	}
	h.Metrics.Add("sender", conn.QP)
	got := conn.QP.Params()
	p.report.Paths, p.report.MaxPacket = got.Paths, got.MaxPacket
	o.log.Info("receiving", "name", in.Header.Name, "size", in.Header.Size, "paths", got.Paths, "max_packet", got.MaxPacket)
	p.startBar(errOut, in.Header.Size)
	if p.text {
		p.clearBar()
		fmt.Fprintf(out, "receiving %q (%s) over %s, packets of up to %d bytes\n", in.Header.Name, sizeText(in.Header.Size), count(got.Paths, "path"), got.MaxPacket)
	}
	// The data goes to a temporary file beside the target, renamed to it
	// once the SHA-256 is verified; a failed transfer leaves nothing, or a
	// file named as partial when asked.
	var w io.Writer = io.Discard
	var file *filexfer.Output
	if outPath != "" {
		if file, err = filexfer.CreateOutput(outPath, in.Header.Name, save.overwrite); err != nil {
			return p.finish(filexfer.Result{Header: in.Header}, nil, in.Refuse(err))
		}
		w = file
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { every(o.interval, stop, func() { p.tick(nil) }) })
	res, err := in.Receive(ctx, w, p.progress)
	close(stop)
	wg.Wait()
	if file != nil {
		switch {
		case err == nil:
			err = file.Commit()
		case save.keepPartial:
			if name, kerr := file.KeepPartial(); kerr == nil {
				fmt.Fprintf(errOut, "recv: the partial data is in %s\n", name)
			} else {
				fmt.Fprintf(errOut, "recv: the partial data could not be kept: %v\n", kerr)
			}
		default:
			file.Abort()
		}
	}
	if err == nil {
		p.tick(nil)
	}
	if err == nil || errors.Is(err, filexfer.ErrMismatch) {
		conn.QP.Close() // the verdict went: the protocol ended (docs/apps.md)
	}
	return p.finish(res, nil, mtuAdvice(err))
}

// mtuAdvice adds to a packet too big for its path the flag that fixes it.
// The handshake settles the packet size from the interfaces, and a path
// can carry less than they do.
func mtuAdvice(err error) error {
	var tooBig *engine.PathMTUError
	if errors.As(err, &tooBig) {
		return fmt.Errorf("%w. Give send and recv an --mtu below %d, such as 1472 for a path of 1500-byte links", err, tooBig.Size)
	}
	return err
}

// outputOptions say what recv may do with its output file.
type outputOptions struct {
	overwrite   bool // replace an existing file
	keepPartial bool // keep what a failed transfer wrote, named as partial
}

// transferServer accepts connections and waits for each one's header,
// each on its own goroutine, so that a connection that never sends one
// holds up no other.
type transferServer struct {
	lis     *endpoint.Listener
	pd      *endpoint.PD
	o       transferOptions
	offers  chan transferOffer
	stopped chan struct{}
	cancel  context.CancelFunc // ends the waits for headers
	wg      sync.WaitGroup
}

// transferOffer is a connection whose header arrived.
type transferOffer struct {
	conn filexfer.Conn
	in   *filexfer.Incoming
}

// maxAwaiting bounds the connections waiting for their header at once.
// Each holds a receive of a few KiB. Beyond, the listener's own backlog
// and accept deadline bound what waits to be accepted.
const maxAwaiting = 64

// headerWait bounds the wait for a connection's header, below --timeout
// when that is longer. A sender sends its header as soon as it has
// connected, so one that has not by then holds a slot of maxAwaiting for
// nothing.
const headerWait = 5 * time.Second

// errBusy turns away a sender that arrives after the transfer was chosen.
var errBusy = errors.New("this receiver takes one transfer and has one")

func serveTransfers(ctx context.Context, dev *endpoint.Device, o transferOptions) (*transferServer, error) {
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	lis, err := pd.Listen(nil, nil, endpoint.QPOptions{OwnCQs: 64})
	if err != nil {
		pd.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &transferServer{lis: lis, pd: pd, o: o, offers: make(chan transferOffer), stopped: make(chan struct{}), cancel: cancel}
	awaiting := make(chan struct{}, maxAwaiting)
	s.wg.Go(func() {
		for {
			select {
			case awaiting <- struct{}{}:
			case <-ctx.Done():
				return
			}
			qp, err := lis.Accept(ctx)
			if err != nil {
				return
			}
			s.wg.Go(func() {
				defer func() { <-awaiting }()
				s.await(ctx, qp)
			})
		}
	})
	return s, nil
}

// await waits for the header of the connection qp and offers it. A
// connection that fails first is closed and logged.
func (s *transferServer) await(ctx context.Context, qp *endpoint.QP) {
	conn := filexfer.Conn{PD: s.pd, QP: qp, Send: qp.SendCQ(), Recv: qp.RecvCQ()}
	hctx, cancel := context.WithTimeout(ctx, min(headerWait, s.o.noProgress))
	defer cancel()
	in, err := filexfer.AwaitHeader(hctx, conn, filexfer.Options{Chunk: max(s.o.chunk, 16<<20), Patience: s.o.noProgress})
	if err != nil {
		if ctx.Err() == nil {
			s.o.log.Warn("a connection failed before its transfer began", "err", err)
		}
		qp.Close()
		return
	}
	select {
	case s.offers <- transferOffer{conn, in}:
	case <-s.stopped:
		in.Refuse(errBusy)
		qp.Close()
	}
}

// next returns the first connection whose header arrives.
func (s *transferServer) next(ctx context.Context) (filexfer.Conn, *filexfer.Incoming, error) {
	select {
	case off := <-s.offers:
		s.wg.Go(func() { // later ones are turned away
			for {
				select {
				case off := <-s.offers:
					off.in.Refuse(errBusy)
					off.conn.QP.Close()
				case <-s.stopped:
					return
				}
			}
		})
		return off.conn, off.in, nil
	case <-ctx.Done():
		return filexfer.Conn{}, nil, ctx.Err()
	}
}

// stop stops accepting and waits for the connections still waiting for
// their header to end.
func (s *transferServer) stop() {
	close(s.stopped)
	s.cancel()
	s.lis.Close()
	s.wg.Wait()
}

// closeHost closes h and logs what the capture could not write, since the
// transfer's own result is what the command returns.
func closeHost(h *host.Host, log *slog.Logger) {
	if log.Enabled(context.Background(), slog.LevelDebug) {
		log.Debug("sockets", "stats", fmt.Sprintf("%+v", h.DriverStats()))
	}
	if err := h.Close(); err != nil {
		log.Error("capture", "err", err)
	}
}
