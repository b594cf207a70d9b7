package main

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
)

// narrowNamespaces makes two network namespaces joined by a veth of
// 1,500 bytes, each with its plane address on its loopback interface (MTU
// 65,536) and a route to the other's through the veth. It returns their
// names and the two plane addresses; the test's cleanup removes them.
func narrowNamespaces(t *testing.T) (nsA, nsB, addrA, addrB string) {
	t.Helper()
	needNetAdmin(t)
	id := rand.IntN(1e6)
	nsA, nsB = fmt.Sprintf("mroce-pmtu-a%d", id), fmt.Sprintf("mroce-pmtu-b%d", id)
	vethA, vethB := fmt.Sprintf("pm%da", id), fmt.Sprintf("pm%db", id)
	addrA, addrB = "10.231.0.1", "10.231.1.1"
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", nsA).Run()
		exec.Command("ip", "netns", "del", nsB).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", nsA}, {"netns", "add", nsB},
		{"link", "add", vethA, "mtu", "1500", "type", "veth", "peer", "name", vethB, "mtu", "1500"},
		{"link", "set", vethA, "netns", nsA}, {"link", "set", vethB, "netns", nsB},
		{"-n", nsA, "link", "set", "lo", "up"}, {"-n", nsB, "link", "set", "lo", "up"},
		{"-n", nsA, "addr", "add", "10.230.0.1/24", "dev", vethA}, {"-n", nsB, "addr", "add", "10.230.0.2/24", "dev", vethB},
		{"-n", nsA, "link", "set", vethA, "up"}, {"-n", nsB, "link", "set", vethB, "up"},
		{"-n", nsA, "addr", "add", addrA + "/32", "dev", "lo"}, {"-n", nsB, "addr", "add", addrB + "/32", "dev", "lo"},
		{"-n", nsA, "route", "add", addrB + "/32", "via", "10.230.0.2", "src", addrA},
		{"-n", nsB, "route", "add", addrA + "/32", "via", "10.230.0.1", "src", addrB},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nsA, nsB, addrA, addrB
}

// A plane whose interface claims more than its path carries: the plane
// addresses sit on loopback, whose MTU is 65,536, and the path between
// them crosses 1,500-byte links. send and recv, with no --mtu, settle on
// 9,000-byte packets at the handshake; the path MTU search (spec section
// 6.7) starts below and finds 1,472 bytes, and the transfer completes,
// saying so, where packets of the handshake's size would be refused.
func TestPathNarrowerThanItsInterface(t *testing.T) {
	nsA, nsB, addrA, addrB := narrowNamespaces(t)
	bin := buildBinary(t)
	recv := start(t, "ip", "netns", "exec", nsB, bin, "recv", "--listen", addrB, "--timeout", "10s")
	recv.waitFor(t, "listening on") // a CONNECT before it would be refused
	out, err := exec.Command("ip", "netns", "exec", nsA, bin, "send", "--to", addrB, "--local", addrA,
		"--size-mib", "16", "--timeout", "10s").CombinedOutput()
	if err != nil {
		t.Fatalf("send: %v\n%s\nrecv:\n%s", err, out, recv.out.String())
	}
	text := string(out)
	if !strings.Contains(text, "packets of up to 9000 bytes") ||
		!strings.Contains(text, "note: packets of up to 1472 bytes: the planes carry 1472 bytes") ||
		!strings.Contains(text, "verified by the receiver") {
		t.Fatalf("send said:\n%s", text)
	}
	t.Log(text)
}
