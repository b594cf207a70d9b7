package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/report"
	"github.com/mroce/mroce/tracelog"
)

// traceFlag is --trace of demo, send, recv and bench; sim has its own.
var traceFlag = &cli.StringFlag{Name: "trace", Usage: "write the engine's decisions to this file, a JSON line each (packets sent, acknowledged and lost, path states, timers, windows, rate hints): mroce trace reads it"}

// traceFile is --trace's file and its writer, or nothing.
type traceFile struct {
	f *os.File
	w *tracelog.Writer
}

// openTrace creates --trace's file, when it is given.
func openTrace(c *cli.Context) (*traceFile, error) {
	path := c.String("trace")
	if path == "" {
		return &traceFile{}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, usagef(c, "%s: --trace: %v", commandName(c), err)
	}
	return &traceFile{f: f, w: tracelog.NewWriter(f)}, nil
}

// withTrace runs run with --trace's tracer, nil without it, and closes
// the file once run has returned and with it the engine.
func withTrace(c *cli.Context, run func(engine.Tracer) error) error {
	trace, err := openTrace(c)
	if err != nil {
		return err
	}
	return trace.close(run(trace.tracer()))
}

// tracer is the engine's tracer, nil without --trace.
func (t *traceFile) tracer() engine.Tracer {
	if t.w == nil {
		return nil
	}
	return t.w
}

// close flushes and closes the file once the engine has stopped, and
// returns err, or the file's error when err is nil.
func (t *traceFile) close(err error) error {
	if t.f == nil {
		return err
	}
	ferr := t.w.Flush()
	if cerr := t.f.Close(); ferr == nil {
		ferr = cerr
	}
	if err == nil && ferr != nil {
		return fmt.Errorf("--trace: %w", ferr)
	}
	return err
}

// traceCommand defines mroce trace.
func traceCommand() *cli.Command {
	return &cli.Command{
		Name:      "trace",
		Usage:     "sum up a --trace file, and plot how the sender decided over time",
		ArgsUsage: "FILE",
		Description: "trace reads the file --trace wrote (demo, send, recv, bench, sim) and prints, for each path\n" +
			"of each connection, what it sent, resent and had acknowledged, its losses by cause, its\n" +
			"timeouts and moves, its RTTs and its states. --plot draws one connection: each path's\n" +
			"DSNs over time, resends and losses marked, and under it each path's PSNs with its losses,\n" +
			"each path's window, each path's RTT and the rate hint the sender followed. The\n" +
			"examples read what mroce demo --size-mib 8 --loss 0.01 --trace demo.trace wrote.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "plot", Usage: "draw the time-sequence plot to this .svg or .png file"},
			&cli.StringFlag{Name: "conn", Usage: "the connection to plot, by its id as the summary prints it (default: the first that sent data)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef(c, "trace: one FILE, the one --trace wrote")
			}
			f, err := os.Open(c.Args().First())
			if errors.Is(err, fs.ErrNotExist) {
				return usagef(c, "trace: %v", err)
			} else if err != nil {
				return err
			}
			defer f.Close()
			evs, err := tracelog.Read(f)
			if err != nil {
				return err
			}
			var conn uint32
			if s := c.String("conn"); s != "" {
				if _, err := fmt.Sscanf(s, "%x", &conn); err != nil {
					return usagef(c, "trace: --conn %q: want a connection id in hex", s)
				}
			}
			if path := c.String("plot"); path != "" {
				if err := report.CheckPlotPath(path); err != nil {
					return usagef(c, "trace: --plot: %v", err)
				}
			}
			tracelog.WriteSummary(c.App.Writer, evs)
			if path := c.String("plot"); path != "" {
				if err := tracelog.Plot(evs, conn).Save(path); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "plot: %s\n", path)
			}
			return nil
		},
	}
}
