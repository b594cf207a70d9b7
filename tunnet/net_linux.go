package tunnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/netem"
)

// Stats are the emulator's counters at the TUN devices.
type Stats struct {
	Read      uint64 // packets read from the hosts' TUN devices
	Malformed uint64 // of those, not a whole IPv4 packet, so not forwarded
	Written   uint64 // packets delivered into a host's TUN device
	// WriteErrors counts packets the kernel refused from a TUN device.
	WriteErrors uint64
}

// Net is a running emulated network.
type Net struct {
	cfg   Config
	rec   Record // what it made, as its file says
	fab   *netem.Fabric
	hosts []*nsHost
	loop  *clock.Loop
	stats Stats // loop goroutine only

	cancel    context.CancelFunc
	loopDone  chan struct{}
	readers   sync.WaitGroup
	closed    chan struct{} // closed by Close, so readers stop waiting for the loop
	closeOnce sync.Once
	closeErr  error
}

// nsHost is one emulated host, its namespace and its TUN devices.
type nsHost struct {
	n     *Net
	id    int
	ns    string
	ports []*tunPort
}

// tunPort is one host's TUN device on one plane.
type tunPort struct {
	h     *nsHost
	plane int
	dev   tun.Device
	out   [][]byte // packets to write at the end of the loop's turn, after headroom
	free  [][]byte // write buffers to reuse
}

// headroom is what the TUN device needs in front of every packet it reads
// or writes, its virtio header.
const headroom = 16

// Up creates cfg's namespaces and TUN devices and starts forwarding their
// packets through netem in real time. Close undoes everything.
func Up(cfg Config) (*Net, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("tunnet: needs root (network namespaces and TUN devices)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("tunnet: needs ip (Debian package iproute2)")
	}
	rec, err := claim(cfg)
	if err != nil {
		return nil, err
	}
	fc := cfg.Fabric
	fc.Hosts, fc.Planes, fc.MaxDatagram = cfg.Hosts+1, cfg.Planes, cfg.MTU
	for _, lc := range []*netem.LinkConfig{&fc.Uplink, &fc.Downlink, &fc.FabricUp, &fc.FabricDown} {
		if lc.Overhead == 0 {
			lc.Overhead = 38 // Ethernet framing, since the IP and UDP headers are in the packet
		}
	}
	loop := clock.NewLoop()
	fab, err := netem.New(fc, loop)
	if err != nil {
		removeRecord(cfg.Name)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Net{cfg: cfg, rec: rec, loop: loop, fab: fab, cancel: cancel, loopDone: make(chan struct{}), closed: make(chan struct{})}
	for h := 0; h < cfg.Hosts; h++ {
		host, err := n.addHost(h)
		if host != nil {
			n.hosts = append(n.hosts, host)
		}
		if err != nil {
			cancel()
			close(n.loopDone)
			n.teardown()
			return nil, err
		}
		fab.Host(h + 1).Attach(link.ReceiverFunc(host.deliver))
	}
	loop.AtTurnEnd(n.flushWrites)
	go func() {
		loop.Run(ctx)
		close(n.loopDone)
	}()
	for _, h := range n.hosts {
		for _, p := range h.ports {
			n.readers.Add(1)
			go p.read()
		}
	}
	return n, nil
}

// addHost makes host h's namespace and its TUN devices, addressed and up.
// It returns the host even when it fails part way, for teardown.
func (n *Net) addHost(h int) (*nsHost, error) {
	host := &nsHost{n: n, id: h, ns: namespace(n.cfg.Name, h)}
	if err := ip("netns", "add", host.ns); err != nil {
		return nil, err
	}
	ino, err := namespaceInode(host.ns)
	if err == nil {
		n.rec.Namespaces[h].Inode = ino
		err = writeRecord(n.rec)
	}
	if err != nil {
		return host, err
	}
	if err := ip("-n", host.ns, "link", "set", "lo", "up"); err != nil {
		return host, err
	}
	err = inNamespace(host.ns, func() error {
		for p := 0; p < n.cfg.Planes; p++ {
			dev, err := tun.CreateTUN(tunName(p), n.cfg.MTU)
			if err != nil {
				return fmt.Errorf("tunnet: %s: TUN %s: %w", host.ns, tunName(p), err)
			}
			host.ports = append(host.ports, &tunPort{h: host, plane: p, dev: dev})
			// The planes are IPv4; IPv6 would only add router solicitations.
			_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+tunName(p)+"/disable_ipv6", []byte("1"), 0)
		}
		return nil
	})
	if err != nil {
		return host, err
	}
	for p := 0; p < n.cfg.Planes; p++ {
		if err := ip("-n", host.ns, "addr", "add", Addr(h, p).String()+"/16", "dev", tunName(p)); err != nil {
			return host, err
		}
		if err := ip("-n", host.ns, "link", "set", tunName(p), "up"); err != nil {
			return host, err
		}
	}
	return host, nil
}

// ip runs iproute2's ip.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tunnet: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// inNamespace runs f on an OS thread that has entered namespace ns. The
// thread is never handed back to other goroutines: it ends with f.
func inNamespace(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked, so the thread exits with this goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("tunnet: namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("tunnet: entering namespace %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// InHost runs f inside host h's network namespace. Sockets it opens belong
// to that host and keep working from any goroutine afterwards.
func (n *Net) InHost(h int, f func() error) error { return inNamespace(n.hosts[h].ns, f) }

// Command is a command to run inside host h's namespace with ip netns exec.
func (n *Net) Command(h int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.hosts[h].ns, name}, args...)...)
}

// Namespace is host h's namespace.
func (n *Net) Namespace(h int) string { return n.hosts[h].ns }

// Do runs f on the emulator's loop with its fabric, to inject faults or read
// its counters, and waits for it.
func (n *Net) Do(f func(fab *netem.Fabric)) {
	done := make(chan struct{})
	n.loop.Post(func() { f(n.fab); close(done) })
	select {
	case <-done:
	case <-n.loopDone:
	}
}

// Stats returns the emulator's counters at the TUN devices.
func (n *Net) Stats() (st Stats) {
	n.Do(func(*netem.Fabric) { st = n.stats })
	return st
}

// read is a TUN device's goroutine. It reads batches of packets, which the
// device cuts from the kernel's offloaded runs, and hands each batch to the
// loop while it reads the next into a second batch.
func (p *tunPort) read() {
	defer p.h.n.readers.Done()
	size := max(p.dev.BatchSize(), 1)
	if size > 1 {
		size = 128 // a 64 KiB offloaded run of small segments fits
	}
	batches := [2]*inBatch{p.newBatch(size), p.newBatch(size)}
	for k := 0; ; k ^= 1 {
		b := batches[k]
		select {
		case <-b.done: // the loop is through with it
		case <-p.h.n.closed:
			return
		}
		n, err := p.dev.Read(b.bufs, b.sizes, headroom)
		if err != nil {
			select {
			case <-p.h.n.closed:
				return
			default:
			}
			b.done <- struct{}{}
			continue // a packet the device could not cut apart is dropped
		}
		b.n = n
		p.h.n.loop.Post(b.forward)
	}
}

// inBatch is one batch of packets read from a TUN device.
type inBatch struct {
	p       *tunPort
	bufs    [][]byte
	sizes   []int
	n       int
	out     []link.Datagram
	done    chan struct{}
	forward func() // b.forwardNow, bound once
}

func (p *tunPort) newBatch(size int) *inBatch {
	b := &inBatch{p: p, bufs: make([][]byte, size), sizes: make([]int, size), out: make([]link.Datagram, 0, size), done: make(chan struct{}, 1)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, headroom+p.h.n.cfg.MTU)
	}
	b.forward = b.forwardNow
	b.done <- struct{}{}
	return b
}

// forwardNow runs on the loop. Each packet enters the fabric at its host.
func (b *inBatch) forwardNow() {
	n := b.p.h.n
	host := n.fab.Host(b.p.h.id + 1)
	b.out = b.out[:0]
	for i := range b.n {
		pkt := b.bufs[i][headroom : headroom+b.sizes[i]]
		n.stats.Read++
		in, err := parseIP(pkt) // a read fills at most the MTU, its buffer's size
		if err != nil {
			n.stats.Malformed++
			continue
		}
		data := append(host.Buffer(), pkt...)
		b.out = append(b.out, link.Datagram{Src: in.src, Dst: in.dst, ECN: in.ecn, DSCP: in.dscp, Data: data})
	}
	host.Send(b.out)
	clear(b.out)
	b.done <- struct{}{}
}

// deliver runs on the loop when the fabric delivers a packet to host h. The
// packet goes into the TUN device of its plane at the end of the turn, with
// the ECN field the queues left it.
func (h *nsHost) deliver(d *link.Datagram, _ clock.Time) {
	plane := int(d.Dst.Addr().As4()[1])
	if plane >= len(h.ports) || len(d.Data) < 20 {
		return
	}
	p := h.ports[plane]
	var buf []byte
	if k := len(p.free); k > 0 {
		buf, p.free = p.free[k-1], p.free[:k-1]
	} else {
		buf = make([]byte, headroom, headroom+h.n.cfg.MTU)
	}
	buf = append(buf[:headroom], d.Data...)
	if pkt := buf[headroom:]; link.ECN(pkt[1]&3) != d.ECN {
		setECN(pkt, d.ECN)
	}
	p.out = append(p.out, buf)
}

// flushWrites writes what the turn delivered, one batch per device.
func (n *Net) flushWrites() {
	for _, h := range n.hosts {
		for _, p := range h.ports {
			if len(p.out) == 0 {
				continue
			}
			count := len(p.out)
			if _, err := p.dev.Write(p.out, headroom); err != nil {
				n.stats.WriteErrors += uint64(count) // the device says which failed only in sum
			} else {
				n.stats.Written += uint64(count)
			}
			for _, b := range p.out {
				if cap(b) >= headroom+n.cfg.MTU {
					p.free = append(p.free, b[:headroom])
				}
			}
			clear(p.out)
			p.out = p.out[:0]
		}
	}
}

// Close stops forwarding and removes the namespaces and devices.
func (n *Net) Close() error {
	n.closeOnce.Do(func() {
		n.cancel()
		<-n.loopDone
		n.closeErr = n.teardown()
	})
	return n.closeErr
}

// teardown closes the devices, which ends their readers, deletes the
// namespaces it made and then its record.
func (n *Net) teardown() error {
	close(n.closed)
	for _, h := range n.hosts {
		for _, p := range h.ports {
			p.dev.Close()
		}
	}
	n.readers.Wait()
	var errs []error
	for _, h := range n.hosts {
		if err := ip("netns", "del", h.ns); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 { // else the record stays, for mroce netem down
		if err := removeRecord(n.cfg.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// claim writes cfg's record before anything is made, and so takes the
// name. It refuses a name that is taken: by a running emulator, by what
// one that died left, or by namespaces named as its hosts that no record
// accounts for.
func claim(cfg Config) (Record, error) {
	rec := Record{Name: cfg.Name, PID: os.Getpid(), Started: time.Now().UTC().Truncate(time.Second),
		Hosts: cfg.Hosts, Planes: cfg.Planes, MTU: cfg.MTU}
	rec.PIDStart, _, _ = procStat(rec.PID)
	for h := 0; h < cfg.Hosts; h++ {
		rn := RecordedNamespace{Name: namespace(cfg.Name, h)}
		for p := 0; p < cfg.Planes; p++ {
			rn.Interfaces = append(rn.Interfaces, tunName(p))
		}
		rec.Namespaces = append(rec.Namespaces, rn)
	}
	unlock, err := lockRecords()
	if err != nil {
		return Record{}, err
	}
	defer unlock()
	if err := createRecord(rec); errors.Is(err, os.ErrExist) {
		old, ok, err := ReadRecord(cfg.Name)
		switch {
		case err != nil:
			return Record{}, err
		case ok && old.Running():
			return Record{}, fmt.Errorf("tunnet: network %q exists: process %d runs it", cfg.Name, old.PID)
		case ok && len(old.Present()) > 0:
			return Record{}, fmt.Errorf("tunnet: network %q exists: an emulator that died left %s (mroce netem down --name %s)",
				cfg.Name, strings.Join(old.Present(), " "), cfg.Name)
		}
		if err := writeRecord(rec); err != nil { // over a record of nothing left
			return Record{}, err
		}
	} else if err != nil {
		return Record{}, err
	}
	if left, err := List(cfg.Name); err != nil || len(left) > 0 {
		removeRecord(cfg.Name)
		if err != nil {
			return Record{}, err
		}
		return Record{}, fmt.Errorf("tunnet: namespaces named as the hosts of %q exist that no emulator recorded (%s): "+
			"remove them with ip netns del, or mroce netem down --name %s --force", cfg.Name, strings.Join(left, " "), cfg.Name)
	}
	return rec, nil
}

// lockRecords keeps other processes from claiming a name until unlock.
func lockRecords() (unlock func(), err error) {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("tunnet: the record of what it makes: %w", err)
	}
	f, err := os.OpenFile(StateDir+"/.lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tunnet: the record of what it makes: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("tunnet: locking %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// List returns the namespaces named as the hosts of the network called
// name, mroce-NAME-hN, or every namespace named mroce-* when name is "".
// Which of them this package made, and may remove, the records say
// (Remove, Unrecorded).
func List(name string) ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if name == "" && strings.HasPrefix(e.Name(), "mroce-") || name != "" && isHostOf(name, e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
