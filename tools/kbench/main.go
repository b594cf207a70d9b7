//go:build linux

// Command kbench measures mroce beside the kernel's TCP over a testbed of
// network namespaces that it builds, and removes when it ends: a sender
// and a receiver joined through a router by N planes, each plane a pair of
// veth links with its own subnet and one address on each host, a tbf rate
// limit on the router's egress towards the receiver, and random loss from
// nftables in the router.
//
// In one sitting it runs one mroce connection over every plane (the mroce
// binary's send and recv), TCP with one connection and with one pinned to
// each plane, under each congestion control asked for (this program's
// tcp-send and tcp-recv), at each loss rate, and then mroce and TCP at
// once. It prints the goodput and the CPU time per GB of both ends of each,
// and the ratios docs/results.md reports; --json prints one document.
//
// It needs root. Everything it makes has the prefix's name and goes on
// exit, on error, and on SIGINT, SIGTERM or SIGHUP; traffic stays inside
// the namespaces it made.
//
//	kbench --mroce bin/mroce [--planes 4] [--rate-mbit 1000] [--loss 0,1,5,10] [--json]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// config is a sitting's settings, from the flags.
type config struct {
	mroce      string
	planes     int
	rateMbit   int
	queueKiB   int
	losses     []float64 // fractions
	sizeMiB    int
	maxSeconds float64
	offloads   string
	ce         float64 // fraction of ECN-capable packets marked CE
	ccs        []string
	tcpConns   []int // 1, and planes for the pinned runs
	runs       map[string]bool
	paths      int
	prefix     string
	json       bool
}

// Exit statuses: 2 for bad usage, 3 when the testbed could not be built
// (no root, no namespaces, no tbf or nftables), 1 for the rest.
const (
	exitFailed = 1
	exitUsage  = 2
	exitNoBed  = 3
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "tcp-send":
			os.Exit(tcpSendMain(os.Args[2:]))
		case "tcp-recv":
			os.Exit(tcpRecvMain(os.Args[2:]))
		}
	}
	os.Exit(benchMain(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("kbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.mroce, "mroce", "bin/mroce", "the mroce binary to measure (make build makes bin/mroce)")
	fs.IntVar(&c.planes, "planes", 4, "planes: veth pairs through the router, each its own subnet")
	fs.IntVar(&c.rateMbit, "rate-mbit", 1000, "each plane's rate towards the receiver, Mbit/s (tbf)")
	fs.IntVar(&c.queueKiB, "queue-kib", 256, "the drop-tail queue of each plane's tbf, KiB")
	loss := fs.String("loss", "0,1,5,10", "random loss rates in percent, comma-separated")
	fs.IntVar(&c.sizeMiB, "size-mib", 512, "MiB each transfer moves")
	fs.Float64Var(&c.maxSeconds, "max-seconds", 15, "stop a transfer that takes longer and count what it moved")
	fs.StringVar(&c.offloads, "offloads", "off", "veth offloads: off (TSO, GSO, GRO, UDP segmentation) or default (as the kernel sets them)")
	ce := fs.Float64("ce-percent", 0, "percent of ECN-capable packets towards the receiver marked CE at random (0: none)")
	cc := fs.String("cc", "cubic,bbr", "TCP congestion controls; one not available is left out and said so")
	tcp := fs.String("tcp", "1,pinned", "TCP runs: 1 (one connection, plane 0), pinned (one connection per plane)")
	runs := fs.String("runs", "mroce,tcp,share", "what to run: mroce, tcp, share (both at once, no loss)")
	fs.IntVar(&c.paths, "paths", 8, "mroce's paths")
	fs.StringVar(&c.prefix, "prefix", "", "the namespaces' name prefix (default kbench-RANDOM-)")
	fs.BoolVar(&c.json, "json", false, "print one JSON document instead of tables")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kbench [flags] (root)\n\nkbench measures mroce beside kernel TCP through a testbed of network namespaces it builds and removes.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, s := range strings.Split(*loss, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v < 0 || v >= 100 {
			return c, fmt.Errorf("--loss: %q is not a percent in [0, 100)", s)
		}
		c.losses = append(c.losses, v/100)
	}
	if *ce < 0 || *ce > 100 {
		return c, fmt.Errorf("--ce-percent: %v is not a percent", *ce)
	}
	c.ce = *ce / 100
	for _, s := range strings.Split(*cc, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.ccs = append(c.ccs, s)
		}
	}
	for _, s := range strings.Split(*tcp, ",") {
		switch strings.TrimSpace(s) {
		case "1":
			c.tcpConns = append(c.tcpConns, 1)
		case "pinned":
			c.tcpConns = append(c.tcpConns, c.planes)
		default:
			return c, fmt.Errorf("--tcp: %q is neither 1 nor pinned", s)
		}
	}
	c.runs = map[string]bool{}
	for _, s := range strings.Split(*runs, ",") {
		s = strings.TrimSpace(s)
		if s != "mroce" && s != "tcp" && s != "share" {
			return c, fmt.Errorf("--runs: %q is none of mroce, tcp, share", s)
		}
		c.runs[s] = true
	}
	switch {
	case c.planes < 1 || c.planes > maxPlanes:
		return c, fmt.Errorf("--planes: 1 to %d", maxPlanes)
	case c.rateMbit < 1:
		return c, errors.New("--rate-mbit: at least 1")
	case c.queueKiB < 2:
		return c, errors.New("--queue-kib: at least 2")
	case c.sizeMiB < 1:
		return c, errors.New("--size-mib: at least 1")
	case c.maxSeconds <= 0:
		return c, errors.New("--max-seconds: more than 0")
	case c.offloads != "off" && c.offloads != "default":
		return c, errors.New("--offloads: off or default")
	case c.paths < 1:
		return c, errors.New("--paths: at least 1")
	}
	if c.prefix == "" {
		var b [3]byte
		rand.Read(b[:])
		c.prefix = "kbench-" + hex.EncodeToString(b[:]) + "-"
	}
	// A namespace's name is a file name; the prefix must leave room for the
	// three suffixes and be nothing but a name.
	if len(c.prefix) > 40 || strings.ContainsAny(c.prefix, "/ \t\n") || strings.HasPrefix(c.prefix, ".") {
		return c, fmt.Errorf("--prefix: %q is not a short file name", c.prefix)
	}
	return c, nil
}

func benchMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "kbench:", err)
		return exitUsage
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "kbench: needs root: it makes network namespaces, veth links, tc qdiscs and nftables rules")
		return exitNoBed
	}
	need := []string{"ip", "tc", "nft", "sysctl"}
	if cfg.offloads == "off" {
		need = append(need, "ethtool")
	}
	for _, t := range need {
		if _, err := exec.LookPath(t); err != nil {
			fmt.Fprintf(stderr, "kbench: needs %s (Debian packages iproute2, nftables, procps, ethtool)\n", t)
			return exitNoBed
		}
	}
	if cfg.runs["mroce"] || cfg.runs["share"] {
		if cfg.mroce, err = filepath.Abs(cfg.mroce); err == nil {
			_, err = os.Stat(cfg.mroce)
		}
		if err != nil {
			fmt.Fprintf(stderr, "kbench: the mroce binary: %v (make build, or give --mroce)\n", err)
			return exitUsage
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "kbench:", err)
		return exitFailed
	}
	s := &sitting{cfg: cfg}
	s.ccs, s.notes = availableCCs(cfg.ccs)
	s.notes = append(s.notes, describeBed(cfg)...)

	// A signal ends the sitting; the testbed is removed before kbench exits
	// with 128 and the signal's number, and further signals wait for that.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var caught atomic.Int32
	go func() {
		sig := <-sigs
		caught.Store(int32(sig.(syscall.Signal)))
		cancel()
	}()
	b := &bench{cfg: cfg, self: self, tb: newTestbed(bedConfig{prefix: cfg.prefix, planes: cfg.planes, rateMbit: cfg.rateMbit,
		queueKiB: cfg.queueKiB, offloads: cfg.offloads, ce: cfg.ce > 0})}
	status := exitFailed
	err = func() (err error) {
		// Whatever happens below, nothing of the testbed outlives it.
		defer func() {
			b.procs.stopAll()
			if derr := b.tb.down(); derr != nil && err == nil {
				err = fmt.Errorf("removing the testbed: %w", derr)
			}
		}()
		if err := b.tb.up(); err != nil {
			status = exitNoBed
			return err
		}
		if !cfg.json {
			fmt.Fprintf(stderr, "kbench: testbed %s{snd,rtr,rcv} is up\n", cfg.prefix)
		}
		s.loadBefore = loadAvg()
		s.run(ctx, b, stderr)
		s.loadAfter = loadAvg()
		return ctx.Err()
	}()
	if left, _ := namespacesWithPrefix(cfg.prefix); len(left) > 0 && err == nil {
		err = fmt.Errorf("namespaces left: %v", left)
	}
	if err != nil {
		fmt.Fprintln(stderr, "kbench:", err)
		if n := caught.Load(); n != 0 {
			return 128 + int(n)
		}
		return status
	}
	s.summarize()
	if cfg.json {
		err = s.writeJSON(stdout)
	} else {
		err = s.writeText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "kbench:", err)
		return exitFailed
	}
	if s.failed() {
		return exitFailed
	}
	return 0
}

// availableCCs keeps the congestion controls the kernel offers, and says
// which it left out.
func availableCCs(want []string) (have, notes []string) {
	avail := ccAvailable()
	if !slices.Contains(avail, "bbr") && slices.Contains(want, "bbr") {
		// BBR may be a module not loaded yet.
		if _, err := exec.LookPath("modprobe"); err == nil {
			_ = run("modprobe", "tcp_bbr")
			avail = ccAvailable()
		}
	}
	for _, c := range want {
		if slices.Contains(avail, c) {
			have = append(have, c)
		} else {
			notes = append(notes, fmt.Sprintf("TCP %s is not available here (net.ipv4.tcp_available_congestion_control: %s): runs without it", c, strings.Join(avail, " ")))
		}
	}
	return have, notes
}

func ccAvailable() []string {
	b, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	return strings.Fields(string(b))
}

// describeBed says what the testbed's settings mean for the figures.
func describeBed(c config) []string {
	var n []string
	if c.offloads == "off" {
		n = append(n, "offloads off on every veth end (TSO, GSO, GRO, UDP segmentation): each packet crosses the router as one, of at most 1500 bytes")
	} else {
		n = append(n, "offloads as the kernel sets them on a veth (TSO, GSO and UDP segmentation on, GRO off): a send crosses the router as one skb of up to 64 KB, which the loss rule drops whole")
	}
	if c.ce > 0 {
		n = append(n, fmt.Sprintf("CE: %.2f%% of ECN-capable packets towards the receiver marked at random by nftables (ip ecn set ce); TCP asks for ECN (tcp_ecn=1)", c.ce*100))
	}
	return n
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
