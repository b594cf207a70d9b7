// Package netbench measures one mroce connection over the UDP driver on the
// loopback interface. In the same run it measures what the machine does
// with raw UDP through the same driver and with a Go TCP connection, so
// that the figures it prints are ratios of things measured together.
//
// Everything here uses real sockets and the wall clock. It is a
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
	"sync/atomic"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/link"
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
// endpoints on loopback. The planes are 127.0.0.1 and 127.0.0.2 against
// 127.0.0.3 and 127.0.0.4. Each endpoint runs on its own loop goroutine, with
// a MaxPacket of 4,160 bytes, 4 KiB of payload per packet.
func Mroce(size, paths int) (Result, error) { return MroceAuth(size, paths, nil) }

// MroceAuth is Mroce with both endpoints in the authenticated mode with
// cred (docs/spec.md section 13), or outside it with nil. A protected
// packet carries 12 bytes less payload, for its tag.
func MroceAuth(size, paths int, cred *auth.Credentials) (Result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := connectPair(ctx, size, paths, cred)
	if m != nil {
		defer m.close()
	}
	if err != nil {
		return Result{}, err
	}
	la, lb, a, b := m.la, m.lb, m.a, m.b
	var stats engine.SenderStats
	name := "mroce, 1 connection"
	if cred != nil {
		name += ", authenticated (" + cred.Suite.String() + ")"
	}
	r, err := measure(name, func() (int64, string, error) {
		var perr error
		onLoop(la, func() {
			var g *memreg.Region
			if g, perr = a.pd.Register(m.src, memreg.LocalWrite); perr == nil {
				perr = m.conn.Post(engine.SendWR{ID: 1, Op: engine.OpWrite, Local: engine.SGE{Region: g, Length: uint32(size)}, RKey: m.dstKey})
			}
		})
		if perr != nil {
			return 0, "", perr
		}
		select {
		case wc := <-m.done:
			if wc.Status != engine.StatusOK {
				return 0, "", fmt.Errorf("mroce: %v: %v", wc.Status, wc.Err)
			}
		case <-time.After(2 * time.Minute):
			return 0, "", errors.New("mroce: no completion in 2 minutes")
		}
		onLoop(la, func() { stats = m.conn.SenderStats() })
		return int64(size), "", nil
	})
	if err != nil {
		return r, err
	}
	same := false
	onLoop(lb, func() { same = bytes.Equal(m.src, m.dst) }) // dst is the receiving loop's until then
	if !same {
		return r, errors.New("mroce: the data arrived wrong")
	}
	var rx, tx udp.Stats
	onLoop(lb, func() { rx = b.drv.Stats() })
	onLoop(la, func() { tx = a.drv.Stats() })
	r.Detail = fmt.Sprintf("%d paths over 2 planes, 4 KiB packets; %d data packets sent, %d resent (%d tail probes, %d timeouts); %d dropped by the receiver's kernel; %.0f%% of datagrams sent by GSO, %.1f a send call; %d datagrams back (ACKs), one per %.1f data packets",
		paths, stats.Packets, stats.Retransmits, stats.TailProbes, stats.Timeouts, rx.KernelDrops, 100*float64(tx.Segmented)/float64(max(tx.Sent, 1)),
		float64(tx.Sent)/float64(max(tx.SendCalls, 1)), rx.Sent, float64(stats.Packets)/float64(max(rx.Sent, 1)))
	return r, nil
}

// mrocePair is two endpoints on loops of their own and one established
// connection from a to b, with the buffers of a WRITE between them.
type mrocePair struct {
	la, lb   *clock.Loop
	a, b     *side
	conn     *engine.Conn
	done     chan engine.Completion // the WRITE's completion
	src, dst []byte
	dstKey   uint64 // the key of dst's region at b
}

// close closes the pair's sockets.
func (m *mrocePair) close() {
	if m.a != nil {
		m.a.drv.Close()
	}
	if m.b != nil {
		m.b.drv.Close()
	}
}

// connectPair binds the two endpoints Mroce measures, with loops that run
// until ctx is done. It registers b's buffer of size bytes and establishes
// a connection of paths paths from a. The pair it returns, even with an
// error, must be closed.
func connectPair(ctx context.Context, size, paths int, cred *auth.Credentials) (*mrocePair, error) {
	m := &mrocePair{la: clock.NewEndpointLoop(), lb: clock.NewEndpointLoop()}
	la, lb := m.la, m.lb
	go la.Run(ctx)
	go lb.Run(ctx)
	var err error
	if m.a, err = newSide(la, []string{"127.0.0.1", "127.0.0.2"}, paths, cred); err != nil {
		return m, err
	}
	if m.b, err = newSide(lb, []string{"127.0.0.3", "127.0.0.4"}, paths, cred); err != nil {
		return m, err
	}
	a, b := m.a, m.b
	a.drv.Start(a.ep)
	b.drv.Start(b.ep)

	m.src, m.dst = make([]byte, size), make([]byte, size)
	fill(m.src)
	touch(m.dst)
	established := make(chan error, 1)
	m.done = make(chan engine.Completion, 1)
	ev := &events{established: established, done: m.done}
	onLoop(lb, func() { b.ep.Listen(b.pd, func(*engine.Conn) (engine.Events, bool) { return &events{}, true }) })
	onLoop(lb, func() {
		var g *memreg.Region
		if g, err = b.pd.Register(m.dst, memreg.LocalWrite|memreg.RemoteWrite); err == nil {
			m.dstKey = g.Key()
		}
	})
	if err != nil {
		return m, err
	}
	onLoop(la, func() { m.conn, err = a.ep.Connect(addrs([]string{"127.0.0.3", "127.0.0.4"}), b.port, a.pd, ev) })
	if err != nil {
		return m, err
	}
	select {
	case err = <-established:
	case <-time.After(5 * time.Second):
		err = errors.New("not established in 5 s")
	}
	if err != nil {
		return m, fmt.Errorf("mroce: %w", err)
	}
	return m, nil
}

// fill fills b with pseudo-random bytes, fast. The data only has to be
// checked on arrival, not kept secret.
func fill(b []byte) {
	var seed [32]byte
	rand.Read(seed[:])
	mrand.NewChaCha8(seed).Read(b)
}

// touch writes every page of b, so that the kernel has mapped it before the
// measurement. RDMA memory is registered and pinned before use, and both
// sides of the TCP transfer get the same.
func touch(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
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
func newSide(loop *clock.Loop, planes []string, paths int, cred *auth.Credentials) (*side, error) {
	var lastErr error
	for try := 0; try < 20; try++ {
		base := uint16(20000 + mrand.IntN(40000))
		cfg := software.RealTimeTimers(engine.Config{Planes: addrs(planes), Port: base, Paths: paths, Streams: 1,
			MaxPacket: 4160, BasePacket: udp.BaseDatagram, PathWindow: 64, NoProgress: 10 * time.Second, Auth: cred})
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
// another, with no protocol at all, and counts what arrives. It goes
// through the same UDP driver the mroce connection uses, with the same
// batching, GSO on send and GRO on receive. UDP has no flow control, so
// what the receiver loses is reported, and goodput counts only what
// arrived.
func RawUDP(size, payload, batch int) (Result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rl := clock.NewLoop()
	go rl.Run(ctx)
	var rx *udp.Driver
	var err error
	for try := 0; try < 20; try++ {
		if rx, err = udp.New(udp.Config{Planes: addrs([]string{"127.0.0.3"}), Port: uint16(20000 + mrand.IntN(40000)), Batch: batch}, rl); err == nil {
			break
		}
	}
	if err != nil {
		return Result{}, err
	}
	defer rx.Close()
	var got atomic.Int64
	var last atomic.Int64 // wall time of the last arrival, ns since origin
	count := size / payload
	origin := time.Now()
	rx.Start(link.ReceiverFunc(func(d *link.Datagram, _ clock.Time) {
		got.Add(int64(len(d.Data)))
		last.Store(int64(time.Since(origin)))
	}))
	// The sender's loop never runs. This goroutine is its only user, and it
	// flushes after each batch.
	var tx *udp.Driver
	for try := 0; try < 20; try++ {
		if tx, err = udp.New(udp.Config{Planes: addrs([]string{"127.0.0.1"}), Port: uint16(20000 + mrand.IntN(40000)), Batch: batch}, clock.NewLoop()); err == nil {
			break
		}
	}
	if err != nil {
		return Result{}, err
	}
	defer tx.Close()
	src, dst := tx.LocalPorts()[0], rx.LocalPorts()[0]
	var start time.Duration // since origin
	r, err := measure("raw UDP, same driver", func() (int64, string, error) {
		start = time.Since(origin)
		out := make([]link.Datagram, batch)
		for sent := 0; sent < count; {
			n := min(batch, count-sent)
			for i := range out[:n] {
				out[i] = link.Datagram{Src: src, Dst: dst, Data: tx.Buffer()[:payload]}
			}
			tx.Send(out[:n])
			tx.Flush()
			sent += n
		}
		// Wait until everything arrived, or nothing more has for 200 ms.
		// On a loaded machine the receiver's goroutines may not have run
		// at all yet: the first arrival gets 5 s.
		for quiet := 0; got.Load() < int64(count*payload); {
			before := got.Load()
			time.Sleep(200 * time.Millisecond)
			if got.Load() == before {
				if quiet++; before > 0 || quiet >= 25 {
					break
				}
			}
		}
		n := got.Load()
		st := tx.Stats()
		return n, fmt.Sprintf("%d-byte datagrams, batches of %d, %.0f%% sent by GSO; %.1f%% lost in the receiver's buffer",
			payload, batch, 100*float64(st.Segmented)/float64(max(st.Sent, 1)), 100*(1-float64(n)/float64(count*payload))), nil
	})
	if end := time.Duration(last.Load()); err == nil && end > start {
		r.Elapsed = end - start // up to the last arrival, not the quiet wait after it
	}
	return r, err
}

// TCP moves size bytes from one buffer to another over a Go TCP loopback
// connection, in writes of write bytes. That is the same work as the mroce
// WRITE, memory to memory with both buffers mapped beforehand, and the
// bytes are checked the same way.
func TCP(size, write int) (Result, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	defer ln.Close()
	src, dst := make([]byte, size), make([]byte, size)
	fill(src)
	touch(dst)
	r, err := measure("Go TCP", func() (int64, string, error) {
		got := make(chan int64, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- 0
				return
			}
			n, _ := io.ReadFull(c, dst)
			c.Close()
			got <- int64(n)
		}()
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return 0, "", err
		}
		for sent := 0; sent < size; sent += write {
			if _, err := c.Write(src[sent:min(sent+write, size)]); err != nil {
				c.Close()
				return 0, "", err
			}
		}
		c.Close()
		return <-got, fmt.Sprintf("writes of %d KiB, read into one buffer", write>>10), nil
	})
	if err == nil && !bytes.Equal(src, dst) {
		return r, errors.New("TCP: the data arrived wrong")
	}
	return r, err
}
