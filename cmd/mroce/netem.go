package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/relay"
	"github.com/mroce/mroce/tunnet"
)

// netemCommand defines mroce netem and its subcommands. It is over 80
// lines because it is one cli.Command literal declaring flags.
func netemCommand() *cli.Command {
	name := &cli.StringFlag{Name: "name", Value: "net", Usage: "the emulated network's name: its namespaces are mroce-NAME-hN"}
	return &cli.Command{
		Name:  "netem",
		Usage: "run the emulator for real programs: hosts in network namespaces (Linux, root), or a UDP relay",
		Description: "netem up makes emulated hosts, each a network namespace with one TUN interface per\n" +
			"plane (host N's address on plane P is 10.P.0.N+1/16 on interface mrP), and forwards their\n" +
			"packets through the emulator (rate, delay, queues with ECN marking, loss) until\n" +
			"interrupted (SIGINT, SIGTERM or SIGHUP); then it removes everything it made. It records\n" +
			"what it makes in " + tunnet.StateDir + "/NAME.json. netem exec runs a program in a host;\n" +
			"netem status lists the recorded networks; netem down removes what an emulator that died\n" +
			"left behind, as its record lists, and nothing else. Needs Linux, root and ip (iproute2).\n" +
			"netem relay needs neither: it carries UDP between loopback addresses through the same\n" +
			"emulator.",
		Subcommands: []*cli.Command{
			{
				Name:  "up",
				Usage: "start an emulated network and forward its packets until interrupted",
				Flags: append([]cli.Flag{name, &cli.IntFlag{Name: "mtu", Value: 9000, Usage: "the TUN interfaces' MTU"}}, fabricFlags()...),
				Action: func(c *cli.Context) error {
					fc, err := fabricConfig(c)
					if err != nil {
						return err
					}
					ctx, stop := runContext(c)
					defer stop()
					return runNetemUp(ctx, c.App.Writer, tunnet.Config{Name: c.String("name"), Hosts: c.Int("hosts"),
						Planes: c.Int("planes"), MTU: c.Int("mtu"), Fabric: fc})
				},
			},
			{
				Name:  "relay",
				Usage: "relay UDP between emulated hosts on loopback addresses through the emulator (no root)",
				Description: "netem relay gives host N, on plane P, a real address 127.(10+P).0.(N+1), where its\n" +
					"programs bind, and a virtual address 127.(20+P).0.(N+1), where the others send to it.\n" +
					"A datagram from a real address to a virtual one crosses the emulator and arrives from\n" +
					"the sender's virtual address, its ports kept. The relay carries the ports it is given:\n" +
					"the receive port and a run of source ports. Linux answers every 127.0.0.0/8 address\n" +
					"without configuration.",
				Flags: append([]cli.Flag{
					&cli.UintFlag{Name: "port", Value: 4797, Usage: "the hosts' receive port"},
					&cli.UintFlag{Name: "source-port-base", Value: 50001, Usage: "the first of the hosts' source ports"},
					&cli.IntFlag{Name: "source-ports", Value: 16, Usage: "how many source ports, from the base"},
				}, fabricFlags()...),
				Action: func(c *cli.Context) error {
					fc, err := fabricConfig(c)
					if err != nil {
						return err
					}
					port, base, count := c.Uint("port"), c.Uint("source-port-base"), c.Int("source-ports")
					if port == 0 || port > 65535 || base == 0 || count < 0 || count > 1024 || int(base)+count-1 > 65535 {
						return usagef(c, "netem relay: --port, --source-port-base and --source-ports must give ports 1 to 65535 (at most 1024 source ports)")
					}
					ports := []uint16{uint16(port)}
					for i := 0; i < count; i++ {
						ports = append(ports, uint16(int(base)+i))
					}
					ctx, stop := runContext(c)
					defer stop()
					return runRelay(ctx, c.App.Writer, relay.Config{Hosts: c.Int("hosts"), Planes: c.Int("planes"), Ports: ports, Fabric: fc})
				},
			},
			{
				Name:      "exec",
				Usage:     "run a program inside an emulated host",
				UsageText: progName + " netem exec [--name NAME] HOST -- COMMAND [ARGS...]",
				Description: "netem exec runs COMMAND in host HOST's network namespace with ip netns exec, which\n" +
					"execs it in place, and waits for it. It passes SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1\n" +
					"and SIGUSR2 on to the program, except a terminal's own Ctrl-C and Ctrl-\\, which reach\n" +
					"the program directly. Its exit status is the program's, 128+N for a program killed by\n" +
					"signal N. Should netem exec be killed (SIGKILL), the kernel kills the program too.",
				Flags:  []cli.Flag{name},
				Action: netemExec,
			},
			{
				Name:   "status",
				Usage:  "list the emulated networks netem up recorded, and other mroce-* namespaces",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "name", Usage: "only this network's"}},
				Action: netemStatus,
			},
			{
				Name:      "down",
				Usage:     "remove what an emulator that died left behind, as its record lists",
				UsageText: progName + " netem down [--name NAME [--force]] [--stop [--wait DURATION]]",
				Description: "netem down removes the namespaces of every network whose netem up process has died,\n" +
					"as that process recorded them in " + tunnet.StateDir + "/NAME.json, and then the record.\n" +
					"It leaves a network whose netem up still runs, unless given --stop, and every mroce-*\n" +
					"namespace that no record accounts for, which it lists.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Usage: "only this network's (default: every recorded network)"},
					&cli.BoolFlag{Name: "force", Usage: "with --name: remove every namespace named mroce-NAME-hN, recorded or not"},
					&cli.BoolFlag{Name: "stop", Usage: "stop a network whose netem up still runs: send that process SIGTERM, so that it tears down, and wait"},
					&cli.DurationFlag{Name: "wait", Value: 10 * time.Second, Usage: "with --stop: how long to wait for the process to end"},
				},
				Action: netemDown,
			},
		},
	}
}

// netemExec runs a program inside an emulated host and passes its exit
// status on.
func netemExec(c *cli.Context) error {
	if c.NArg() < 2 {
		return usagef(c, "netem exec: want HOST and a command")
	}
	host, err := strconv.Atoi(c.Args().First())
	if err != nil || host < 0 {
		return usagef(c, "netem exec: host %q: want a host number", c.Args().First())
	}
	ns := fmt.Sprintf("mroce-%s-h%d", c.String("name"), host)
	if _, err := os.Stat("/run/netns/" + ns); err != nil {
		return fmt.Errorf("netem exec: no emulated host %d in network %q (is mroce netem up running?)", host, c.String("name"))
	}
	argv := c.Args().Tail()
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return usagef(c, "netem exec: want a command after the host")
	}
	code, err := runInNamespace(ns, argv, c.App.Reader, c.App.Writer, c.App.ErrWriter)
	if err != nil {
		return err
	}
	if code != 0 {
		return exitStatus(code) // the program's own, passed on
	}
	return nil
}

// netemStatus lists the recorded networks, and the mroce-* namespaces no
// record accounts for.
func netemStatus(c *cli.Context) error {
	name, w := c.String("name"), c.App.Writer
	recs, err := tunnet.Records()
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	shown := 0
	for _, r := range recs {
		if name != "" && r.Name != name {
			continue
		}
		if shown++; shown == 1 {
			fmt.Fprintln(tw, "network\tstate\tpid\tstarted\thosts\tnamespaces")
		}
		present := r.Present()
		state := "running"
		switch {
		case r.Running():
		case len(present) > 0:
			state = "died, left behind"
		default:
			state = "died, nothing left"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", r.Name, state, r.PID, r.Started.Local().Format(time.DateTime), r.Hosts, strings.Join(present, " "))
	}
	tw.Flush()
	unrecorded, uerr := unrecordedOf(name)
	if len(unrecorded) > 0 {
		fmt.Fprintf(w, "namespaces named mroce-* that no netem up recorded, so netem down leaves them:\n  %s\n", strings.Join(unrecorded, "\n  "))
		fmt.Fprintln(w, removeByHand)
	}
	if shown == 0 && len(unrecorded) == 0 {
		fmt.Fprintln(w, "no emulated hosts")
	}
	return errors.Join(err, uerr)
}

// removeByHand says how to remove namespaces that no record accounts for.
const removeByHand = "remove one with: ip netns del NAMESPACE; a network's mroce-NAME-hN with: " + progName + " netem down --name NAME --force"

// unrecordedOf are the mroce-* namespaces no record accounts for, those
// named as network name's hosts if name is not "".
func unrecordedOf(name string) ([]string, error) {
	all, err := tunnet.Unrecorded()
	if name == "" || err != nil {
		return all, err
	}
	ofName, err := tunnet.List(name)
	var out []string
	for _, ns := range all {
		if slices.Contains(ofName, ns) {
			out = append(out, ns)
		}
	}
	return out, err
}

// netemDown removes what the recorded networks whose netem up died left,
// or network --name's. With --stop it first stops those still running.
func netemDown(c *cli.Context) error {
	name := c.String("name")
	if c.Bool("force") && name == "" {
		return usagef(c, "netem down: --force needs --name: it removes that network's namespaces, recorded or not")
	}
	remove := func(name string) (tunnet.Removal, error) {
		if c.Bool("stop") {
			return tunnet.Stop(name, c.Duration("wait"))
		}
		return tunnet.Remove(name, c.Bool("force"))
	}
	if name != "" {
		return downOne(c, name, remove)
	}
	recs, err := tunnet.Records()
	errs, total := []error{err}, 0
	for _, r := range recs {
		if r.Running() && !c.Bool("stop") {
			fmt.Fprintf(c.App.ErrWriter, "left network %s: its netem up, process %d, runs (stop that, or add --stop)\n", r.Name, r.PID)
			continue
		}
		res, err := remove(r.Name)
		reportRemoval(c.App.Writer, r.Name, res)
		total += len(res.Removed)
		errs = append(errs, err)
	}
	unrecorded, err := tunnet.Unrecorded()
	if len(unrecorded) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "left %d namespaces named mroce-* that no netem up recorded: %s\n%s\n",
			len(unrecorded), strings.Join(unrecorded, " "), removeByHand)
	}
	fmt.Fprintf(c.App.Writer, "removed %d emulated hosts\n", total)
	return errors.Join(append(errs, err)...)
}

// downOne removes network name's namespaces with remove. It fails for a
// network whose netem up runs, and for namespaces named as its hosts that
// it left because no record accounts for them.
func downOne(c *cli.Context, name string, remove func(string) (tunnet.Removal, error)) error {
	res, err := remove(name)
	var running *tunnet.RunningError
	if errors.As(err, &running) {
		return fmt.Errorf("netem down: network %q runs: its netem up is process %d (stop that, or add --stop)", name, running.PID)
	}
	reportRemoval(c.App.Writer, name, res)
	fmt.Fprintf(c.App.Writer, "removed %d emulated hosts\n", len(res.Removed))
	if err == nil && len(res.Left) > 0 {
		err = fmt.Errorf("netem down: left %s: named as network %q's hosts, but no netem up recorded them (add --force to remove them, or ip netns del NAMESPACE)",
			strings.Join(res.Left, " "), name)
	}
	return err
}

// reportRemoval says what Remove removed of network name.
func reportRemoval(w io.Writer, name string, res tunnet.Removal) {
	switch {
	case len(res.Removed) > 0:
		fmt.Fprintf(w, "removed network %s: %s\n", name, strings.Join(res.Removed, " "))
	case res.Record:
		fmt.Fprintf(w, "removed network %s's record: none of its namespaces was left\n", name)
	}
}

// fabricFlags are the emulated network's settings, shared by netem up and
// netem relay.
func fabricFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "hosts", Value: 2, Usage: "hosts, 1 to 254"},
		&cli.IntFlag{Name: "planes", Value: 4, Usage: "planes (NIC ports per host), 1 to 8"},
		&cli.Float64Flag{Name: "rate-gbps", Value: 1, Usage: "every link's rate, Gb/s"},
		&cli.DurationFlag{Name: "delay", Value: 5 * time.Microsecond, Usage: "every link's delay"},
		&cli.Float64Flag{Name: "loss", Usage: "random loss on every link towards a host, 0 to 1"},
		&cli.Float64Flag{Name: "burst-len", Usage: "with --loss: lose in bursts of this many packets on average (Gilbert-Elliott, the same mean rate), at least 1"},
		&cli.Float64Flag{Name: "reorder", Usage: "on every link towards a host, the share of datagrams held back by --reorder-gap, so that later ones overtake them, 0 to 1"},
		&cli.DurationFlag{Name: "reorder-gap", Value: 100 * time.Microsecond, Usage: "how long a reordered datagram is held back"},
		&cli.Float64Flag{Name: "duplicate", Usage: "on every link towards a host, the share of datagrams delivered twice, 0 to 1"},
		&cli.Float64Flag{Name: "corrupt", Usage: "on every link towards a host, the share of datagrams with one bit flipped, 0 to 1"},
		&cli.StringSliceFlag{Name: "plane-delay", Usage: "P=D: plane P's links have a delay of D (repeat for more planes)"},
		&cli.IntFlag{Name: "ecn-kib", Value: 512, Usage: "DCTCP step marking threshold of every queue, KiB (0: no marking)"},
		&cli.IntFlag{Name: "queue-kib", Value: 4096, Usage: "every queue's limit, KiB"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the emulator's random choices"},
		&cli.IntFlag{Name: "blackhole-plane", Value: -1, Usage: "a plane to blackhole (its links drop everything; the hosts' interfaces stay up), -1 for none"},
		&cli.DurationFlag{Name: "blackhole-at", Usage: "when the blackhole starts, from the start"},
		&cli.DurationFlag{Name: "blackhole-for", Usage: "how long it lasts before the plane is repaired (0: to the end)"},
		&cli.DurationFlag{Name: "for", Usage: "stop after this long (0: when interrupted)"},
	}
}

// impairments are what the fabric flags do to every link towards a host:
// loss, random or in bursts, reordering, duplication and corruption.
func impairments(c *cli.Context, cmd string) (netem.Impairments, error) {
	var im netem.Impairments
	loss, burst := c.Float64("loss"), c.Float64("burst-len")
	for _, p := range []struct {
		name string
		v    float64
	}{{"reorder", c.Float64("reorder")}, {"duplicate", c.Float64("duplicate")}, {"corrupt", c.Float64("corrupt")}} {
		if !(p.v >= 0 && p.v <= 1) {
			return im, usagef(c, "%s: --%s must be 0 to 1", cmd, p.name)
		}
	}
	switch {
	case c.IsSet("burst-len") && (loss <= 0 || burst < 1):
		return im, usagef(c, "%s: --burst-len comes with --loss, and is at least 1", cmd)
	case c.Duration("reorder-gap") < 0:
		return im, usagef(c, "%s: --reorder-gap must not be negative", cmd)
	case burst >= 1:
		im.Loss = netem.BurstLoss(loss, burst)
	case loss > 0:
		im.Loss = &netem.RandomLoss{P: loss}
	}
	im.Reorder, im.ReorderGap = c.Float64("reorder"), c.Duration("reorder-gap")
	im.Duplicate, im.Corrupt = c.Float64("duplicate"), c.Float64("corrupt")
	return im, nil
}

// fabricConfig checks the fabric flags and makes netem's configuration.
func fabricConfig(c *cli.Context) (netem.Config, error) {
	rate, loss := c.Float64("rate-gbps"), c.Float64("loss")
	cmd := "netem " + c.Command.Name
	switch {
	case c.Int("hosts") < 1 || c.Int("hosts") > 254 || c.Int("planes") < 1 || c.Int("planes") > 8:
		return netem.Config{}, usagef(c, "%s: --hosts must be 1 to 254, --planes 1 to 8", cmd)
	case rate <= 0 || rate > 1000:
		return netem.Config{}, usagef(c, "%s: --rate-gbps must be over 0 and at most 1000", cmd)
	case loss < 0 || loss >= 1:
		return netem.Config{}, usagef(c, "%s: --loss must be 0 or more and under 1", cmd)
	case c.Duration("delay") < 0:
		return netem.Config{}, usagef(c, "%s: --delay must not be negative", cmd)
	case c.Int("ecn-kib") < 0 || c.Int("queue-kib") < 1:
		return netem.Config{}, usagef(c, "%s: --ecn-kib must not be negative, --queue-kib must be at least 1", cmd)
	}
	l := netem.LinkConfig{Rate: int64(rate * 1e9), Delay: c.Duration("delay"),
		Queue: netem.QueueConfig{Limit: c.Int("queue-kib") << 10, ECNThreshold: c.Int("ecn-kib") << 10}}
	down := l
	im, err := impairments(c, cmd)
	if err != nil {
		return netem.Config{}, err
	}
	down.Impair = im
	fc := netem.Config{Seed: c.Uint64("seed"), Uplink: l, Downlink: down}
	for _, v := range c.StringSlice("plane-delay") {
		ps, ds, ok := strings.Cut(v, "=")
		p, perr := strconv.Atoi(ps)
		d, derr := time.ParseDuration(ds)
		if !ok || perr != nil || derr != nil || p < 0 || p >= c.Int("planes") || d < 0 {
			return netem.Config{}, usagef(c, "%s: --plane-delay %q: want P=D, a plane from 0 to %d and a delay not negative", cmd, v, c.Int("planes")-1)
		}
		for _, k := range []struct {
			kind netem.LinkKind
			link netem.LinkConfig
		}{{netem.Uplink, fc.Uplink}, {netem.Downlink, fc.Downlink}} {
			k.link.Delay = d
			fc.Overrides = append(fc.Overrides, netem.Override{Plane: p, Match: netem.LinkMatch{Kind: k.kind, Host: -1, Leaf: -1, Spine: -1}, Link: k.link})
		}
	}
	if p := c.Int("blackhole-plane"); p >= 0 {
		at, lasts := c.Duration("blackhole-at"), c.Duration("blackhole-for")
		if p >= c.Int("planes") || at < 0 || lasts < 0 {
			return netem.Config{}, usagef(c, "%s: --blackhole-plane must be a plane (0 to %d), --blackhole-at and --blackhole-for not negative", cmd, c.Int("planes")-1)
		}
		fc.Faults = append(fc.Faults, netem.Fault{At: at, Kind: netem.PlaneBlackhole, Plane: p})
		if lasts > 0 {
			fc.Faults = append(fc.Faults, netem.Fault{At: at + lasts, Kind: netem.Repair, Plane: p})
		}
	}
	return fc, nil
}

// runContext ends on an interrupt, SIGTERM or SIGHUP, or after --for.
func runContext(c *cli.Context) (context.Context, func()) {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	if d := c.Duration("for"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		return ctx, func() { cancel(); stop() }
	}
	return ctx, stop
}

// runRelay runs a relay until ctx ends.
func runRelay(ctx context.Context, w io.Writer, cfg relay.Config) error {
	r, err := relay.Start(cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "host\tplane\tbind here (real)\tsend here (virtual)")
	for h := 0; h < cfg.Hosts; h++ {
		for p := 0; p < cfg.Planes; p++ {
			fmt.Fprintf(tw, "%d\t%d\t%v\t%v\n", h, p, relay.RealAddr(h, p), relay.VirtualAddr(h, p))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "relaying ports %d and %d-%d\n", cfg.Ports[0], cfg.Ports[min(1, len(cfg.Ports)-1)], cfg.Ports[len(cfg.Ports)-1])
	<-ctx.Done()
	st := r.Stats()
	if err := r.Close(); err != nil {
		return err
	}
	fmt.Fprintf(w, "stopped: %d datagrams relayed, %d delivered, %d from unknown addresses, %d from ports not relayed\n",
		st.Relayed, st.Delivered, st.Unknown, st.Unmapped)
	return nil
}

// runNetemUp runs the emulated network until ctx ends.
func runNetemUp(ctx context.Context, w io.Writer, cfg tunnet.Config) error {
	n, err := tunnet.Up(cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "host\tnamespace\taddresses (plane 0, 1, ...)")
	for h := 0; h < cfg.Hosts; h++ {
		fmt.Fprintf(tw, "%d\t%s\t", h, n.Namespace(h))
		for p := 0; p < cfg.Planes; p++ {
			fmt.Fprintf(tw, "%v ", tunnet.Addr(h, p))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintf(w, "forwarding; run programs in a host with: %s netem exec --name %s HOST -- COMMAND\n", progName, cfg.Name)
	<-ctx.Done()
	st := n.Stats()
	if err := n.Close(); err != nil {
		return err
	}
	fmt.Fprintf(w, "stopped: %d packets forwarded, %d delivered, %d malformed; every namespace removed\n", st.Read, st.Written, st.Malformed)
	return nil
}
