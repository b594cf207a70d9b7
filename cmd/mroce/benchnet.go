package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/netbench"
)

// benchNetCommand defines mroce bench-net.
func benchNetCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench-net",
		Usage: "measure one connection over real UDP on loopback beside raw UDP and TCP",
		Description: "bench-net moves the same number of bytes three ways on the loopback interface, in\n" +
			"one run: one mroce connection over the UDP driver (two endpoints in this process,\n" +
			"8 paths over 2 planes, 4 KiB packets), raw UDP through the same driver (the same\n" +
			"batching, GSO and GRO, no protocol, no flow control: what the receiver loses is\n" +
			"reported), and one Go TCP connection from one buffer into another; and the mroce\n" +
			"connection again in the authenticated mode (a pre-shared key, AES-128-GCM: every\n" +
			"packet sealed and opened). It prints each one's goodput and the process's CPU time\n" +
			"per GB, and the ratios of mroce to the others. Traffic stays on 127.0.0.0/8.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "size-mib", Value: 256, Usage: "MiB each transfer moves"},
			&cli.IntFlag{Name: "paths", Value: 8, Usage: "paths of the mroce connection, 1 to 64"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the mroce transfer to this file (go tool pprof reads it)"},
		},
		Action: func(c *cli.Context) error {
			size, paths := c.Int("size-mib"), c.Int("paths")
			if size < 1 || size > 4096 {
				return usagef(c, "bench-net: --size-mib must be 1 to 4096")
			}
			if paths < 1 || paths > 64 {
				return usagef(c, "bench-net: --paths must be 1 to 64")
			}
			return runBenchNet(c.App.Writer, size<<20, paths, c.String("cpuprofile"))
		},
	}
}

func runBenchNet(w io.Writer, size, paths int, profile string) error {
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return err
	}
	ours, err := netbench.Mroce(size, paths)
	stopProfile()
	if err != nil {
		return err
	}
	psk := make([]byte, auth.PSKLen)
	if _, err := rand.Read(psk); err != nil {
		return err
	}
	authed, err := netbench.MroceAuth(size, paths, &auth.Credentials{Method: auth.MethodPSK, PSK: psk, Suite: auth.AES128GCM})
	if err != nil {
		return err
	}
	raw, err := netbench.RawUDP(size, 4096, 64)
	if err != nil {
		return err
	}
	tcp, err := netbench.TCP(size, 1<<20)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d MiB each, loopback\n\n", size>>20)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transfer\tGb/s\tCPU per GB\t\t")
	for _, r := range []netbench.Result{ours, authed, raw, tcp} {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f s\t\t%s\n", r.Name, r.Gbps(), r.CPUPerGB().Seconds(), r.Detail)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nmroce / TCP: %.2fx    mroce / raw UDP: %.2fx    authenticated / not: %.2fx\n",
		ours.Gbps()/tcp.Gbps(), ours.Gbps()/raw.Gbps(), authed.Gbps()/ours.Gbps())
	return nil
}
