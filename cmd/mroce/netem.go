package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/tunnet"
)

func netemCommand() *cli.Command {
	name := &cli.StringFlag{Name: "name", Value: "net", Usage: "the emulated network's name: its namespaces are mroce-NAME-hN"}
	return &cli.Command{
		Name:  "netem",
		Usage: "run the kernel-path emulator: hosts in network namespaces joined through netem (Linux, root)",
		Description: "netem up makes emulated hosts, each a network namespace with one TUN interface per\n" +
			"plane (host N's address on plane P is 10.P.0.N+1/16 on interface mrP), and forwards their\n" +
			"packets through the emulator (rate, delay, queues with ECN marking, loss) until\n" +
			"interrupted; then it removes everything it made. netem exec runs a program in a host;\n" +
			"netem status lists the emulated hosts that exist; netem down removes what an emulator\n" +
			"that died left behind. Needs Linux, root and ip (iproute2).",
		Subcommands: []*cli.Command{
			{
				Name:  "up",
				Usage: "start an emulated network and forward its packets until interrupted",
				Flags: []cli.Flag{
					name,
					&cli.IntFlag{Name: "hosts", Value: 2, Usage: "hosts, 1 to 254"},
					&cli.IntFlag{Name: "planes", Value: 4, Usage: "planes (NIC ports per host), 1 to 8"},
					&cli.Float64Flag{Name: "rate-gbps", Value: 1, Usage: "every link's rate, Gb/s"},
					&cli.DurationFlag{Name: "delay", Value: 5 * time.Microsecond, Usage: "every link's delay"},
					&cli.Float64Flag{Name: "loss", Usage: "random loss on every link towards a host, 0 to 1"},
					&cli.IntFlag{Name: "ecn-kib", Value: 512, Usage: "DCTCP step marking threshold of every queue, KiB (0: no marking)"},
					&cli.IntFlag{Name: "queue-kib", Value: 4096, Usage: "every queue's limit, KiB"},
					&cli.IntFlag{Name: "mtu", Value: 9000, Usage: "the TUN interfaces' MTU"},
					&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the emulator's random choices"},
					&cli.DurationFlag{Name: "for", Usage: "stop after this long (0: when interrupted)"},
				},
				Action: func(c *cli.Context) error {
					cfg, err := netemConfig(c)
					if err != nil {
						return err
					}
					ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
					defer stop()
					if d := c.Duration("for"); d > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, d)
						defer cancel()
					}
					return runNetemUp(ctx, c.App.Writer, cfg)
				},
			},
			{
				Name:      "exec",
				Usage:     "run a program inside an emulated host",
				UsageText: progName + " netem exec [--name NAME] HOST -- COMMAND [ARGS...]",
				Flags:     []cli.Flag{name},
				Action: func(c *cli.Context) error {
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
					cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
					cmd.Stdin, cmd.Stdout, cmd.Stderr = c.App.Reader, c.App.Writer, c.App.ErrWriter
					if err := cmd.Run(); err != nil {
						var exit *exec.ExitError
						if errors.As(err, &exit) {
							return exitStatus(exit.ExitCode()) // the program's own: passed on
						}
						return err
					}
					return nil
				},
			},
			{
				Name:  "status",
				Usage: "list the emulated hosts (network namespaces) that exist",
				Flags: []cli.Flag{&cli.StringFlag{Name: "name", Usage: "only this network's"}},
				Action: func(c *cli.Context) error {
					left, err := tunnet.List(c.String("name"))
					if err != nil {
						return err
					}
					if len(left) == 0 {
						fmt.Fprintln(c.App.Writer, "no emulated hosts")
					}
					for _, ns := range left {
						fmt.Fprintln(c.App.Writer, ns)
					}
					return nil
				},
			},
			{
				Name:  "down",
				Usage: "remove the emulated hosts an emulator left behind",
				Flags: []cli.Flag{&cli.StringFlag{Name: "name", Usage: "only this network's (default: every mroce-* namespace)"}},
				Action: func(c *cli.Context) error {
					left, _ := tunnet.List(c.String("name"))
					if err := tunnet.Down(c.String("name")); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "removed %d emulated hosts\n", len(left))
					return nil
				},
			},
		},
	}
}

// netemConfig checks the flags of netem up and makes the network's
// configuration.
func netemConfig(c *cli.Context) (tunnet.Config, error) {
	rate, loss := c.Float64("rate-gbps"), c.Float64("loss")
	switch {
	case rate <= 0 || rate > 1000:
		return tunnet.Config{}, usagef(c, "netem up: --rate-gbps must be over 0 and at most 1000")
	case loss < 0 || loss >= 1:
		return tunnet.Config{}, usagef(c, "netem up: --loss must be 0 or more and under 1")
	case c.Duration("delay") < 0:
		return tunnet.Config{}, usagef(c, "netem up: --delay must not be negative")
	case c.Int("ecn-kib") < 0 || c.Int("queue-kib") < 1:
		return tunnet.Config{}, usagef(c, "netem up: --ecn-kib must not be negative, --queue-kib must be at least 1")
	}
	l := netem.LinkConfig{Rate: int64(rate * 1e9), Delay: c.Duration("delay"),
		Queue: netem.QueueConfig{Limit: c.Int("queue-kib") << 10, ECNThreshold: c.Int("ecn-kib") << 10}}
	down := l
	if loss > 0 {
		down.Impair.Loss = &netem.RandomLoss{P: loss}
	}
	cfg := tunnet.Config{Name: c.String("name"), Hosts: c.Int("hosts"), Planes: c.Int("planes"), MTU: c.Int("mtu"),
		Fabric: netem.Config{Seed: c.Uint64("seed"), Uplink: l, Downlink: down}}
	return cfg, nil
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
