package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/tunnet"
)

// Bad flags of netem up are usage errors with exit status 2, before
// anything is made.
func TestNetemUpRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--loss", "1"}, {"--loss", "-0.1"}, {"--rate-gbps", "0"}, {"--delay", "-1us"}, {"--queue-kib", "0"},
		{"--hosts", "0"}, {"--name", "no/slash"}, {"--blackhole-plane", "4"}, {"--blackhole-plane", "1", "--blackhole-for", "-1s"},
	} {
		r := runCLI(t, "", append([]string{"netem", "up"}, args...)...)
		if r.code != 2 && !(r.code == 1 && strings.Contains(r.stderr, "tunnet:")) {
			t.Errorf("%v: exit %d, %q", args, r.code, r.stderr)
		}
	}
	if r := runCLI(t, "", "netem", "exec", "0"); r.code != 2 || !strings.Contains(r.stderr, "want HOST and a command") {
		t.Errorf("exec without a command: exit %d, %q", r.code, r.stderr)
	}
}

// needNetAdmin skips the test unless it runs as root with iproute2's ip.
// With MROCE_REQUIRE_NETADMIN set, as in CI, it fails instead.
func needNetAdmin(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("ip")
	if os.Geteuid() != 0 || err != nil {
		if os.Getenv("MROCE_REQUIRE_NETADMIN") != "" {
			t.Fatal("needs root and ip (Debian package iproute2)")
		}
		t.Skip("needs root and ip (Debian package iproute2)")
	}
}

// upRun is a netem up running in this process.
type upRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    result
}

// wait waits for netem up to stop and returns its result.
func (u *upRun) wait() result { <-u.done; return u.res }

// upInProcess runs netem up's network of hosts hosts and 2 planes for at
// most d, in this process, and waits for its hosts. It runs without its
// command line, because two command lines at once in one process race
// inside the flag library. Its flags have their own test. The test's end
// stops it and removes whatever is left.
func upInProcess(t *testing.T, name string, hosts int, d time.Duration) *upRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	u := &upRun{cancel: cancel, done: make(chan struct{})}
	t.Cleanup(func() {
		cancel()
		u.wait()
		tunnet.Remove(name, true)
	})
	go func() {
		defer close(u.done)
		var out bytes.Buffer
		err := runNetemUp(ctx, &out, tunnet.Config{Name: name, Hosts: hosts, Planes: 2,
			Fabric: netem.Config{Uplink: netem.LinkConfig{Rate: 1e9}, Downlink: netem.LinkConfig{Rate: 1e9}}})
		code := 0
		if err != nil {
			code = 1
		}
		u.res = result{out.String(), fmt.Sprint(err), code}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if left, _ := tunnet.List(name); len(left) == hosts {
			break
		}
		select {
		case <-u.done:
			t.Fatalf("up: %+v", u.res)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the hosts did not appear")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // addresses and links come up after the namespaces
	return u
}

// netem up runs an emulated network for as long as asked, exec runs
// programs inside its hosts and passes their exit status on, status lists
// the hosts, down leaves a network that runs, and nothing is left when up
// returns. down --name leaves namespaces named as a network's hosts that no
// netem up recorded, unless forced.
func TestNetemUpExecStatusDown(t *testing.T) {
	needNetAdmin(t)
	name := fmt.Sprintf("c%d", rand.IntN(1e6))
	run := upInProcess(t, name, 2, 3*time.Second)
	if r := runCLI(t, "", "netem", "status", "--name", name); !strings.Contains(r.stdout, "mroce-"+name+"-h1") || !strings.Contains(r.stdout, "running") {
		t.Errorf("status: %q", r.stdout)
	}
	r := runCLI(t, "", "netem", "exec", "--name", name, "1", "--", "cat", "/sys/class/net/mr1/mtu")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "9000" {
		t.Errorf("exec: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "netem", "exec", "--name", name, "0", "--", "sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("exec's exit status: %d", r.code)
	}
	if r := runCLI(t, "", "netem", "down", "--name", name); r.code != 1 || !strings.Contains(r.stderr, "runs") {
		t.Errorf("down --name of a running network: exit %d, %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", "netem", "down"); r.code != 0 || !strings.Contains(r.stderr, "left network "+name) {
		t.Errorf("down of a running network: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if left, _ := tunnet.List(name); len(left) != 2 {
		t.Errorf("down removed hosts of a running network: %v left", left)
	}
	up := run.wait()
	if up.code != 0 || !strings.Contains(up.stdout, "10.1.0.2") || !strings.Contains(up.stdout, "every namespace removed") {
		t.Fatalf("up: exit %d, %q, %q", up.code, up.stdout, up.stderr)
	}
	if left, _ := tunnet.List(name); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	if _, ok, err := tunnet.ReadRecord(name); ok || err != nil {
		t.Fatalf("the record is left behind (%v)", err)
	}
	// A namespace named as a host, which no netem up recorded.
	if out, err := exec.Command("ip", "netns", "add", "mroce-"+name+"-h0").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r := runCLI(t, "", "netem", "down", "--name", name); r.code != 1 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("down of an unrecorded namespace: exit %d, %q", r.code, r.stderr)
	}
	if left, _ := tunnet.List(name); len(left) != 1 {
		t.Fatalf("down removed an unrecorded namespace")
	}
	if r := runCLI(t, "", "netem", "down", "--name", name, "--force"); r.code != 0 || !strings.Contains(r.stdout, "removed 1") {
		t.Errorf("down --force: exit %d, %q", r.code, r.stdout)
	}
	if left, _ := tunnet.List(name); len(left) != 0 {
		t.Fatalf("down left %v", left)
	}
	if r := runCLI(t, "", "netem", "down", "--force"); r.code != 2 {
		t.Errorf("down --force without --name: exit %d, %q", r.code, r.stderr)
	}
}

// netem relay carries a datagram from a host's real address to another's
// virtual one, and says what it relayed when it stops. No root needed.
func TestNetemRelay(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the relay's default addresses need Linux's whole 127.0.0.0/8 loopback")
	}
	port := 20000 + rand.IntN(30000)
	done := make(chan result, 1)
	go func() {
		done <- runCLI(t, "", "netem", "relay", "--hosts", "2", "--planes", "1", "--port", fmt.Sprint(port),
			"--source-port-base", fmt.Sprint(port+1), "--source-ports", "1", "--for", "2s")
	}()
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 10, 0, 2), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 10, 0, 1), Port: port + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	rx.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	var from netip.AddrPort
	for k := 0; k == 0; { // send until the relay listens
		tx.WriteToUDP([]byte("hello"), &net.UDPAddr{IP: net.IPv4(127, 20, 0, 2), Port: port})
		rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		k, from, _ = rx.ReadFromUDPAddrPort(buf)
		if k > 0 && string(buf[:k]) != "hello" {
			t.Fatalf("got %q", buf[:k])
		}
	}
	if want := netip.AddrPortFrom(netip.MustParseAddr("127.20.0.1"), uint16(port+1)); from != want {
		t.Errorf("from %v, want %v", from, want)
	}
	r := <-done
	if r.code != 0 || !strings.Contains(r.stdout, "127.20.0.2") || !strings.Contains(r.stdout, "delivered") {
		t.Fatalf("relay: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
}

// --blackhole-plane drops everything on that plane from --blackhole-at.
// Through the relay, plane 1 carries a datagram and plane 0 does not.
func TestNetemRelayBlackhole(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the relay's default addresses need Linux's whole 127.0.0.0/8 loopback")
	}
	port := 20000 + rand.IntN(30000)
	done := make(chan result, 1)
	go func() {
		done <- runCLI(t, "", "netem", "relay", "--hosts", "2", "--planes", "2", "--port", fmt.Sprint(port),
			"--source-ports", "0", "--blackhole-plane", "0", "--for", "2s")
	}()
	arrives := func(plane byte) bool {
		rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 10+plane, 0, 2), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 10+plane, 0, 1), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		buf := make([]byte, 64)
		for try := 0; try < 10; try++ {
			tx.WriteToUDP([]byte("x"), &net.UDPAddr{IP: net.IPv4(127, 20+plane, 0, 2), Port: port})
			rx.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if k, _, _ := rx.ReadFromUDPAddrPort(buf); k > 0 {
				return true
			}
		}
		return false
	}
	if !arrives(1) {
		t.Error("plane 1 carried nothing")
	}
	if arrives(0) {
		t.Error("the blackholed plane carried a datagram")
	}
	if r := <-done; r.code != 0 {
		t.Fatalf("relay: exit %d, %q", r.code, r.stderr)
	}
}

// fabricConfigOf reads the fabric flags as netem relay and netem up do.
func fabricConfigOf(args ...string) (netem.Config, error) {
	var fc netem.Config
	var ferr error
	app := &cli.App{Name: "mroce", Writer: io.Discard, ErrWriter: io.Discard, ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{{Name: "relay", Flags: fabricFlags(), Action: func(c *cli.Context) error {
			fc, ferr = fabricConfig(c)
			return nil
		}}}}
	if err := app.Run(append([]string{"mroce", "relay"}, args...)); err != nil {
		return fc, err
	}
	return fc, ferr
}

// The emulators' flags reach every link towards a host: loss in bursts,
// reordering, duplication, corruption; a plane's delay reaches that
// plane's links alone. Values out of range are refused.
func TestEmulatorImpairmentFlags(t *testing.T) {
	fc, err := fabricConfigOf("--planes", "2", "--loss", "0.02", "--burst-len", "4", "--reorder", "0.1", "--reorder-gap", "50us",
		"--duplicate", "0.01", "--corrupt", "0.001", "--plane-delay", "1=2ms")
	if err != nil {
		t.Fatal(err)
	}
	im := fc.Downlink.Impair
	ge, ok := im.Loss.(*netem.GilbertElliott)
	if !ok || math.Abs(ge.Rate()-0.02) > 1e-9 || ge.R != 0.25 {
		t.Errorf("loss model %#v, want Gilbert-Elliott at 2%% in bursts of 4", im.Loss)
	}
	if im.Reorder != 0.1 || im.ReorderGap != 50*time.Microsecond || im.Duplicate != 0.01 || im.Corrupt != 0.001 {
		t.Errorf("impairments %+v", im)
	}
	if fc.Uplink.Impair.Loss != nil || fc.Uplink.Impair.Reorder != 0 {
		t.Errorf("the uplinks are impaired too: %+v", fc.Uplink.Impair)
	}
	if len(fc.Overrides) != 2 || fc.Overrides[0].Plane != 1 || fc.Overrides[0].Link.Delay != 2*time.Millisecond || fc.Overrides[1].Link.Delay != 2*time.Millisecond {
		t.Errorf("overrides %+v, want plane 1's uplinks and downlinks at 2 ms", fc.Overrides)
	}
	if fc, err := fabricConfigOf("--loss", "0.1"); err != nil || fc.Downlink.Impair.Loss.(*netem.RandomLoss).P != 0.1 {
		t.Errorf("random loss: %v", err)
	}
	for _, bad := range [][]string{{"--burst-len", "4"}, {"--loss", "0.1", "--burst-len", "0.5"}, {"--reorder", "2"},
		{"--duplicate", "-1"}, {"--planes", "2", "--plane-delay", "2=1ms"}, {"--plane-delay", "0=x"}} {
		if _, err := fabricConfigOf(bad...); err == nil {
			t.Errorf("%v: taken", bad)
		}
	}
}
