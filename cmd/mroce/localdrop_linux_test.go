package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/mroce/mroce/app/xferstats"
)

// shapedNamespaces names two network namespaces for a test that shapes
// traffic with tc, tagged tag and a random number, which it returns too,
// and removes them when the test ends. The caller makes them. It skips
// the test without the rights or tc.
func shapedNamespaces(t *testing.T, tag string) (id int, nsA, nsB string) {
	needNetAdmin(t)
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("needs tc (Debian package iproute2)")
	}
	id = rand.IntN(1e6)
	nsA, nsB = fmt.Sprintf("mroce-%s-a%d", tag, id), fmt.Sprintf("mroce-%s-b%d", tag, id)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", nsA).Run()
		exec.Command("ip", "netns", "del", nsB).Run()
	})
	return id, nsA, nsB
}

// A sender faster than its own host lets out: a tbf of 200 Mbit/s holding
// 64 KiB on the sending namespace's veth, where the receiver's side offers
// 10 Gb/s. The kernel refuses what overflows the qdisc with ENOBUFS, the
// driver reports each datagram, and the sender resends it at once and
// cuts its rate: few packets are resent, and no path times out or moves.
// Unreported, the same drops cost as many resends as the transfer has
// packets and timed paths out. It runs with the Large tests, one package
// at a time: beside another package's tests on two cores, the sender once
// never outran the qdisc, and the test found no drop to report.
func TestLargeSenderFasterThanItsHost(t *testing.T) {
	if testing.Short() {
		t.Skip("a real-time test: make test runs it with the Large tests, one package at a time")
	}
	id, nsA, nsB := shapedNamespaces(t, "ld")
	vethA, vethB := fmt.Sprintf("ld%da", id), fmt.Sprintf("ld%db", id)
	for _, args := range [][]string{
		{"ip", "netns", "add", nsA}, {"ip", "netns", "add", nsB},
		{"ip", "link", "add", vethA, "type", "veth", "peer", "name", vethB},
		{"ip", "link", "set", vethA, "netns", nsA}, {"ip", "link", "set", vethB, "netns", nsB},
		{"ip", "-n", nsA, "addr", "add", "10.232.0.1/24", "dev", vethA}, {"ip", "-n", nsB, "addr", "add", "10.232.0.2/24", "dev", vethB},
		{"ip", "-n", nsA, "link", "set", vethA, "up"}, {"ip", "-n", nsB, "link", "set", vethB, "up"},
		{"ip", "netns", "exec", nsA, "tc", "qdisc", "add", "dev", vethA, "root", "tbf", "rate", "200mbit", "burst", "32kb", "limit", "64kb"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Skipf("%s: %v: %s (no tbf here?)", strings.Join(args, " "), err, out)
		}
	}
	bin := buildBinary(t)
	recv := start(t, "ip", "netns", "exec", nsB, bin, "recv", "--listen", "10.232.0.2", "--inbound-gbps", "10", "--timeout", "20s")
	recv.waitListening(t)
	out, err := exec.Command("ip", "netns", "exec", nsA, bin, "send", "--to", "10.232.0.2", "--local", "10.232.0.1",
		"--size-mib", "16", "--timeout", "20s", "--json").Output()
	if err != nil {
		t.Fatalf("send: %v\n%s\nrecv:\n%s", err, out, recv.out.String())
	}
	var rep xferstats.Report
	if err := json.Unmarshal(out, &rep); err != nil || rep.End == nil || !rep.End.Verified {
		t.Fatalf("report %v: %s", err, out)
	}
	var packets, timeouts, moves uint64
	for _, p := range rep.PerPath {
		packets += p.Packets
		timeouts += p.Timeouts
		moves += p.Repaths
	}
	t.Logf("%.2f Gb/s; %d packets, %d resent, %d dropped by the host; %d timeouts, %d moves",
		rep.End.Gbps, packets, rep.End.Retransmits, rep.End.LocalDrops, timeouts, moves)
	if rep.End.LocalDrops == 0 {
		t.Error("the host dropped nothing: the qdisc did not overflow, or its drops were not reported")
	}
	// Alone on this machine it resends 4-6%; beside make test's other
	// packages, up to 11%. Unreported, the drops cost over half the packets.
	if rep.End.Retransmits*5 > packets || timeouts != 0 || moves != 0 {
		t.Errorf("%d of %d packets resent (want under 20%%), %d timeouts, %d moves (want none)", rep.End.Retransmits, packets, timeouts, moves)
	}
}

// Two planes, each a veth between two namespaces, with a tbf of 200 Mbit/s
// holding 64 KiB on plane 1's veth in the sending namespace. Plane 1's
// drops come from its own queue: once they show it, they limit plane 1
// alone, and plane 0 carries the rest. Cutting the connection's one rate
// held the planes to equal shares of the spray.
func TestSlowPlaneOfTwoOnTheKernelPath(t *testing.T) {
	id, nsA, nsB := shapedNamespaces(t, "sp")
	cmds := [][]string{{"ip", "netns", "add", nsA}, {"ip", "netns", "add", nsB}}
	for p := range 2 {
		veth := fmt.Sprintf("sp%dp%d", id, p)
		a, b := fmt.Sprintf("10.233.%d.1", p), fmt.Sprintf("10.233.%d.2", p)
		cmds = append(cmds,
			[]string{"ip", "-n", nsA, "link", "add", veth, "type", "veth", "peer", "name", veth, "netns", nsB},
			[]string{"ip", "-n", nsA, "addr", "add", a + "/24", "dev", veth}, []string{"ip", "-n", nsB, "addr", "add", b + "/24", "dev", veth},
			[]string{"ip", "-n", nsA, "link", "set", veth, "up"}, []string{"ip", "-n", nsB, "link", "set", veth, "up"})
	}
	cmds = append(cmds, []string{"ip", "netns", "exec", nsA, "tc", "qdisc", "add", "dev", fmt.Sprintf("sp%dp1", id),
		"root", "tbf", "rate", "200mbit", "burst", "32kb", "limit", "64kb"})
	for _, args := range cmds {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Skipf("%s: %v: %s (no tbf here?)", strings.Join(args, " "), err, out)
		}
	}
	bin := buildBinary(t)
	recv := start(t, "ip", "netns", "exec", nsB, bin, "recv", "--listen", "10.233.0.2,10.233.1.2", "--inbound-gbps", "10", "--timeout", "20s")
	recv.waitListening(t)
	out, err := exec.Command("ip", "netns", "exec", nsA, bin, "send", "--to", "10.233.0.2,10.233.1.2",
		"--local", "10.233.0.1,10.233.1.1", "--size-mib", "32", "--timeout", "20s", "--json").Output()
	if err != nil {
		t.Fatalf("send: %v\n%s\nrecv:\n%s", err, out, recv.out.String())
	}
	var rep xferstats.Report
	if err := json.Unmarshal(out, &rep); err != nil || rep.End == nil || !rep.End.Verified {
		t.Fatalf("report %v: %s", err, out)
	}
	var onPlane [2]uint64
	var packets, timeouts, moves uint64
	for _, p := range rep.PerPath {
		if p.Plane < 2 {
			onPlane[p.Plane] += p.Packets
		}
		packets += p.Packets
		timeouts += p.Timeouts
		moves += p.Repaths
	}
	t.Logf("%.2f Gb/s; %d packets on plane 0, %d on plane 1, %d resent, %d dropped by the host; %d timeouts, %d moves",
		rep.End.Gbps, onPlane[0], onPlane[1], rep.End.Retransmits, rep.End.LocalDrops, timeouts, moves)
	if rep.End.LocalDrops == 0 {
		t.Error("the host dropped nothing: the qdisc did not overflow, or its drops were not reported")
	}
	// Plane 1's qdisc lets out a fraction of what plane 0 carries; with
	// the connection's one rate cut, the planes carried equal shares.
	if 2*onPlane[0] < 3*onPlane[1] || rep.End.Retransmits*5 > packets || moves != 0 {
		t.Errorf("%d packets on plane 0 and %d on plane 1 (want 1.5 times or more on plane 0), %d of %d resent (want under 20%%), %d moves (want none)",
			onPlane[0], onPlane[1], rep.End.Retransmits, packets, moves)
	}
}
