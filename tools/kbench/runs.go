//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mroce/mroce/app/xferstats"
)

// result is one measured transfer.
type result struct {
	Kind        string  `json:"kind"`         // "mroce" or "tcp"
	CC          string  `json:"cc,omitempty"` // TCP's congestion control
	Conns       int     `json:"conns"`        // connections: mroce 1, TCP 1 or one per plane
	Planes      int     `json:"planes"`       // planes the transfer may use
	Loss        float64 `json:"loss"`         // random loss set in the router, a fraction
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Gbps        float64 `json:"gbps"`
	OfCapacity  float64 `json:"of_capacity"` // of all planes' rate
	VsLossFree  float64 `json:"vs_loss_free,omitempty"`
	VsTarget    float64 `json:"vs_loss_free_over_1_minus_p,omitempty"`
	CPUSender   float64 `json:"cpu_s_sender"`
	CPUReceiver float64 `json:"cpu_s_receiver"`
	PerGB       perGB   `json:"cpu_s_per_gb"`
	Retransmits uint64  `json:"retransmits"`
	CEEchoed    uint64  `json:"ce_echoed"`    // CE marks the sender heard of from its receiver
	Router      counts  `json:"router"`       // what the router's rules counted
	MachineBusy float64 `json:"machine_busy"` // both cores' busy share during the run
	Verified    bool    `json:"verified"`
	Capped      bool    `json:"capped,omitempty"` // stopped at --max-seconds
	Error       string  `json:"error,omitempty"`
}

// perGB is CPU seconds per GB (10^9 bytes) moved.
type perGB struct {
	Sender   float64 `json:"sender"`
	Receiver float64 `json:"receiver"`
	Total    float64 `json:"total"`
}

func (r *result) finish(capMbit float64) {
	if r.Seconds > 0 {
		r.Gbps = float64(r.Bytes) * 8 / r.Seconds / 1e9
		r.OfCapacity = r.Gbps * 1e3 / capMbit
	}
	if r.Bytes > 0 {
		gb := float64(r.Bytes) / 1e9
		r.PerGB = perGB{r.CPUSender / gb, r.CPUReceiver / gb, (r.CPUSender + r.CPUReceiver) / gb}
	}
}

// ok is whether the result has a goodput worth reporting.
func (r *result) ok() bool { return r.Error == "" && r.Bytes > 0 }

// label names a run in the tables.
func (r *result) label() string {
	switch {
	case r.Kind == "mroce":
		return "mroce"
	case r.Conns == 1:
		return "TCP " + r.CC + ", 1 connection"
	default:
		return fmt.Sprintf("TCP %s, %d pinned", r.CC, r.Conns)
	}
}

// bench is one sitting: the testbed, its programs and the settings.
type bench struct {
	cfg   config
	tb    *testbed
	procs procs
	self  string // this program, run again for TCP
}

const (
	mrocePort = 4797
	tcpPort   = 5201
)

func (b *bench) capacityMbit() float64 { return float64(b.cfg.planes * b.cfg.rateMbit) }

func (b *bench) addrs(f func(int) string, n int) string {
	var a []string
	for p := 0; p < n; p++ {
		a = append(a, f(p))
	}
	return strings.Join(a, ",")
}

// limit is how long a run may take: --max-seconds, and time to start and
// to answer.
func (b *bench) limit() time.Duration {
	return time.Duration(b.cfg.maxSeconds*float64(time.Second)) + 20*time.Second
}

// mroceLimit is how long mroce send may run before it is stopped and its
// interval reports counted. TCP's clock starts once it is connected;
// mroce's process has to start and shake hands first.
func (b *bench) mroceLimit() time.Duration {
	return time.Duration(b.cfg.maxSeconds*float64(time.Second)) + 2*time.Second
}

// measured runs f between two readings of the router's counters and of
// the machine's CPU, with the router's rules set for loss, and records
// what failed in r.
func (b *bench) measured(loss float64, r *result, f func() error) {
	r.Loss = loss
	if err := b.tb.setRules(loss, b.cfg.ce); err != nil {
		r.Error = err.Error()
		return
	}
	busy0, all0 := cpuStat()
	err := f()
	busy1, all1 := cpuStat()
	if all1 > all0 {
		r.MachineBusy = float64(busy1-busy0) / float64(all1-all0)
	}
	if c, cerr := b.tb.readCounts(); cerr == nil {
		r.Router = c
	}
	r.finish(b.capacityMbit())
	if err != nil && r.Error == "" {
		r.Error = err.Error()
	}
	// What the run left in the queues drains before the next.
	time.Sleep(300 * time.Millisecond)
}

// mroceArgs are the common arguments of mroce send and recv.
func (b *bench) mroceArgs() []string {
	return []string{"--port", fmt.Sprint(mrocePort), "--paths", fmt.Sprint(b.cfg.paths), "--timeout", "10s"}
}

// startMroce starts mroce recv and then mroce send of sizeMiB.
func (b *bench) startMroce(ctx context.Context, sizeMiB int) (recv, send *proc, err error) {
	n := b.cfg.planes
	recv, err = b.procs.start(ctx, b.tb.rcv, "mroce recv", "listening on",
		append([]string{b.cfg.mroce, "recv", "--listen", b.addrs(receiverAddr, n), "--interval", "0"}, b.mroceArgs()...)...)
	if err != nil {
		return nil, nil, err
	}
	send, err = b.procs.start(ctx, b.tb.snd, "mroce send", "",
		append([]string{b.cfg.mroce, "send", "--to", b.addrs(receiverAddr, n), "--local", b.addrs(senderAddr, n),
			"--size-mib", fmt.Sprint(sizeMiB), "--json", "--interval", "1s"}, b.mroceArgs()...)...)
	if err != nil {
		b.procs.stop(recv)
		return nil, nil, err
	}
	return recv, send, nil
}

// mroceResult reads mroce send's report into r. A transfer stopped at the
// cap counts what its interval reports moved in the time they cover.
func mroceResult(send *proc, r *result) error {
	var rep xferstats.Report
	if err := json.Unmarshal(send.stdout(), &rep); err != nil {
		if f := send.failure(); f != nil {
			return f
		}
		return fmt.Errorf("mroce send --json: %v", err)
	}
	if rep.End != nil {
		r.Retransmits, r.CEEchoed = rep.End.Retransmits, rep.End.CEMarks
	}
	if !r.Capped {
		if rep.End == nil || rep.Error != "" {
			return fmt.Errorf("mroce send: %s", rep.Error)
		}
		r.Bytes, r.Seconds, r.Verified = rep.End.Bytes, rep.End.Seconds, rep.End.Verified
		if f := send.failure(); f != nil {
			return f
		}
		return nil
	}
	for _, iv := range rep.Intervals {
		r.Bytes += iv.Bytes
		r.Seconds = iv.End
	}
	return nil
}

// runMroce is one mroce connection over every plane.
func (b *bench) runMroce(ctx context.Context, loss float64) result {
	r := result{Kind: "mroce", Conns: 1, Planes: b.cfg.planes}
	b.measured(loss, &r, func() error {
		recv, send, err := b.startMroce(ctx, b.cfg.sizeMiB)
		if err != nil {
			return err
		}
		capped := !b.procs.wait(ctx, send, b.mroceLimit())
		if ctx.Err() != nil {
			b.procs.stop(recv)
			return ctx.Err()
		}
		r.Capped = capped
		b.procs.wait(ctx, recv, 5*time.Second)
		err = mroceResult(send, &r)
		r.CPUSender, r.CPUReceiver = send.cpu().Seconds(), recv.cpu().Seconds()
		if err == nil && !capped {
			err = recv.failure()
		}
		return err
	})
	return r
}

// startTCP starts tcp-recv and then tcp-send of size bytes (0: until
// stopped) over conns connections, connection i pinned to plane i.
func (b *bench) startTCP(ctx context.Context, cc string, conns int, size int64, maxSeconds float64) (recv, send *proc, err error) {
	recv, err = b.procs.start(ctx, b.tb.rcv, "tcp-recv", "ready",
		b.self, "tcp-recv", "--listen", b.addrs(receiverAddr, conns), "--port", fmt.Sprint(tcpPort), "--conns", fmt.Sprint(conns))
	if err != nil {
		return nil, nil, err
	}
	send, err = b.procs.start(ctx, b.tb.snd, "tcp-send", "",
		b.self, "tcp-send", "--to", b.addrs(receiverAddr, conns), "--local", b.addrs(senderAddr, conns),
		"--port", fmt.Sprint(tcpPort), "--cc", cc, "--size", fmt.Sprint(size), "--max-seconds", fmt.Sprint(maxSeconds))
	if err != nil {
		b.procs.stop(recv)
		return nil, nil, err
	}
	return recv, send, nil
}

// runTCP is TCP with cc over conns connections, the first on plane 0.
func (b *bench) runTCP(ctx context.Context, cc string, conns int, loss float64) result {
	r := result{Kind: "tcp", CC: cc, Conns: conns, Planes: conns}
	b.measured(loss, &r, func() error {
		recv, send, err := b.startTCP(ctx, cc, conns, int64(b.cfg.sizeMiB)<<20, b.cfg.maxSeconds)
		if err != nil {
			return err
		}
		b.procs.wait(ctx, send, b.limit())
		var rep tcpSendReport
		if err := json.Unmarshal(send.stdout(), &rep); err != nil {
			b.procs.stop(recv)
			return fmt.Errorf("tcp-send: %v: %s", err, send.stderr())
		}
		r.Bytes, r.Seconds, r.Verified, r.Capped = rep.Bytes, rep.Seconds, rep.Verified, rep.Stopped == "time"
		// A stopped sender's resets may be lost; the receiver is then
		// stopped and reports what came.
		patience := 10 * time.Second
		if r.Capped {
			patience = 2 * time.Second
		}
		b.procs.wait(ctx, recv, patience)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.CPUSender, r.CPUReceiver = send.cpu().Seconds(), recv.cpu().Seconds()
		for _, c := range rep.Conns {
			r.Retransmits += uint64(c.Retransmits)
			r.CEEchoed += uint64(c.DeliveredCE)
		}
		if rep.Error != "" {
			return fmt.Errorf("tcp-send: %s", rep.Error)
		}
		if err := recv.failure(); err != nil {
			return err
		}
		var got tcpRecvReport
		if err := json.Unmarshal(lastLine(recv.stdout()), &got); err != nil {
			return fmt.Errorf("tcp-recv: %v", err)
		}
		if r.Capped {
			r.Bytes = got.Bytes
		} else if got.Resets > 0 || got.Stopped || got.Bytes != rep.Bytes {
			return fmt.Errorf("tcp-recv: %d bytes, %d connections reset, stopped %v; the sender wrote %d", got.Bytes, got.Resets, got.Stopped, rep.Bytes)
		}
		return nil
	})
	return r
}

// share is mroce and TCP at once over the same planes.
type share struct {
	CC        string  `json:"cc"`
	TCPConns  int     `json:"tcp_conns"`
	Seconds   float64 `json:"seconds"` // mroce's transfer, the window both are measured over
	MroceGbps float64 `json:"mroce_gbps"`
	TCPGbps   float64 `json:"tcp_gbps"`
	// Each one's part of what both moved, and that part over an equal
	// share (a half).
	MroceShare float64 `json:"mroce_share"`
	TCPShare   float64 `json:"tcp_share"`
	MroceEqual float64 `json:"mroce_vs_equal"`
	TCPEqual   float64 `json:"tcp_vs_equal"`
	OfCapacity float64 `json:"of_capacity"` // both together, of all planes' rate
	Capped     bool    `json:"capped,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// runShare starts TCP with cc, one connection pinned to each plane, lets it
// settle for a second, then moves --size-mib with mroce over the same
// planes. TCP's goodput is what its receiver took in while mroce ran.
func (b *bench) runShare(ctx context.Context, cc string) share {
	s := share{CC: cc, TCPConns: b.cfg.planes}
	err := func() error {
		if err := b.tb.setRules(0, b.cfg.ce); err != nil {
			return err
		}
		tcpRecv, tcpSend, err := b.startTCP(ctx, cc, b.cfg.planes, 0, 4*b.cfg.maxSeconds+30)
		if err != nil {
			return err
		}
		defer b.procs.stop(tcpRecv)
		defer b.procs.stop(tcpSend)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		recv, send, err := b.startMroce(ctx, b.cfg.sizeMiB)
		if err != nil {
			return err
		}
		r := result{Capped: !b.procs.wait(ctx, send, b.mroceLimit())}
		b.procs.wait(ctx, recv, 5*time.Second)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.procs.stop(tcpSend)
		b.procs.wait(ctx, tcpRecv, 2*time.Second)
		if err := mroceResult(send, &r); err != nil {
			return err
		}
		if r.Seconds <= 0 {
			return errors.New("mroce moved nothing")
		}
		s.Capped = r.Capped
		// mroce's report ends as the process does: the window is its
		// transfer's time up to the moment the process ended.
		send.mu.Lock()
		end := send.ended
		send.mu.Unlock()
		begin := end.Add(-time.Duration(r.Seconds * float64(time.Second)))
		var rep tcpRecvReport
		if err := json.Unmarshal(lastLine(tcpRecv.stdout()), &rep); err != nil {
			return fmt.Errorf("tcp-recv: %v: %s", err, tcpRecv.stderr())
		}
		tcpBytes := bytesAt(rep.Samples, end) - bytesAt(rep.Samples, begin)
		s.Seconds = r.Seconds
		s.MroceGbps = float64(r.Bytes) * 8 / r.Seconds / 1e9
		s.TCPGbps = float64(tcpBytes) * 8 / r.Seconds / 1e9
		both := s.MroceGbps + s.TCPGbps
		if both > 0 {
			s.MroceShare, s.TCPShare = s.MroceGbps/both, s.TCPGbps/both
			s.MroceEqual, s.TCPEqual = s.MroceShare/0.5, s.TCPShare/0.5
		}
		s.OfCapacity = both * 1e3 / b.capacityMbit()
		return nil
	}()
	if err != nil {
		s.Error = err.Error()
	}
	time.Sleep(300 * time.Millisecond)
	return s
}

// lastLine is the last line of a program's output, where the TCP helpers
// print their report.
func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// bytesAt is how many bytes had arrived at t, linear between samples.
func bytesAt(samples [][2]int64, t time.Time) int64 {
	ns := t.UnixNano()
	if len(samples) == 0 || ns <= samples[0][0] {
		return 0
	}
	for i := 1; i < len(samples); i++ {
		a, z := samples[i-1], samples[i]
		if ns <= z[0] {
			if z[0] == a[0] {
				return z[1]
			}
			return a[1] + (z[1]-a[1])*(ns-a[0])/(z[0]-a[0])
		}
	}
	return samples[len(samples)-1][1]
}

// cpuStat is the machine's busy and total CPU time so far, in ticks, from
// /proc/stat's first line; idle and iowait count as not busy.
func cpuStat() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		// guest and guest_nice are in user and nice already.
		if i >= 8 {
			break
		}
		total += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, total
}
