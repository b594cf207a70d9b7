// Command busyhost measures mroce on a busy machine: it keeps a load of
// busy processes running beside transfers over loopback, where nothing is
// lost on the wire, and counts what the load alone made the paths do.
// Each run is one `mroce send` to one `mroce recv` over 4 loopback planes
// with packets of 1,500 bytes; the table gives, per run, the goodput, the
// path timeouts, how many of them the late ACKs showed spurious, the
// moves to new source ports, the retransmissions and the paths out of
// service when the transfer ended. With --conformance it then runs `mroce
// conformance run` under the same load and prints its verdicts.
//
// The load is N processes, each one spinning thread (GOMAXPROCS=1), as
// many runnable threads as a load average of N. It needs no root.
//
//	busyhost --mroce bin/mroce [--load 10] [--runs 5] [--size-mib 256] [--conformance]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

const spinArg = "spin"

func main() {
	if len(os.Args) > 1 && os.Args[1] == spinArg {
		spin()
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// spin is one process of the load. It runs until it is killed, or its
// parent dies (Pdeathsig).
func spin() {
	for {
	}
}

// planes are the receiver's addresses, one per plane. The sender's side is
// the system's choice for each, 127.0.0.1.
var planes = []string{"127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8"}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("busyhost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mroce := fs.String("mroce", "bin/mroce", "the mroce binary")
	load := fs.Int("load", 10, "busy processes beside the transfers")
	runs := fs.Int("runs", 5, "transfers")
	sizeMiB := fs.Int("size-mib", 256, "MiB a transfer")
	port := fs.Int("port", 4797, "the receiver's UDP port")
	conformance := fs.Bool("conformance", false, "also run mroce conformance run under the load")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *load < 0 || *runs < 1 || *sizeMiB < 1 {
		fmt.Fprintln(stderr, "busyhost: --load >= 0, --runs >= 1 and --size-mib >= 1")
		return 2
	}
	bin, err := filepath.Abs(*mroce)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "busyhost: the mroce binary: %v (make build, or --mroce)\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	stopLoad, err := startLoad(*load)
	if err != nil {
		fmt.Fprintf(stderr, "busyhost: the load: %v\n", err)
		return 1
	}
	defer stopLoad()
	time.Sleep(time.Second) // the load average is not needed, the threads are
	fmt.Fprintf(stdout, "Load: %d spinning processes on %d CPUs; loopback, 4 planes, MTU 1500, %d MiB a transfer.\n\n", *load, runtime.NumCPU(), *sizeMiB)

	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tGb/s\ttimeouts\tspurious\tmoves\tretransmits\tof packets %\tpaths out at the end\t")
	failed := 0
	for i := 1; i <= *runs && ctx.Err() == nil; i++ {
		r, err := transfer(ctx, bin, *port, *sizeMiB)
		if err != nil {
			fmt.Fprintf(stderr, "run %d: %v\n", i, err)
			failed++
			continue
		}
		fmt.Fprintf(tw, "%d\t%.3f\t%d\t%d\t%d\t%d\t%.3f\t%d\t\n", i, r.gbps, r.timeouts, r.spurious, r.moves, r.retransmits,
			100*float64(r.retransmits)/float64(max(r.packets, 1)), r.out)
	}
	tw.Flush()
	if *conformance && ctx.Err() == nil {
		fmt.Fprintln(stdout)
		if err := runConformance(ctx, bin, stdout); err != nil {
			fmt.Fprintf(stderr, "conformance: %v\n", err)
			failed++
		}
	}
	if failed > 0 || ctx.Err() != nil {
		return 1
	}
	return 0
}

// startLoad starts n spinning copies of this program and returns what
// stops them.
func startLoad(n int) (func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var procs []*exec.Cmd
	stop := func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}
	for range n {
		c := exec.Command(self, spinArg)
		c.Env = append(os.Environ(), "GOMAXPROCS=1")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		procs = append(procs, c)
	}
	return stop, nil
}

// result is what one transfer's sender reported.
type result struct {
	gbps                      float64
	timeouts, spurious, moves uint64
	retransmits, packets      uint64
	out                       int // paths not GOOD at the end
}

// transfer runs one recv and one send and reads the sender's report.
func transfer(ctx context.Context, bin string, port, sizeMiB int) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	listen := strings.Join(planes, ",")
	recv := exec.CommandContext(ctx, bin, "recv", "--listen", listen, "--port", fmt.Sprint(port), "--mtu", "1500", "--interval", "0")
	var recvOut strings.Builder
	recv.Stdout, recv.Stderr = &recvOut, &recvOut
	if err := recv.Start(); err != nil {
		return result{}, err
	}
	defer recv.Wait()
	defer recv.Process.Kill()
	time.Sleep(500 * time.Millisecond) // recv binds before send connects
	send := exec.CommandContext(ctx, bin, "send", "--to", listen, "--port", fmt.Sprint(port), "--mtu", "1500",
		"--size-mib", fmt.Sprint(sizeMiB), "--interval", "0", "--json")
	var errOut strings.Builder
	send.Stderr = &errOut
	out, err := send.Output()
	if err != nil {
		return result{}, fmt.Errorf("send: %v: %s", err, strings.TrimSpace(errOut.String()))
	}
	var rep struct {
		End struct {
			Gbps     float64 `json:"gbps"`
			Verified bool    `json:"verified"`
		} `json:"end"`
		Paths []struct {
			State       string `json:"state"`
			Packets     uint64 `json:"packets"`
			Retransmits uint64 `json:"retransmits"`
			Timeouts    uint64 `json:"timeouts"`
			Spurious    uint64 `json:"spurious_timeouts"`
			Repaths     uint64 `json:"repaths"`
		} `json:"paths_detail"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return result{}, fmt.Errorf("send's report: %v", err)
	}
	if !rep.End.Verified {
		return result{}, errors.New("the receiver did not confirm the data")
	}
	r := result{gbps: rep.End.Gbps}
	for _, p := range rep.Paths {
		r.timeouts += p.Timeouts
		r.spurious += p.Spurious
		r.moves += p.Repaths
		r.retransmits += p.Retransmits
		r.packets += p.Packets
		if p.State != "GOOD" && p.State != "SKIP" {
			r.out++
		}
	}
	return r, nil
}

// runConformance runs every case of mroce conformance run and prints its
// summary.
func runConformance(ctx context.Context, bin string, stdout io.Writer) error {
	logs, err := os.MkdirTemp("", "busyhost-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logs)
	c := exec.CommandContext(ctx, bin, "conformance", "run", "--logs", logs)
	c.Stdout, c.Stderr = stdout, stdout
	return c.Run()
}
