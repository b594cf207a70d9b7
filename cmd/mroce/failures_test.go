package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mroce/mroce/app/filexfer"
	"github.com/mroce/mroce/app/host"
	"github.com/mroce/mroce/endpoint"
)

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is a running mroce command.
type proc struct {
	cmd   *exec.Cmd
	out   lockedBuffer
	ended chan struct{}
	code  int
	at    time.Time // when it ended
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), ended: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.at = time.Now()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			p.code = exit.ExitCode()
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		}
		close(p.ended)
	}()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.ended })
	return p
}

// waitFor waits until the output holds s.
func (p *proc) waitFor(t *testing.T, s string) {
	t.Helper()
	p.waitUntil(t, fmt.Sprintf("%q", s), func(out string) bool { return strings.Contains(out, s) })
}

// waitListening waits until the process is a receiver whose listener is
// up: its line "listening on", not the warning of that name that precedes
// it where the planes are beyond loopback (warnOpen). A CONNECT before the
// listener is refused.
func (p *proc) waitListening(t *testing.T) {
	t.Helper()
	p.waitUntil(t, `line "listening on"`, func(out string) bool {
		return strings.HasPrefix(out, "listening on ") || strings.Contains(out, "\nlistening on ")
	})
}

// waitUntil waits up to 20 s for the process's output to be done, and
// fails the test with what it waited for if it never is.
func (p *proc) waitUntil(t *testing.T, what string, done func(out string) bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if done(p.out.String()) {
			return
		}
	}
	t.Fatalf("no %s in 20 s:\n%s", what, p.out.String())
}

// wait waits for the process to end and returns its status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.ended:
		return p.code
	case <-time.After(30 * time.Second):
		t.Fatalf("still running after 30 s:\n%s", p.out.String())
		return 0
	}
}

// Every way one side of a transfer fails ends the other side too, with
// an exit status that names the side that failed and a message that
// names the cause: an interrupt at once, death within --timeout, a full
// disk with the receiver's own words. A failed transfer leaves nothing
// under --out, or a partial file when asked.
func TestLargeFailuresEndBothSides(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	const timeout = 3 * time.Second
	// A peer that died is found by the connection's keep-alives or by the
	// wait for its next message, both after --timeout, whichever is first.
	const dead = "no forward progress|the peer did not answer in time"
	for _, c := range []struct {
		name     string
		victim   string // the side the test fails: "send" or "recv"
		signal   syscall.Signal
		keep     bool
		status   int           // the victim's exit status
		other    int           // the other side's
		says     string        // a regular expression the other side's output matches
		deadline time.Duration // from the failure to the other side's exit
	}{
		{name: "sender interrupted", victim: "send", signal: syscall.SIGINT, status: 130, other: exitPeerFailed,
			says: "the sender was interrupted", deadline: time.Second},
		{name: "receiver terminated", victim: "recv", signal: syscall.SIGTERM, keep: true, status: 143, other: exitPeerFailed,
			says: "the receiver was interrupted", deadline: time.Second},
		{name: "sender killed", victim: "send", signal: syscall.SIGKILL, status: 137, other: exitPeerGone,
			says: dead, deadline: timeout + time.Second},
		{name: "receiver killed", victim: "recv", signal: syscall.SIGKILL, status: 137, other: exitPeerGone,
			says: dead, deadline: timeout + time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			outDir := t.TempDir()
			port := fmt.Sprint(freePort(t, "127.0.0.97"))
			args := []string{"recv", "--listen", "127.0.0.97", "--port", port, "--out", outDir, "--timeout", timeout.String()}
			if c.keep {
				args = append(args, "--keep-partial")
			}
			recv := start(t, bin, args...)
			recv.waitListening(t)
			send := start(t, bin, "send", "--to", "127.0.0.97", "--port", port, "--size-mib", "100000", "--timeout", timeout.String())
			recv.waitFor(t, "receiving")
			time.Sleep(300 * time.Millisecond)
			victim, other := send, recv
			if c.victim == "recv" {
				victim, other = recv, send
			}
			victim.cmd.Process.Signal(c.signal)
			failed := time.Now()
			status, otherStatus := victim.wait(t), other.wait(t)
			if status != c.status || otherStatus != c.other {
				t.Fatalf("exit statuses %d (%s) and %d (other), want %d and %d\n%s:\n%s\nother:\n%s",
					status, c.victim, otherStatus, c.status, c.other, c.victim, victim.out.String(), other.out.String())
			}
			took := other.at.Sub(failed)
			t.Logf("the other side ended %v after the %s failed", took.Round(time.Millisecond), c.victim)
			if took > c.deadline {
				t.Errorf("the other side took %v to end, want at most %v", took, c.deadline)
			}
			if !regexp.MustCompile(c.says).MatchString(other.out.String()) {
				t.Errorf("the other side does not say %q:\n%s", c.says, other.out.String())
			}
			entries, _ := os.ReadDir(outDir)
			switch {
			case c.keep && (len(entries) != 1 || entries[0].Name() != "generated.partial"):
				t.Errorf("--keep-partial left %v, want generated.partial", entries)
			case !c.keep && c.signal != syscall.SIGKILL && len(entries) != 0:
				t.Errorf("a failed transfer left %v", entries)
			}
		})
	}
}

// A receiver whose disk fills tells its sender why, in its own words, and
// both exit at once: the receiver 1, the sender 3. The disk is a small
// tmpfs, which needs root.
func TestLargeFullDiskIsReportedToTheSender(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary: with the large tests")
	}
	dir := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).Run(); err != nil {
		t.Skipf("cannot mount a small tmpfs (%v): needs root", err)
	}
	defer exec.Command("umount", dir).Run()
	bin := buildBinary(t)
	port := fmt.Sprint(freePort(t, "127.0.0.98"))
	recv := start(t, bin, "recv", "--listen", "127.0.0.98", "--port", port, "--out", dir, "--timeout", "30s")
	recv.waitListening(t)
	send := start(t, bin, "send", "--to", "127.0.0.98", "--port", port, "--size-mib", "64", "--timeout", "30s")
	if s, r := send.wait(t), recv.wait(t); s != exitPeerFailed || r != 1 {
		t.Fatalf("send exit %d, recv exit %d, want 3 and 1\nsend:\n%s\nrecv:\n%s", s, r, send.out.String(), recv.out.String())
	}
	for _, want := range []string{"the receiver could not write the data", "no space left on device"} {
		if !strings.Contains(send.out.String(), want) {
			t.Errorf("send does not say %q:\n%s", want, send.out.String())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the failed transfer left %v", entries)
	}
}

// dialSilently connects to a receiver at addr and port from a host of its
// own, closed with the test, and sends nothing on the connection.
func dialSilently(t *testing.T, addr string, port int) filexfer.Conn {
	t.Helper()
	h, err := host.Open([]netip.Addr{netip.MustParseAddr(addr)}, host.Options{Paths: 1, SourcePorts: 1, NoProgress: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	silent, err := filexfer.Dial(ctx, h.Device(), endpoint.Remote{Planes: []netip.Addr{netip.MustParseAddr(addr)}, Port: uint16(port)})
	if err != nil {
		t.Fatal(err)
	}
	return silent
}

// recv serves the first connection whose transfer begins, not the first
// that connects: one that connects first and then says nothing holds up
// nothing, and the real sender's file arrives.
func TestLargeRecvServesPastASilentConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	port := freePort(t, "127.0.0.99")
	recv := start(t, bin, "recv", "--listen", "127.0.0.99", "--port", fmt.Sprint(port), "--timeout", "30s")
	recv.waitListening(t)
	silent := dialSilently(t, "127.0.0.99", port)
	defer silent.QP.Close()
	send := start(t, bin, "send", "--to", "127.0.0.99", "--port", fmt.Sprint(port), "--size-mib", "8")
	if s, r := send.wait(t), recv.wait(t); s != 0 || r != 0 {
		t.Fatalf("send exit %d, recv exit %d\nsend:\n%s\nrecv:\n%s", s, r, send.out.String(), recv.out.String())
	}
	if !strings.Contains(recv.out.String(), "SHA-256 matches") {
		t.Errorf("recv did not verify the transfer:\n%s", recv.out.String())
	}
}

// recv gives a connection that says nothing at most min(5 s, --timeout)
// for its header, then aborts it with the code for giving up waiting, and
// goes on serving: the next sender's transfer arrives.
func TestRecvGivesUpOnASilentConnection(t *testing.T) {
	const timeout = time.Second
	port := freePort(t, "127.0.0.88")
	done := make(chan error, 1)
	go func() {
		o := transferOptions{port: uint16(port), paths: 2, sourcePorts: 16, chunk: 1 << 20, interval: time.Hour, noProgress: timeout}
		done <- runRecv(context.Background(), io.Discard, io.Discard, []netip.Addr{netip.MustParseAddr("127.0.0.88")}, "", outputOptions{}, o)
	}()
	time.Sleep(200 * time.Millisecond)
	silent := dialSilently(t, "127.0.0.88", port)
	connected := time.Now()
	var abort *endpoint.AbortError
	for time.Since(connected) < 5*time.Second {
		if st, err := silent.QP.State(); st == endpoint.Closed {
			if !errors.As(err, &abort) || !abort.Remote || filexfer.Code(abort.Code) != filexfer.CodeTimeout {
				t.Fatalf("the silent connection ended with %v, want the receiver's %v", err, filexfer.CodeTimeout)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if abort == nil {
		t.Fatalf("the silent connection still open %v after it connected, with --timeout %v", time.Since(connected), timeout)
	}
	t.Logf("the silent connection was given up %v after it connected", time.Since(connected).Round(time.Millisecond))
	s := runCLI(t, "", "send", "--to", "127.0.0.88", "--port", fmt.Sprint(port), "--size-mib", "1", "--paths", "2")
	if err := <-done; err != nil || s.code != 0 {
		t.Fatalf("recv: %v; send: exit %d: %s", err, s.code, s.stderr)
	}
}
