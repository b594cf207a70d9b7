package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/app/host"
	"github.com/mroce/mroce/app/perftest"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
)

// benchCommand defines mroce bench with a subcommand for each of
// perftest's tests.
func benchCommand() *cli.Command {
	var flags []cli.Flag
	for _, f := range transferFlags() {
		if n := f.Names()[0]; n != "chunk-kib" && n != "interval" {
			if n == "port" {
				f.(*cli.UintFlag).Aliases = []string{"p"} // perftest's -p
			}
			flags = append(flags, f)
		}
	}
	flags = append(flags,
		&cli.BoolFlag{Name: "server", Usage: "be the server: wait for one client's test and answer it"},
		&cli.StringSliceFlag{Name: "listen", Value: cli.NewStringSlice("127.0.0.1"), EnvVars: []string{"MROCE_LISTEN"}, Usage: "the server's local address of each plane"},
		&cli.StringSliceFlag{Name: "to", EnvVars: []string{"MROCE_TO"}, Usage: "the client: the server's address on each plane"},
		&cli.StringSliceFlag{Name: "local", EnvVars: []string{"MROCE_LOCAL"}, Usage: "the client's local address of each plane (default: the system's choice for each --to)"},
		&cli.UintFlag{Name: "local-port", EnvVars: []string{"MROCE_LOCAL_PORT"}, Usage: "the client: the UDP port to receive on, the source ports following it (0: a free one); mroce netem relay carries only the ports it was given"},
		&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "sweep the sizes 2 B to 8 MiB (powers of two)"},
		&cli.IntFlag{Name: "size", Aliases: []string{"s"}, Usage: "message size, bytes (default 65536 for bandwidth, 2 for latency, as perftest)"},
		&cli.IntFlag{Name: "iters", Aliases: []string{"n"}, Usage: "iterations per size (default 5000 for bandwidth, 1000 for latency)"},
		&cli.IntFlag{Name: "tx-depth", Aliases: []string{"t"}, Value: 128, Usage: "messages in flight (bandwidth tests)"},
		&cli.IntFlag{Name: "duration", Aliases: []string{"D"}, Usage: "run each size for this many seconds, as perftest's -D, with at most --iters operations (default then 10,000,000)"},
		&cli.BoolFlag{Name: "report_gbits", Usage: "report bandwidth in Gb/sec (10^9 bits a second) rather than perftest's default MB/sec (2^20 bytes a second)"},
		&cli.BoolFlag{Name: "CPU-freq", Aliases: []string{"F"}, Usage: "do not warn when a CPU's frequency governor is not \"performance\", as perftest's -F"},
	)
	var tests []*cli.Command
	for _, test := range perftest.Tests {
		tests = append(tests, &cli.Command{
			Name:      test,
			Usage:     benchTitles[test],
			UsageText: progName + " bench " + test + " --server [--listen ADDR...]\n" + progName + " bench " + test + " --to ADDR[,ADDR...] [-a | --size N] [--iters N]",
			Flags:     flags,
			Action:    benchAction,
		})
	}
	return &cli.Command{
		Name:        "bench",
		Usage:       "perftest-style bandwidth and latency: write_bw, send_bw, read_bw, write_lat",
		UsageText:   progName + " bench TEST --server [--listen ADDR...]\n" + progName + " bench TEST --to ADDR[,ADDR...] [-a | --size N] [--iters N]",
		Subcommands: tests,
		Description: "bench measures one connection as perftest does (ib_write_bw and its siblings): run\n" +
			"the server side with --server, then the client with --to the server's addresses and the\n" +
			"same TEST. Bandwidth tests keep --tx-depth messages in flight and report #bytes,\n" +
			"#iterations, BW peak, BW average and MsgRate; write_lat ping-pongs WRITEs with\n" +
			"immediate data and reports the one-way time (half the round trip): t_min, t_max,\n" +
			"t_typical (median), t_avg, t_stdev, 99% and 99.9%. Tests: " + strings.Join(perftest.Tests, ", ") + ".",
	}
}

// benchAction runs one test's subcommand, as server or client.
func benchAction(c *cli.Context) error {
	if c.NArg() > 1 || c.NArg() == 1 && (c.Bool("server") || c.IsSet("to")) {
		return usagef(c, "bench %s: one argument at most, the server's address, as --to gives it", c.Command.Name)
	}
	test := c.Command.Name
	o, err := parseTransferOptions(c)
	if err != nil {
		return err
	}
	if !c.Bool("CPU-freq") {
		if warning := cpuFreqWarning(os.DirFS("/")); warning != "" {
			fmt.Fprintln(c.App.ErrWriter, warning)
		}
	}
	stopProfile, err := startCPUProfile(c.String("cpuprofile"))
	if err != nil {
		return err
	}
	defer stopProfile()
	if c.Bool("server") {
		planes, err := parseAddrs(c, "listen")
		if err != nil {
			return err
		}
		if len(planes) == 0 {
			return usagef(c, "bench: --listen: no address")
		}
		warnOpen(c.App.ErrWriter, planes, o.auth)
		return withTrace(c, func(tr engine.Tracer) error {
			o.tracer = tr
			return runBenchServer(c.Context, c.App.Writer, test, planes, o)
		})
	}
	size := c.Int("size")
	if !c.IsSet("size") {
		size = 65536
		if perftest.IsLatency(test) {
			size = 2
		}
	}
	req := perftest.Request{Test: test, Sizes: []int{size}, Iters: c.Int("iters"), Depth: c.Int("tx-depth")}
	if c.Bool("all") {
		req.Sizes = perftest.Sweep()
	}
	if d := c.Int("duration"); d != 0 {
		if d < 0 || d > 3600 {
			return usagef(c, "bench %s: --duration must be 1 to 3600 seconds", test)
		}
		req.Duration = time.Duration(d) * time.Second
		if req.Iters == 0 {
			req.Iters = perftest.MaxIters
		}
	}
	if req.Iters == 0 {
		req.Iters = 5000
		if perftest.IsLatency(test) {
			req.Iters = 1000
		}
	}
	if err := req.Validate(); err != nil {
		return usagef(c, "%v", err)
	}
	if c.NArg() == 1 {
		c.Set("to", c.Args().First()) // perftest takes the server's address as its argument
	}
	to, err := parseAddrs(c, "to")
	if err != nil {
		return err
	}
	if len(to) == 0 {
		return usagef(c, "bench: the server's addresses (--to, or the argument) or --server")
	}
	local, err := clientLocal(c, to)
	if err != nil {
		return err
	}
	return withTrace(c, func(tr engine.Tracer) error {
		o.tracer = tr
		return runBenchClient(c.Context, c.App.Writer, req, local, to, o, c.Bool("report_gbits"))
	})
}

var benchTitles = map[string]string{
	perftest.WriteBW: "RDMA_Write BW Test", perftest.SendBW: "Send BW Test", perftest.ReadBW: "RDMA_Read BW Test",
	perftest.WriteLat: "RDMA_Write Latency Test",
}

const rule = "---------------------------------------------------------------------------------------"

// benchHeader prints what perftest prints before a test: the test, and
// the settings the two ends share. depth is 0 at the server, which learns
// it from the client.
func benchHeader(w io.Writer, test string, o transferOptions, role string, depth int) {
	fmt.Fprintln(w, rule)
	fmt.Fprintf(w, "                    %s (mroce, %s)\n", benchTitles[test], role)
	mode := "multipath"
	if o.baseline {
		mode = "baseline (RoCEv2-like)"
	}
	fmt.Fprintf(w, " Transport type  : mroce over UDP, %s\n", mode)
	fmt.Fprintf(w, " Port            : %d\n", o.port)
	if depth > 0 {
		fmt.Fprintf(w, " TX depth        : %d\n", depth)
	}
}

// benchEnds prints the rest of perftest's header once the connection is
// up: what the handshake settled, the largest packet sent now, and each
// end's identity, as perftest prints each QP's QPN, PSN and RKey. A
// connection has a PSN space per path, all starting at one InitialPSN
// (docs/spec.md section 6.2), and a DSN space of its own (section 6.5).
func benchEnds(w io.Writer, e perftest.Ends, local, remote []netip.Addr) {
	mtu := e.Params.MaxPacket
	for _, m := range e.Params.PathMTU {
		mtu = min(mtu, m)
	}
	fmt.Fprintf(w, " Mtu             : %d[B] (the largest packet sent now, as UDP payload)\n", mtu)
	fmt.Fprintf(w, " Paths           : %d\t\tStreams        : %d\n", e.Params.Paths, e.Params.Streams)
	fmt.Fprintf(w, " Atomics         : %s\n", map[bool]string{true: "ON", false: "OFF"}[e.Params.Atomics])
	fmt.Fprintln(w, rule)
	end := func(name string, id endpoint.WireIdentity, rkey uint64, addrs []netip.Addr) {
		key := "-"
		if rkey != 0 {
			key = fmt.Sprintf("%#016x", rkey)
		}
		fmt.Fprintf(w, " %-15s QPN %#08x PSN %#08x DSN %#08x RKey %s\n", name+" address:", id.ConnID, id.InitialPSN, id.InitialDSN, key)
		if len(addrs) > 0 {
			fmt.Fprintf(w, " %-15s %v\n", "planes:", addrs)
		}
	}
	end("local", e.Params.Local, e.LocalRKey, local)
	end("remote", e.Params.Peer, e.RemoteRKey, remote)
	fmt.Fprintln(w, rule)
}

func runBenchServer(ctx context.Context, w io.Writer, test string, planes []netip.Addr, o transferOptions) error {
	o.fill()
	h, err := host.Open(planes, o.hostOptions(o.port))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer closeHost(h, o.log)
	s, err := perftest.NewSide(h.Device())
	if err != nil {
		return err
	}
	lis, err := s.PD.Listen(s.Send, s.Recv, endpoint.QPOptions{})
	if err != nil {
		return err
	}
	if !o.json {
		benchHeader(w, test, o, "server", 0)
		fmt.Fprintf(w, " Waiting for a client on %v port %d\n", planes, o.port)
	}
	started := func(req perftest.Request, e perftest.Ends) {
		if !o.json {
			fmt.Fprintf(w, " TX depth        : %d\n", txDepth(req))
			benchEnds(w, e, planes, nil)
		}
	}
	req, qp, err := serveFirstTest(ctx, lis, s, h, o, test, started)
	if qp != nil {
		qp.Close() // the test is over, or failed: either way the server is done with it (docs/apps.md)
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if o.json {
		return json.NewEncoder(w).Encode(map[string]any{"role": "server", "test": test, "sizes": req.Sizes, "iterations": req.Iters})
	}
	fmt.Fprintf(w, " Served %s: %d sizes, %d iterations each\n%s\n", req.Test, len(req.Sizes), req.Iters, rule)
	return nil
}

// serveFirstTest serves the first client whose test request arrives. A
// connection that ends before its request, a client that connected and
// left or died, is closed, and the server takes the next one. A CONNECT
// whose handshake never completes never reaches Accept. A failure once the
// request has arrived ends the server, as the test it ran failed.
func serveFirstTest(ctx context.Context, lis *endpoint.Listener, s perftest.Side, h *host.Host, o transferOptions, test string,
	started func(perftest.Request, perftest.Ends)) (perftest.Request, *endpoint.QP, error) {
	for {
		qp, err := lis.Accept(ctx)
		if err != nil {
			return perftest.Request{}, nil, err
		}
		s.QP = qp
		h.Metrics.Add("client", qp)
		req, err := perftest.Serve(ctx, s, test, started)
		if !errors.Is(err, perftest.ErrNoRequest) {
			return req, qp, err
		}
		o.log.Warn("a client left before its test request; waiting for the next", "err", err)
		h.Metrics.Remove("client")
		qp.Close()
		// The connection has ended, and closing it flushed the rest of its
		// work: what it left in the shared queues goes, so that the next
		// client's test starts on empty ones.
		for _, cq := range []*endpoint.CQ{s.Send, s.Recv} {
			for k := 1; k > 0; {
				k, _ = cq.Poll(make([]endpoint.Completion, 64))
			}
		}
	}
}

// txDepth is the messages a test keeps in flight: its depth, or one for
// the latency test's ping-pong.
func txDepth(req perftest.Request) int {
	if perftest.IsLatency(req.Test) {
		return 1
	}
	return req.Depth
}

// bandwidthUnit is the unit bandwidth is printed in and how many of it
// make a Gb/s: perftest's MB/sec, 2^20 bytes a second, or with gbits its
// Gb/sec, 10^9 bits a second.
func bandwidthUnit(gbits bool) (unit string, perGbps float64) {
	if gbits {
		return "Gb/sec", 1
	}
	return "MB/sec", 1e9 / 8 / (1 << 20)
}

// runBenchClient runs req against the server at to. Bandwidth is printed
// as perftest prints it: in MB/sec, 2^20 bytes a second, or with gbits in
// Gb/sec, 10^9 bits a second.
func runBenchClient(ctx context.Context, w io.Writer, req perftest.Request, local, to []netip.Addr, o transferOptions, gbits bool) error {
	o.fill()
	h, err := host.Open(local, o.hostOptions(o.localPort))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer closeHost(h, o.log)
	s, err := perftest.NewSide(h.Device())
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, o.noProgress)
	s.QP, err = s.PD.Connect(cctx, endpoint.Remote{Planes: to, Port: o.port}, s.Send, s.Recv, endpoint.QPOptions{})
	cancel()
	if err != nil {
		return fmt.Errorf("bench: no answer from %v port %d (is mroce bench %s --server running there?): %w", to, o.port, req.Test, err)
	}
	defer s.QP.Close()
	h.Metrics.Add(fmt.Sprintf("%v:%d", to[0], o.port), s.QP)
	// The columns are fixed as perftest prints them, so that each row can go
	// out as its size finishes.
	unit, perGbps := bandwidthUnit(gbits)
	started := func(e perftest.Ends) {
		if o.json {
			return
		}
		benchHeader(w, req.Test, o, "client", txDepth(req))
		benchEnds(w, e, local, to)
		if perftest.IsLatency(req.Test) {
			fmt.Fprintf(w, " %-10s %-12s %-12s %-12s %-16s %-12s %-14s %-21s %s\n", "#bytes", "#iterations", "t_min[usec]",
				"t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]")
		} else {
			fmt.Fprintf(w, " %-10s %-12s %-17s %-20s %s\n", "#bytes", "#iterations", "BW peak["+unit+"]", "BW average["+unit+"]", "MsgRate[Mpps]")
		}
	}
	row := func(r perftest.Result) {
		if o.json {
			return
		}
		if perftest.IsLatency(req.Test) {
			fmt.Fprintf(w, " %-10d %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-21.2f %.2f\n", r.Bytes, r.Iterations, r.TMinUs, r.TMaxUs,
				r.TTypicalUs, r.TAvgUs, r.TStdevUs, r.P99Us, r.P999Us)
		} else {
			fmt.Fprintf(w, " %-10d %-12d %-17.2f %-20.2f %.6f\n", r.Bytes, r.Iterations, r.BWPeakGbps*perGbps, r.BWAvgGbps*perGbps, r.MsgRateMpps)
		}
	}
	res, err := perftest.Run(ctx, s, req, started, row)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"role": "client", "test": req.Test, "paths": o.paths, "tx_depth": req.Depth, "results": res})
	}
	fmt.Fprintln(w, rule)
	return nil
}
