package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/app/contract"
	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/conformance"
	"github.com/mroce/mroce/tracelog"
)

// conformanceCommand defines mroce conformance and its subcommands. It is
// over 80 lines because it is one cli.Command literal declaring flags.
func conformanceCommand() *cli.Command {
	// report holds the flags of how every subcommand writes its results.
	report := []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"},
		&cli.StringFlag{Name: "html", Usage: "also write the results as a static HTML page to this file"},
	}
	out := append([]cli.Flag{
		&cli.StringFlag{Name: "local", Value: "127.0.0.1", Usage: "the local address to probe from (on the responder's first plane)"},
	}, report...)
	return &cli.Command{
		Name:  "conformance",
		Usage: "check a responder against the wire specification, packet by packet",
		Description: "conformance probes a responder with crafted packets (gaps, duplicates, bad keys,\n" +
			"out-of-window DSNs, stale epochs, other versions, bad CRCs, wrapping PSNs) and checks its\n" +
			"ACKs, bitvectors and NACKs against docs/spec.md. 'probe' tests any implementation that\n" +
			"listens and grants remote write on a region (its key and length are the input);\n" +
			"'self' tests this mroce. Exit status 1 when a case fails. docs/conformance.md lists\n" +
			"every case and its pass criteria.",
		Subcommands: []*cli.Command{
			{
				Name:   "endpoint",
				Usage:  "be this mroce as an endpoint of the runner's contract (ROLE, TESTCASE, PLANES, PORT, PEER, SIZE, LOGDIR, REQUESTERS, START)",
				Action: func(c *cli.Context) error { return runContractEndpoint(c.Context, c.App.ErrWriter) },
			},
			{
				Name:  "run",
				Usage: "run the two-endpoint cases through the emulator (the UDP relay: no root; or the TUN emulator: root) with a requester and a responder",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "emulator", Value: conformance.Relay, Usage: "relay (no root, loopback addresses) or tun (Linux and root: each endpoint in its own network namespace, on real kernel sockets)"},
					&cli.StringFlag{Name: "requester", Usage: "the requester's command line (default: this mroce)"},
					&cli.StringFlag{Name: "responder", Usage: "the responder's command line (default: this mroce)"},
					&cli.StringSliceFlag{Name: "impl", Usage: "NAME=COMMAND: an implementation (its command line following the endpoint contract) for the interop matrix, which runs every case for every ordered pair of this mroce and the --impl ones; repeat for more"},
					&cli.StringFlag{Name: "logs", Usage: "the directory for every case's logs and reports (default: a new one in the system's temporary directory, named on standard error)"},
					&cli.StringSliceFlag{Name: "cases", Usage: "run only these cases (default: all)"},
					&cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "how long a case may take"},
				}, report...),
				Action: conformanceRun,
			},
			{
				Name:  "probe",
				Usage: "probe the responder at --target",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "target", Required: true, Usage: "the responder's ADDR:PORT on its first plane"},
					&cli.Uint64Flag{Name: "rkey", Required: true, Usage: "a key of a region the responder grants remote write on"},
					&cli.Uint64Flag{Name: "len", Required: true, Usage: "that region's length, bytes (at least 4096)"},
					&cli.IntFlag{Name: "streams", Value: 2, Usage: "streams to ask for"},
					&cli.StringFlag{Name: "name", Value: "the target", Usage: "the implementation's name, for the report"},
					&cli.StringFlag{Name: "psk-file", Usage: "the responder is in the authenticated mode with the pre-shared key in this file: every case runs in the mode, and the auth- cases run"},
					&cli.StringFlag{Name: "key-file", Usage: "the responder is in the authenticated mode with static keys: the prober's own X25519 private key, which the responder admits"},
					&cli.StringSliceFlag{Name: "peer-key", Usage: "with --key-file: the responder's public key"},
					&cli.StringFlag{Name: "suite", Value: "aes128gcm", Usage: "the cipher the prober asks for: aes128gcm or chacha20poly1305"},
				}, out...),
				Action: func(c *cli.Context) error {
					addr, err := netip.ParseAddrPort(c.String("target"))
					if err != nil {
						return usagef(c, "conformance probe: --target %q: want ADDR:PORT", c.String("target"))
					}
					if c.Uint64("len") < 4096 || c.Int("streams") < 1 || c.Int("streams") > 65535 {
						return usagef(c, "conformance probe: --len must be at least 4096, --streams 1 to 65535")
					}
					a, err := parseAuthOptions(c)
					if err != nil {
						return err
					}
					t := conformance.Target{Addr: addr, RKey: c.Uint64("rkey"), Len: c.Uint64("len"), Streams: c.Int("streams"), Auth: a.cred}
					return runConformance(c, c.String("name"), t)
				},
			},
			{
				Name:  "sender",
				Usage: "test a requester (a sender of data) from the wire: this probe accepts its connection and answers with crafted ACKs and NACKs",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "requester", Usage: "the requester's command line, following the endpoint contract (default: this mroce)"},
					&cli.StringFlag{Name: "probe", Value: "127.0.0.2", Usage: "the address the probe listens on (the requester binds 127.0.0.1)"},
					&cli.StringFlag{Name: "logs", Usage: "the directory for the requester's logs (default: a new one in the system's temporary directory, named on standard error)"},
					&cli.StringSliceFlag{Name: "cases", Usage: "run only these cases (default: all)"},
				}, report...),
				Action: conformanceSender,
			},
			{
				Name:  "self",
				Usage: "run this mroce as the responder, in this process, and probe it",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "listen", Value: "127.0.0.1", Usage: "the responder's address"},
					&cli.BoolFlag{Name: "auth", Usage: "run the responder in the authenticated mode with a fresh pre-shared key, and every case in the mode"},
				}, out...),
				Action: func(c *cli.Context) error {
					a, err := netip.ParseAddr(c.String("listen"))
					if err != nil {
						return usagef(c, "conformance self: --listen %q: want an address", c.String("listen"))
					}
					var cred *auth.Credentials
					if c.Bool("auth") {
						psk := make([]byte, auth.PSKLen)
						if _, err := rand.Read(psk); err != nil {
							return err
						}
						cred = &auth.Credentials{Method: auth.MethodPSK, PSK: psk}
					}
					h, t, err := contract.ProbeTarget(a, cred)
					if err != nil {
						return fmt.Errorf("conformance self: %w", err)
					}
					defer h.Close()
					return runConformance(c, "mroce (this build)", t)
				},
			},
		},
	}
}

// conformanceRun runs the two-endpoint cases for one pair, or for every
// pair of the interop matrix when --impl names implementations.
func conformanceRun(c *cli.Context) error {
	mroce, err := thisEndpoint()
	if err != nil {
		return err
	}
	impls, err := parseImpls(c, c.StringSlice("impl"))
	if err != nil {
		return err
	}
	cases, unknown := selectCases(conformance.RunnerCases, func(rc conformance.RunnerCase) string { return rc.Name }, c.StringSlice("cases"))
	if unknown != "" {
		return usagef(c, "conformance run: no case %q", unknown)
	}
	emu := c.String("emulator")
	if emu != conformance.Relay && emu != conformance.TUN {
		return usagef(c, "conformance run: --emulator %q: want relay or tun", emu)
	}
	logs, err := logsDir(c)
	if err != nil {
		return err
	}
	rep := conformance.Report{Target: "the " + emu + " emulator", Started: time.Now()}
	if len(impls) > 0 {
		if c.IsSet("requester") || c.IsSet("responder") {
			return usagef(c, "conformance run: --impl runs every pair: no --requester or --responder with it")
		}
		impls = append([]conformance.Implementation{mroce}, impls...)
		var names []string
		for _, im := range impls {
			names = append(names, im.Name)
		}
		rep.Implementation = "the interop matrix of " + strings.Join(names, ", ")
		rep.Results = conformance.RunMatrix(emu, impls, cases, logs, c.Duration("timeout"))
		return writeConformance(c, rep)
	}
	impl := func(flag string) conformance.Implementation {
		if v := c.String(flag); v != "" {
			return commandImpl(v)
		}
		return mroce
	}
	req, resp := impl("requester"), impl("responder")
	rep.Implementation = req.Name + " -> " + resp.Name
	rep.Results = conformance.RunPair(emu, req, resp, cases, logs, c.Duration("timeout"))
	return writeConformance(c, rep)
}

// logsDir is --logs, or a new directory in the system's temporary one,
// which is named on standard error: a run writes its logs only where it
// was told, or where it says.
func logsDir(c *cli.Context) (string, error) {
	if dir := c.String("logs"); dir != "" {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "mroce-conformance-")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(c.App.ErrWriter, "logs: %s\n", dir)
	return dir, nil
}

// conformanceSender checks a requester from the wire through the sender
// probe.
func conformanceSender(c *cli.Context) error {
	probe, err := netip.ParseAddr(c.String("probe"))
	if err != nil {
		return usagef(c, "conformance sender: --probe %q: want an address", c.String("probe"))
	}
	req, err := thisEndpoint()
	if err != nil {
		return err
	}
	if v := c.String("requester"); v != "" {
		req = commandImpl(v)
	}
	argv, name := req.Cmd, req.Name
	cases, unknown := selectCases(conformance.SenderCases, func(sc conformance.SenderCase) string { return sc.Name }, c.StringSlice("cases"))
	if unknown != "" {
		return usagef(c, "conformance sender: no case %q", unknown)
	}
	logs, err := logsDir(c)
	if err != nil {
		return err
	}
	env := conformance.SenderEnv{Local: probe, Start: contract.RequesterStarter(argv, logs)}
	rep := conformance.Report{Implementation: name, Target: "the requester, through the sender probe", Started: time.Now()}
	rep.Results = conformance.RunSender(env, cases)
	return writeConformance(c, rep)
}

// runContractEndpoint reads the contract's variables, plays the role
// they name and prints why it failed. The runner reads the exit status, so
// errors become exit statuses here rather than messages from run.
func runContractEndpoint(ctx context.Context, errOut io.Writer) error {
	cfg, err := contract.ParseEnv(os.Getenv)
	if errors.Is(err, contract.ErrUnsupported) {
		return exitStatus(conformance.Unsupported)
	}
	if err == nil {
		err = runTracedEndpoint(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(errOut, "endpoint:", err)
		return exitStatus(1)
	}
	return nil
}

func runConformance(c *cli.Context, name string, t conformance.Target) error {
	local, err := netip.ParseAddr(c.String("local"))
	if err != nil {
		return usagef(c, "conformance: --local %q: want an address", c.String("local"))
	}
	rep := conformance.Report{Implementation: name, Target: t.Addr.String(), Started: time.Now()}
	cases := append(slices.Clone(conformance.Cases), conformance.AuthCases...)
	rep.Results = conformance.Run(conformance.Env{Target: t, Local: local}, cases)
	return writeConformance(c, rep)
}

// commandImpl is the implementation a command line runs, named by it.
func commandImpl(cmd string) conformance.Implementation {
	return conformance.Implementation{Name: cmd, Cmd: strings.Fields(cmd)}
}

// parseImpls reads --impl NAME=COMMAND values. A name names the pair's log
// directory, so it holds letters, digits, '.', '_' and '-' only. It is not
// "mroce", which is this one.
func parseImpls(c *cli.Context, specs []string) ([]conformance.Implementation, error) {
	var out []conformance.Implementation
	seen := map[string]bool{"mroce": true}
	for _, spec := range specs {
		name, cmd, ok := strings.Cut(spec, "=")
		argv := strings.Fields(cmd)
		valid := name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
		switch {
		case !ok || !valid || len(argv) == 0:
			return nil, usagef(c, "conformance run: --impl %q: want NAME=COMMAND, NAME of letters, digits, '.', '_' and '-'", spec)
		case seen[name]:
			return nil, usagef(c, "conformance run: --impl %q: the name %q is taken", spec, name)
		}
		seen[name] = true
		out = append(out, conformance.Implementation{Name: name, Cmd: argv})
	}
	return out, nil
}

// writeConformance prints a conformance report as text or JSON, writes its
// HTML page if asked, and fails when a case failed.
func writeConformance(c *cli.Context, rep conformance.Report) error {
	var err error
	if c.Bool("json") {
		err = rep.JSON(c.App.Writer)
	} else {
		err = rep.Text(c.App.Writer)
	}
	if err != nil {
		return err
	}
	if path := c.String("html"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("conformance: --html: %w", err)
		}
		page := rep
		if dir, err := filepath.Abs(filepath.Dir(path)); err == nil {
			page = rep.RelativeTo(dir)
		}
		if err := page.HTML(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if !rep.Passed() {
		return exitStatus(1) // the report said which cases failed
	}
	return nil
}

// thisEndpoint is this mroce as an implementation of the endpoint
// contract, its own binary run as conformance endpoint.
func thisEndpoint() (conformance.Implementation, error) {
	self, err := os.Executable()
	if err != nil {
		return conformance.Implementation{}, err
	}
	return conformance.Implementation{Name: "mroce", Cmd: []string{self, "conformance", "endpoint"}}, nil
}

// selectCases returns the cases of all that names names, in the order
// named, or all of them when names is empty. It returns the first name of
// no case when there is one.
func selectCases[C any](all []C, name func(C) string, names []string) ([]C, string) {
	if len(names) == 0 {
		return all, ""
	}
	var out []C
	for _, n := range names {
		i := slices.IndexFunc(all, func(c C) bool { return name(c) == n })
		if i < 0 {
			return nil, n
		}
		out = append(out, all[i])
	}
	return out, ""
}

// runTracedEndpoint runs the endpoint, with MROCE_TRACE=1 writing its
// engine's decisions to LOGDIR's contract.TraceFile once the host closed.
func runTracedEndpoint(ctx context.Context, cfg contract.Config) error {
	if !cfg.Trace {
		return contract.Run(ctx, cfg)
	}
	f, err := os.Create(filepath.Join(cfg.LogDir, contract.TraceFile))
	if err != nil {
		return fmt.Errorf("MROCE_TRACE: %w", err)
	}
	trace := &traceFile{f: f, w: tracelog.NewWriter(f)}
	cfg.Tracer = trace.tracer()
	return trace.close(contract.Run(ctx, cfg))
}
