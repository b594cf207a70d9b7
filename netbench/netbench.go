// Package netbench measures, on the loopback interface and in one run, one
// mroce connection over the UDP driver beside what the same machine does
// with raw UDP (the same batching) and with a Go TCP connection, so that
// the figures it prints are ratios of things measured together.
//
// Everything here uses real sockets and the wall clock: it is a
// measurement, never a test assertion.
package netbench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/udp"
)

// Result is one measured transfer.
type Result struct {
	Name    string
	Bytes   int64         // payload bytes that arrived
	Elapsed time.Duration // wall time
	CPU     time.Duration // user + system time of the whole process meanwhile
	Detail  string
}

// Gbps is the goodput in Gb/s.
func (r Result) Gbps() float64 { return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e9 }

// CPUPerGB is the process's CPU time per GB moved.
func (r Result) CPUPerGB() time.Duration {
	if r.Bytes == 0 {
		return 0
	}
	return time.Duration(float64(r.CPU) / (float64(r.Bytes) / 1e9))
}

// measure runs f and fills in the wall and CPU time it took.
func measure(name string, f func() (int64, string, error)) (Result, error) {
	cpu0 := cpuTime()
	t0 := time.Now()
	n, detail, err := f()
	return Result{Name: name, Bytes: n, Elapsed: time.Since(t0), CPU: cpuTime() - cpu0, Detail: detail}, err
}

// Mroce WRITEs size bytes over one connection of paths paths between two
// endpoints on loopback (planes 127.0.0.1 and 127.0.0.2 against 127.0.0.3
// and 127.0.0.4), each endpoint on its own loop goroutine, MaxPacket 4,160
// (4 KiB of payload per packet).
func Mroce(size, paths int) (Result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	la, lb := clock.NewLoop(), clock.NewLoop()
	go la.Run(ctx)
	go lb.Run(ctx)
	a, err := newSide(la, []string{"127.0.0.1", "127.0.0.2"}, paths)
	if err != nil {
		return Result{}, err
	}
	defer a.drv.Close()
	b, err := newSide(lb, []string{"127.0.0.3", "127.0.0.4"}, paths)
	if err != nil {
		return Result{}, err
	}
	defer b.drv.Close()
	a.drv.Start(a.ep)
	b.drv.Start(b.ep)

	src, dst := make([]byte, size), make([]byte, size)
	rand.Read(src)
	established := make(chan error, 1)
	done := make(chan engine.Completion, 1)
	ev := &events{established: established, done: done}
	var conn *engine.Conn
	onLoop(lb, func() { b.ep.Listen(b.pd, func(*engine.Conn) (engine.Events, bool) { return &events{}, true }) })
	var dstKey uint64
	onLoop(lb, func() {
		var g *memreg.Region
		if g, err = b.pd.Register(dst, memreg.LocalWrite|memreg.RemoteWrite); err == nil {
			dstKey = g.Key()
		}
	})
	if err != nil {
		return Result{}, err
	}
	onLoop(la, func() { conn, err = a.ep.Connect(addrs([]string{"127.0.0.3", "127.0.0.4"}), b.port, a.pd, ev) })
	if err != nil {
		return Result{}, err
	}
	select {
	case err = <-established:
	case <-time.After(5 * time.Second):
		err = errors.New("not established in 5 s")
	}
	if err != nil {
		return Result{}, fmt.Errorf("mroce: %w", err)
	}
	var stats engine.SenderStats
	r, err := measure("mroce, 1 connection", func() (int64, string, error) {
		var perr error
		onLoop(la, func() {
			var g *memreg.Region
			if g, perr = a.pd.Register(src, memreg.LocalWrite); perr == nil {
				perr = conn.Post(engine.SendWR{ID: 1, Op: engine.OpWrite, Local: engine.SGE{Region: g, Length: uint32(size)}, RKey: dstKey})
			}
		})
		if perr != nil {
			return 0, "", perr
		}
		select {
		case wc := <-done:
			if wc.Status != engine.StatusOK {
				return 0, "", fmt.Errorf("mroce: %v: %v", wc.Status, wc.Err)
			}
		case <-time.After(2 * time.Minute):
			return 0, "", errors.New("mroce: no completion in 2 minutes")
		}
		onLoop(la, func() { stats = conn.SenderStats() })
		return int64(size), "", nil
	})
	if err != nil {
		return r, err
	}
	same := false
	onLoop(lb, func() { same = bytes.Equal(src, dst) }) // dst is the receiving loop's until then
	if !same {
		return r, errors.New("mroce: the data arrived wrong")
	}
	var rx, tx udp.Stats
	onLoop(lb, func() { rx = b.drv.Stats() })
	onLoop(la, func() { tx = a.drv.Stats() })
	r.Detail = fmt.Sprintf("%d paths over 2 planes, 4 KiB packets; %d data packets sent, %d resent (%d tail probes, %d timeouts); %d dropped by the receiver's kernel; %.0f%% of datagrams sent by GSO",
		paths, stats.Packets, stats.Retransmits, stats.TailProbes, stats.Timeouts, rx.KernelDrops, 100*float64(tx.Segmented)/float64(max(tx.Sent, 1)))
	return r, nil
}

type side struct {
	ep   *engine.Endpoint
	drv  *udp.Driver
	pd   *memreg.Domain
	port uint16
}

func addrs(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// newSide binds an endpoint's sockets, trying other ports if some are
// taken.
func newSide(loop *clock.Loop, planes []string, paths int) (*side, error) {
	var lastErr error
	for try := 0; try < 20; try++ {
		base := uint16(20000 + mrand.IntN(40000))
		cfg := engine.Config{Planes: addrs(planes), Port: base, Paths: paths, Streams: 1, MaxPacket: 4160,
			PathWindow: 64, NoProgress: 10 * time.Second, RTOMin: udp.RTOMin, RTOInitial: udp.RTOInitial}
		for i := 1; i <= paths; i++ {
			cfg.SourcePorts = append(cfg.SourcePorts, base+uint16(i))
		}
		drv, err := udp.New(udp.Config{Planes: cfg.Planes, Port: base, SourcePorts: cfg.SourcePorts}, loop)
		if err != nil {
			lastErr = err
			continue
		}
		ep, err := engine.NewEndpoint(cfg, loop, drv)
		if err != nil {
			drv.Close()
			return nil, err
		}
		return &side{ep: ep, drv: drv, pd: memreg.NewRegistry(rand.Reader).NewDomain(), port: base}, nil
	}
	return nil, lastErr
}

// onLoop runs f on loop's goroutine and waits for it.
func onLoop(loop *clock.Loop, f func()) {
	done := make(chan struct{})
	loop.Post(func() { f(); close(done) })
	<-done
}

// events passes the connection's first state change and first completion
// on.
type events struct {
	established chan error
	done        chan engine.Completion
}

func (e *events) Completion(_ *engine.Conn, wc engine.Completion) {
	if e.done != nil {
		select {
		case e.done <- wc:
		default:
		}
	}
}

func (e *events) State(_ *engine.Conn, s engine.ConnState, err error) {
	if e.established == nil {
		return
	}
	if s == engine.Established || err != nil {
		select {
		case e.established <- err:
		default:
		}
	}
}

// RawUDP sends size bytes of datagrams of payload bytes from one socket to
// another in batches of batch (sendmmsg / recvmmsg, as the driver does) and
// counts what arrives. UDP has no flow control: what the receiver loses is
// reported, and goodput counts only what arrived.
func RawUDP(size, payload, batch int) (Result, error) {
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)})
	if err != nil {
		return Result{}, err
	}
	defer rc.Close()
	_ = rc.SetReadBuffer(4 << 20)
	sc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return Result{}, err
	}
	defer sc.Close()
	_ = sc.SetWriteBuffer(4 << 20)
	count := size / payload
	to := rc.LocalAddr()
	var start, last time.Time
	r, err := measure("raw UDP, same batching", func() (int64, string, error) {
		start = time.Now()
		got := make(chan int64, 1)
		go func() {
			pc := ipv4.NewPacketConn(rc)
			ms := make([]ipv4.Message, batch)
			for i := range ms {
				ms[i].Buffers = [][]byte{make([]byte, payload)}
			}
			var n int64
			for {
				_ = rc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				k, err := pc.ReadBatch(ms, 0)
				if err != nil {
					got <- n // quiet for 200 ms: the sender is done
					return
				}
				last = time.Now()
				for _, m := range ms[:k] {
					n += int64(m.N)
				}
				if n >= int64(count*payload) {
					got <- n
					return
				}
			}
		}()
		pc := ipv4.NewPacketConn(sc)
		buf := make([]byte, payload)
		ms := make([]ipv4.Message, batch)
		for i := range ms {
			ms[i].Buffers = [][]byte{buf}
			ms[i].Addr = to
		}
		for sent := 0; sent < count; {
			k, err := pc.WriteBatch(ms[:min(batch, count-sent)], 0)
			if err != nil {
				return 0, "", err
			}
			sent += k
		}
		n := <-got
		return n, fmt.Sprintf("%d-byte datagrams, batches of %d; %.1f%% lost in the receiver's buffer",
			payload, batch, 100*(1-float64(n)/float64(count*payload))), nil
	})
	if err == nil && last.After(start) {
		r.Elapsed = last.Sub(start) // up to the last arrival, not the quiet wait after it
	}
	return r, err
}

// TCP moves size bytes over a Go TCP loopback connection in writes of
// write bytes.
func TCP(size, write int) (Result, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	defer ln.Close()
	return measure("Go TCP", func() (int64, string, error) {
		got := make(chan int64, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- 0
				return
			}
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			got <- n
		}()
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return 0, "", err
		}
		buf := make([]byte, write)
		for sent := 0; sent < size; sent += write {
			if _, err := c.Write(buf[:min(write, size-sent)]); err != nil {
				c.Close()
				return 0, "", err
			}
		}
		c.Close()
		return <-got, fmt.Sprintf("writes of %d KiB", write>>10), nil
	})
}
