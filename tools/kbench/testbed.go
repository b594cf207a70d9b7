//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// The testbed's addresses. Plane p is 10.(64+p).0.0/16: the link between
// the sender and the router is 10.(64+p).1.0/24, the one between the router
// and the receiver 10.(64+p).2.0/24. The router is .1 on both, a host .2.
func planeAddr(p, link, host int) string { return fmt.Sprintf("10.%d.%d.%d", 64+p, link, host) }

func senderAddr(p int) string   { return planeAddr(p, 1, 2) }
func receiverAddr(p int) string { return planeAddr(p, 2, 2) }

// maxPlanes keeps every plane's /16 inside 10.64.0.0/10.
const maxPlanes = 16

// The interfaces. Each lives in a namespace of the testbed's own, so the
// names cannot meet another interface of the machine: pP at a host, sP in
// the router towards the sender and rP towards the receiver.
func hostIf(p int) string     { return fmt.Sprintf("p%d", p) }
func toSender(p int) string   { return fmt.Sprintf("s%d", p) }
func toReceiver(p int) string { return fmt.Sprintf("r%d", p) }

// bedConfig is what the testbed is built with.
type bedConfig struct {
	prefix   string // the namespaces' names begin with it
	planes   int
	rateMbit int    // tbf's rate on every plane, towards the receiver
	queueKiB int    // tbf's drop-tail queue
	offloads string // "off", or "default" for what the kernel gives a veth
	ce       bool   // CE marks will be made: the hosts' TCP asks for ECN
}

// testbed is three network namespaces: the sender, the router and the
// receiver, with a pair of veth links per plane through the router.
type testbed struct {
	cfg           bedConfig
	snd, rtr, rcv string
	// made holds each namespace this run made, with the inode it had, so
	// that removal never touches one made by anyone else, even under the
	// same name.
	made  map[string]uint64
	order []string
}

// errBed marks a failure to build the testbed: namespaces, veth links,
// tbf or nftables unavailable. kbench exits with its own status for it.
var errBed = errors.New("the testbed could not be built")

func newTestbed(c bedConfig) *testbed {
	return &testbed{cfg: c, snd: c.prefix + "snd", rtr: c.prefix + "rtr", rcv: c.prefix + "rcv", made: map[string]uint64{}}
}

// burstBytes is tbf's bucket: a quarter of a millisecond at the rate, so
// that the timer's lateness on a busy machine does not cost rate, and never
// less than 32 KiB. With the kernel's offloads it holds a whole 64 KB run
// of segments and its headers, which tbf would otherwise cut into packets.
func (c bedConfig) burstBytes() int {
	least := 32 << 10
	if c.offloads != "off" {
		least = 96 << 10
	}
	return max(least, c.rateMbit*1_000_000/8/4000)
}

// up builds the testbed. On failure it leaves what it made for down.
func (tb *testbed) up() error {
	c := tb.cfg
	for _, ns := range []string{tb.snd, tb.rtr, tb.rcv} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			return fmt.Errorf("%w: namespace %s exists already", errBed, ns)
		}
		if err := run("ip", "netns", "add", ns); err != nil {
			return fmt.Errorf("%w: %v", errBed, err)
		}
		ino, err := nsInode(ns)
		if err != nil {
			return fmt.Errorf("%w: %v", errBed, err)
		}
		tb.made[ns] = ino
		tb.order = append(tb.order, ns)
		steps := [][]string{
			{"ip", "-n", ns, "link", "set", "lo", "up"},
			{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
				"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"},
		}
		switch {
		case ns == tb.rtr:
			steps = append(steps, []string{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"})
		case c.ce:
			// Without it the kernel's TCP sends no ECN-capable packets, and
			// nothing would mark them.
			steps = append(steps, []string{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_ecn=1"})
		}
		if err := runAll(steps); err != nil {
			return fmt.Errorf("%w: %v", errBed, err)
		}
	}
	for p := 0; p < c.planes; p++ {
		if err := tb.plane(p); err != nil {
			return fmt.Errorf("%w: plane %d: %v", errBed, p, err)
		}
	}
	if err := tb.setRules(0, 0); err != nil {
		return fmt.Errorf("%w: %v", errBed, err)
	}
	return nil
}

// plane makes plane p's two veth links, their addresses and routes, the
// offloads and the rate limit.
func (tb *testbed) plane(p int) error {
	c := tb.cfg
	pi, si, ri := hostIf(p), toSender(p), toReceiver(p)
	steps := [][]string{
		{"ip", "-n", tb.snd, "link", "add", pi, "type", "veth", "peer", "name", si, "netns", tb.rtr},
		{"ip", "-n", tb.rtr, "link", "add", ri, "type", "veth", "peer", "name", pi, "netns", tb.rcv},
		{"ip", "-n", tb.snd, "link", "set", pi, "mtu", "1500", "up"},
		{"ip", "-n", tb.rtr, "link", "set", si, "mtu", "1500", "up"},
		{"ip", "-n", tb.rtr, "link", "set", ri, "mtu", "1500", "up"},
		{"ip", "-n", tb.rcv, "link", "set", pi, "mtu", "1500", "up"},
		{"ip", "-n", tb.snd, "addr", "add", senderAddr(p) + "/24", "dev", pi},
		{"ip", "-n", tb.rtr, "addr", "add", planeAddr(p, 1, 1) + "/24", "dev", si},
		{"ip", "-n", tb.rtr, "addr", "add", planeAddr(p, 2, 1) + "/24", "dev", ri},
		{"ip", "-n", tb.rcv, "addr", "add", receiverAddr(p) + "/24", "dev", pi},
		{"ip", "-n", tb.snd, "route", "add", planeAddr(p, 2, 0) + "/24", "via", planeAddr(p, 1, 1), "dev", pi},
		{"ip", "-n", tb.rcv, "route", "add", planeAddr(p, 1, 0) + "/24", "via", planeAddr(p, 2, 1), "dev", pi},
	}
	if c.offloads == "off" {
		// Every skb on the testbed is then one packet of at most the MTU, so
		// that the router loses, queues and counts packets, not the 64 KB
		// runs a veth passes whole. The hosts still segment in software.
		off := []string{"tso", "off", "gso", "off", "gro", "off", "tx-udp-segmentation", "off"}
		for _, e := range [][2]string{{tb.snd, pi}, {tb.rtr, si}, {tb.rtr, ri}, {tb.rcv, pi}} {
			steps = append(steps, append([]string{"ip", "netns", "exec", e[0], "ethtool", "-K", e[1]}, off...))
		}
	}
	// The bottleneck: tbf on the router's egress towards the receiver, its
	// queue a drop-tail FIFO of queueKiB.
	steps = append(steps, []string{"tc", "-n", tb.rtr, "qdisc", "add", "dev", ri, "root", "tbf",
		"rate", fmt.Sprintf("%dmbit", c.rateMbit), "burst", fmt.Sprint(c.burstBytes()), "limit", fmt.Sprint(c.queueKiB << 10)})
	return runAll(steps)
}

// rules is the router's nftables table for random loss of p (a fraction)
// on every plane, in both directions, and CE marks on a fraction ce of the
// ECN-capable packets towards the receiver. Each rule has a counter and a
// comment that says what it counts.
func (tb *testbed) rules(loss, ce float64) string {
	const mod = 1_000_000
	var b strings.Builder
	// Declaring the table first makes deleting it valid when it does not
	// exist; the three lines are one transaction.
	b.WriteString("table inet kbench {}\ndelete table inet kbench\ntable inet kbench {\n")
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority 0; policy accept;\n")
	lossK := int(loss*mod + 0.5)
	ceK := int(ce*mod + 0.5)
	for p := 0; p < tb.cfg.planes; p++ {
		for _, dir := range []struct {
			iif, name string
			data      bool
		}{{toSender(p), "to-receiver", true}, {toReceiver(p), "to-sender", false}} {
			fmt.Fprintf(&b, "\t\tiifname %q counter comment \"seen %s p%d\"\n", dir.iif, dir.name, p)
			if lossK > 0 {
				fmt.Fprintf(&b, "\t\tiifname %q numgen random mod %d < %d counter drop comment \"lost %s p%d\"\n", dir.iif, mod, lossK, dir.name, p)
			}
			if dir.data && ceK > 0 {
				fmt.Fprintf(&b, "\t\tiifname %q ip ecn { ect0, ect1 } numgen random mod %d < %d counter ip ecn set ce comment \"marked %s p%d\"\n", dir.iif, mod, ceK, dir.name, p)
			}
		}
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

// setRules replaces the router's table, which also zeroes its counters.
func (tb *testbed) setRules(loss, ce float64) error {
	cmd := exec.Command("ip", "netns", "exec", tb.rtr, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(tb.rules(loss, ce))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", tb.rtr, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// counts is what the router's rules counted since the table was set.
type counts struct {
	Seen   uint64 `json:"seen"`   // packets forwarded or dropped, both directions
	Lost   uint64 `json:"lost"`   // dropped by the loss rules
	Marked uint64 `json:"marked"` // marked CE
}

// readCounts sums the router's counters by the first word of each rule's
// comment.
func (tb *testbed) readCounts() (counts, error) {
	out, err := exec.Command("ip", "netns", "exec", tb.rtr, "nft", "-j", "list", "table", "inet", "kbench").Output()
	if err != nil {
		return counts{}, fmt.Errorf("nft list in %s: %v", tb.rtr, err)
	}
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Comment string            `json:"comment"`
				Expr    []json.RawMessage `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return counts{}, fmt.Errorf("nft -j: %v", err)
	}
	var c counts
	for _, o := range doc.Nftables {
		if o.Rule == nil {
			continue
		}
		for _, e := range o.Rule.Expr {
			var ex struct {
				Counter *struct {
					Packets uint64 `json:"packets"`
				} `json:"counter"`
			}
			if json.Unmarshal(e, &ex) != nil || ex.Counter == nil {
				continue
			}
			switch strings.Fields(o.Rule.Comment + " x")[0] {
			case "seen":
				c.Seen += ex.Counter.Packets
			case "lost":
				c.Lost += ex.Counter.Packets
			case "marked":
				c.Marked += ex.Counter.Packets
			}
		}
	}
	return c, nil
}

// down deletes the namespaces this run made, each only while it is still
// the one made (the same inode); their links, qdiscs and rules go with
// them. It returns the first failure and goes on past it.
func (tb *testbed) down() error {
	var first error
	for i := len(tb.order) - 1; i >= 0; i-- {
		ns := tb.order[i]
		ino, err := nsInode(ns)
		if err != nil {
			if !os.IsNotExist(err) && first == nil {
				first = err
			}
			delete(tb.made, ns)
			continue
		}
		if ino != tb.made[ns] {
			if first == nil {
				first = fmt.Errorf("namespace %s is no longer the one this run made; left alone", ns)
			}
			continue
		}
		if err := run("ip", "netns", "del", ns); err != nil && first == nil {
			first = err
		}
		delete(tb.made, ns)
	}
	tb.order = nil
	return first
}

// nsInode is the inode of a named namespace's file, which tells it from
// another made later under the same name.
func nsInode(ns string) (uint64, error) {
	st, err := os.Stat("/run/netns/" + ns)
	if err != nil {
		return 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("namespace %s: no inode", ns)
	}
	return sys.Ino, nil
}

// namespacesWithPrefix lists the named namespaces whose names begin with
// prefix.
func namespacesWithPrefix(prefix string) ([]string, error) {
	ents, err := os.ReadDir("/run/netns")
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// run runs a command and returns its output in the error when it fails.
func run(name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func runAll(steps [][]string) error {
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}
