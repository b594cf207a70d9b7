// Command mroce is the command-line tool of the mroce transport. It holds
// the commands, their flags and what they print. The packages it calls do
// the work. app/ moves and measures data over the verbs API, sim and report
// run and draw the scenarios, conformance and app/contract check
// implementations, dissect decodes packets, and netem, relay and tunnet
// emulate networks.
//
// The exit status is 0 on success and 1 for malformed packets and runtime
// errors. It is 2 for bad usage, such as unknown commands or flags, wrong
// arguments or missing files, so that scripts can tell the two apart.
// send and recv say more: 3 when the peer gave up and said why, 4 when the
// peer is gone or silent, 5 when the data did not verify, and 128 plus the
// signal when interrupted.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

const progName = "mroce"

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// run runs the tool with args, the program name first, and returns its
// exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	err := app.Run(hoistFlags(app, args))
	if err == nil {
		return 0
	}
	var status exitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	fmt.Fprintf(stderr, "%s: %v\n", progName, err)
	var withStatus *statusError
	if errors.As(err, &withStatus) {
		return withStatus.status
	}
	var usage *usageError
	var exit cli.ExitCoder
	switch {
	case errors.As(err, &usage):
		if usage.command != "" {
			fmt.Fprintf(stderr, "Run '%s %s --help' for usage.\n", progName, usage.command)
		} else {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", progName)
		}
		return 2
	case errors.As(err, &exit) && exit.ExitCode() == 3: // cli's "No help topic"
		return 2
	}
	return 1
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      progName,
		Usage:     "tools for the mroce transport, an RDMA-style transport over UDP",
		UsageText: progName + " COMMAND [options] [arguments...]",
		Description: "mroce demo moves data between two emulated hosts over many paths and planes, in\n" +
			"virtual time, and reports what happened. mroce decode prints every field of packets of\n" +
			"the wire format (docs/spec.md), given as hex or found in pcap and pcapng captures.\n" +
			"mroce bench-net measures one connection over real UDP on loopback beside raw UDP and TCP.",
		HideVersion:    true,
		Reader:         stdin,
		Writer:         stdout,
		ErrWriter:      stderr,
		ExitErrHandler: func(*cli.Context, error) {}, // run maps errors to exit codes
		OnUsageError:   onUsageError,
		Commands: []*cli.Command{demoCommand(), sendCommand(), recvCommand(), benchCommand(), simCommand(), benchNetCommand(), netemCommand(),
			conformanceCommand(), decodeCommand(), traceCommand(), keygenCommand(), versionCommand(), completionCommand(), manCommand(), goldenPcapCommand(), wiresharkCommand()},
		EnableBashCompletion: true,
		Flags:                []cli.Flag{&cli.BoolFlag{Name: "version", Usage: "print the versions of mroce, Go and the wire format, as mroce version does"}},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return &usageError{msg: fmt.Sprintf("unknown command %q", c.Args().First())}
			}
			if c.Bool("version") {
				printVersion(c.App.Writer)
				return nil
			}
			return cli.ShowAppHelp(c)
		},
	}
	for _, cmd := range app.Commands {
		cmd.OnUsageError = onUsageError
		nameUnknownSubcommands(cmd)
	}
	addExamples("", app.Commands)
	return app
}

// nameUnknownSubcommands makes a command of subcommands, and each below
// it, refuse a word that is none of them in one line with exit status 2,
// and show its help when given nothing.
func nameUnknownSubcommands(cmd *cli.Command) {
	if len(cmd.Subcommands) == 0 {
		return
	}
	if cmd.Action == nil {
		cmd.Action = func(c *cli.Context) error {
			if !c.Args().Present() {
				return cli.ShowSubcommandHelp(c)
			}
			var names []string
			for _, sub := range cmd.Subcommands {
				if !sub.Hidden && sub.Name != "help" {
					names = append(names, sub.Name)
				}
			}
			return usagef(c, "%s: unknown command %q (want one of %s)", cmd.Name, c.Args().First(), strings.Join(names, ", "))
		}
	}
	for _, sub := range cmd.Subcommands {
		sub.OnUsageError = onUsageError
		nameUnknownSubcommands(sub)
	}
}

// exitStatus is an exit status the tool returns with nothing printed, such
// as that of the program netem exec ran.
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// usageError is a command line the tool cannot run. Its exit status is 2.
type usageError struct {
	msg     string
	command string // the command whose --help to point at, or ""
}

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError for the command of c.
func usagef(c *cli.Context, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), command: commandName(c)}
}

func onUsageError(c *cli.Context, err error, _ bool) error {
	return &usageError{msg: err.Error(), command: commandName(c)}
}

func commandName(c *cli.Context) string {
	if c.Command == nil || c.Command.Name == progName {
		return ""
	}
	// A subcommand's help name is the whole command line that reaches it.
	if name, ok := strings.CutPrefix(c.Command.HelpName, progName+" "); ok {
		return name
	}
	return c.Command.Name
}

// hoistFlags moves the flags that follow a command's arguments ahead of
// them, so that `send FILE --to ADDR` reads as `send --to ADDR FILE`: the
// flag library stops at the first argument. Only the flags the command
// defines move, each with its value; anything after "--" stays, as do
// words that are no flag of the command, which a command running another
// program (netem exec) passes on.
func hoistFlags(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	commands, flags := app.Commands, app.Flags
	i := 1
	// The command path, with any flags of the commands along it.
	for i < len(args) {
		if cmd := findCommand(commands, args[i]); cmd != nil {
			out = append(out, args[i])
			commands, flags = cmd.Subcommands, cmd.Flags
			i++
			continue
		}
		if n := flagTokens(flags, args[i:]); n > 0 {
			out = append(out, args[i:i+n]...)
			i += n
			continue
		}
		break
	}
	var hoisted, rest []string
	for i < len(args) {
		if args[i] == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		if n := flagTokens(flags, args[i:]); n > 0 {
			hoisted = append(hoisted, args[i:i+n]...)
			i += n
			continue
		}
		rest = append(rest, args[i])
		i++
	}
	return append(append(out, hoisted...), rest...)
}

// findCommand returns the command of commands named or aliased name.
func findCommand(commands []*cli.Command, name string) *cli.Command {
	for _, c := range commands {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// flagTokens reports how many tokens at the head of args are one flag of
// flags with its value: 1 for a boolean or a --name=value, 2 for a flag
// whose value follows, 0 for no flag of flags.
func flagTokens(flags []cli.Flag, args []string) int {
	tok := args[0]
	if len(tok) < 2 || tok[0] != '-' || tok == "--" {
		return 0
	}
	name, _, hasValue := strings.Cut(strings.TrimLeft(tok, "-"), "=")
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		if _, isBool := f.(*cli.BoolFlag); isBool || hasValue || len(args) < 2 {
			return 1
		}
		return 2
	}
	return 0
}
