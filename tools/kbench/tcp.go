//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The TCP side of the measurement is kbench itself, run again inside a
// namespace as tcp-send or tcp-recv. It does the application's work mroce
// send and recv do, so that their CPU times compare: the sender makes its
// data with ChaCha8 and both ends take its SHA-256, which the receiver
// sends back for the sender to check.

// tcpChunk is the size of each write and read.
const tcpChunk = 256 << 10

// tcpSendReport is what tcp-send prints, one JSON document.
type tcpSendReport struct {
	CC       string        `json:"cc"`
	Bytes    int64         `json:"bytes"` // written; the receiver's count when stopped part way
	Seconds  float64       `json:"seconds"`
	Verified bool          `json:"verified"`
	Stopped  string        `json:"stopped"` // "size", "time" or "signal"
	Conns    []tcpConnSent `json:"conns"`
	Error    string        `json:"error,omitempty"`
}

type tcpConnSent struct {
	Local       string `json:"local"`
	Remote      string `json:"remote"`
	Bytes       int64  `json:"bytes"`
	Retransmits uint32 `json:"retransmits"`
	DeliveredCE uint32 `json:"delivered_ce"`
	Verified    bool   `json:"verified"`
}

// tcpRecvReport is what tcp-recv prints: the bytes that arrived and, every
// 100 ms, how many had arrived by then, for sharing's window.
type tcpRecvReport struct {
	Bytes   int64      `json:"bytes"`
	Resets  int        `json:"resets"`  // connections the sender reset, stopped part way
	Stopped bool       `json:"stopped"` // by a signal, with connections open
	Samples [][2]int64 `json:"samples"` // unix nanoseconds, bytes so far
}

// tcpSendMain connects from each --local to the --to of the same position
// and sends --size bytes split over the connections, or until --max-seconds
// or SIGTERM when that comes first (--size 0: until then).
func tcpSendMain(args []string) int {
	fs := flag.NewFlagSet("tcp-send", flag.ContinueOnError)
	to := fs.String("to", "", "the receiver's addresses, one a connection, comma-separated")
	local := fs.String("local", "", "the local address of each connection, comma-separated")
	port := fs.Int("port", 5201, "the receiver's port")
	cc := fs.String("cc", "cubic", "the congestion control of every connection (TCP_CONGESTION)")
	size := fs.Int64("size", 0, "bytes to send over all connections; 0: until stopped")
	maxSeconds := fs.Float64("max-seconds", 30, "stop sending after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	tos, locals := strings.Split(*to, ","), strings.Split(*local, ",")
	if *to == "" || len(tos) != len(locals) {
		fmt.Fprintln(os.Stderr, "tcp-send: want as many --local addresses as --to addresses")
		return 2
	}
	rep := tcpSendReport{CC: *cc}
	err := tcpSend(tos, locals, *port, *cc, *size, time.Duration(*maxSeconds*float64(time.Second)), &rep)
	if err != nil {
		rep.Error = err.Error()
	}
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp-send:", err)
		return 1
	}
	return 0
}

func tcpSend(tos, locals []string, port int, cc string, size int64, limit time.Duration, rep *tcpSendReport) error {
	sig, stopSig := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stopSig()
	conns := make([]*net.TCPConn, len(tos))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range tos {
		d := net.Dialer{
			LocalAddr: &net.TCPAddr{IP: net.ParseIP(locals[i])},
			Timeout:   10 * time.Second,
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				if err := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
				}); err != nil {
					return err
				}
				if serr != nil {
					return fmt.Errorf("TCP_CONGESTION %s: %w", cc, serr)
				}
				return nil
			},
		}
		c, err := d.DialContext(sig, "tcp", net.JoinHostPort(tos[i], fmt.Sprint(port)))
		if err != nil {
			return err
		}
		conns[i] = c.(*net.TCPConn)
		if got, err := sockCC(conns[i]); err != nil || got != cc {
			return fmt.Errorf("%s: congestion control %q, not %q (%v)", c.LocalAddr(), got, cc, err)
		}
	}
	ctx, cancel := context.WithTimeout(sig, limit)
	defer cancel()
	began := time.Now()
	rep.Conns = make([]tcpConnSent, len(conns))
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		share := size / int64(len(conns))
		if i == 0 {
			share += size % int64(len(conns))
		}
		wg.Go(func() { errs[i] = sendOne(ctx, c, i, share, &rep.Conns[i]) })
	}
	wg.Wait()
	rep.Seconds = time.Since(began).Seconds()
	rep.Verified = true
	for _, c := range rep.Conns {
		rep.Bytes += c.Bytes
		rep.Verified = rep.Verified && c.Verified
	}
	switch {
	case sig.Err() != nil:
		rep.Stopped = "signal"
	case ctx.Err() != nil:
		rep.Stopped = "time"
	default:
		rep.Stopped = "size"
	}
	return errors.Join(errs...)
}

// sendOne sends share bytes (0: until ctx ends) of connection i's own
// ChaCha8 stream, then half-closes and waits for the receiver's SHA-256.
// When ctx ends first it resets the connection.
func sendOne(ctx context.Context, c *net.TCPConn, i int, share int64, out *tcpConnSent) error {
	out.Local, out.Remote = c.LocalAddr().String(), c.RemoteAddr().String()
	// A write blocked on a full send buffer returns once ctx ends.
	stop := context.AfterFunc(ctx, func() { c.SetWriteDeadline(time.Now()) })
	defer stop()
	gen := rand.NewChaCha8([32]byte{'k', 'b', byte(i)})
	sum := sha256.New()
	buf := make([]byte, tcpChunk)
	for ctx.Err() == nil && (share == 0 || out.Bytes < share) {
		n := int64(len(buf))
		if share > 0 {
			n = min(n, share-out.Bytes)
		}
		gen.Read(buf[:n])
		w, err := c.Write(buf[:n])
		sum.Write(buf[:w])
		out.Bytes += int64(w)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("%s: %w", out.Local, err)
		}
	}
	if info, err := tcpInfo(c); err == nil {
		out.Retransmits, out.DeliveredCE = info.Total_retrans, info.Delivered_ce
	}
	if ctx.Err() != nil {
		// Stopped part way: the connection is reset, so that what still
		// waits in the send buffer does not count, and the receiver's count
		// of what arrived is the transfer.
		c.SetLinger(0)
		return c.Close()
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("%s: the receiver's SHA-256: %w", out.Local, err)
	}
	out.Verified = bytes.Equal(got, sum.Sum(nil))
	if info, err := tcpInfo(c); err == nil {
		out.Retransmits, out.DeliveredCE = info.Total_retrans, info.Delivered_ce
	}
	if !out.Verified {
		return fmt.Errorf("%s: the receiver's SHA-256 differs", out.Local)
	}
	return nil
}

// tcpRecvMain accepts --conns connections on the --listen addresses and
// reads each to its end.
func tcpRecvMain(args []string) int {
	fs := flag.NewFlagSet("tcp-recv", flag.ContinueOnError)
	listen := fs.String("listen", "", "the addresses to listen on, comma-separated")
	port := fs.Int("port", 5201, "the port")
	nconns := fs.Int("conns", 1, "connections to accept")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var rep tcpRecvReport
	err := tcpRecv(strings.Split(*listen, ","), *port, *nconns, &rep)
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp-recv:", err)
		return 1
	}
	return 0
}

func tcpRecv(addrs []string, port, nconns int, rep *tcpRecvReport) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	accepted := make(chan net.Conn, nconns)
	var lns []net.Listener
	for _, a := range addrs {
		ln, err := net.Listen("tcp", net.JoinHostPort(a, fmt.Sprint(port)))
		if err != nil {
			return err
		}
		defer ln.Close()
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
	}
	fmt.Println("ready")
	var total atomic.Int64
	var mu sync.Mutex
	sample := func() {
		mu.Lock()
		rep.Samples = append(rep.Samples, [2]int64{time.Now().UnixNano(), total.Load()})
		mu.Unlock()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	type ended struct {
		reset bool
		err   error
	}
	done := make(chan ended, nconns)
	for got := 0; got < nconns; {
		select {
		case c := <-accepted:
			got++
			if got == 1 {
				sample()
			}
			go func() {
				reset, err := recvOne(c, &total)
				done <- ended{reset, err}
			}()
		case <-tick.C:
			if got > 0 {
				sample()
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, ln := range lns {
		ln.Close()
	}
	var errs []error
	for left := nconns; left > 0; {
		select {
		case e := <-done:
			errs = append(errs, e.err)
			if e.reset {
				rep.Resets++
			}
			left--
		case <-tick.C:
			sample()
		case <-ctx.Done():
			// A sender stopped part way resets its connections, and a reset
			// lost on the way never arrives: what came is still the count.
			sample()
			rep.Bytes, rep.Stopped = total.Load(), true
			return nil
		}
	}
	sample()
	rep.Bytes = total.Load()
	return errors.Join(errs...)
}

// recvOne reads c to its end, then answers with the SHA-256 of what came.
// It reports whether the sender reset the connection instead.
func recvOne(c net.Conn, total *atomic.Int64) (reset bool, err error) {
	defer c.Close()
	sum := sha256.New()
	buf := make([]byte, tcpChunk)
	for {
		n, err := c.Read(buf)
		sum.Write(buf[:n])
		total.Add(int64(n))
		if err == io.EOF {
			break
		}
		if errors.Is(err, syscall.ECONNRESET) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	_, err = c.Write(sum.Sum(nil))
	return false, err
}

// sockCC is a connection's congestion control, as the kernel has it.
func sockCC(c *net.TCPConn) (string, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var cc string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cc, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return strings.TrimRight(cc, "\x00"), gerr
}

func tcpInfo(c *net.TCPConn) (*unix.TCPInfo, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return nil, err
	}
	return info, gerr
}
