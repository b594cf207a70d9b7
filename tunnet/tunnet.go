// Package tunnet is the kernel-path emulator. It puts hosts in network
// namespaces, each with one TUN interface per plane, and carries their
// packets through netem's pipeline to the destination host's TUN. On the
// way the packets meet the planes, ECMP by 5-tuple inside a plane, queues
// with ECN marking, rate, delay, loss and faults. Unmodified programs in
// those namespaces, such as mroce, TCP, QUIC or another implementation, see
// real loss, queueing, CE marks and plane failures on real kernel sockets.
//
// Host i's address on plane p is netem's address of fabric host i+1, in
// 10.p.x.y/16 on the plane's TUN, named mr<p>. Fabric host 0 would be a
// subnet's first address, so it is left unused.
//
// The package needs Linux, root and iproute2's ip. Everything it creates is
// named mroce-<name>-h<i>, recorded in StateDir before it is made, and
// removed by Close with the record. Remove deletes what a process that died
// left behind, as its record lists, and nothing else.
package tunnet

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mroce/mroce/netem"
)

// Config describes an emulated network of hosts in namespaces.
type Config struct {
	// Name tags everything created, as in namespaces mroce-<Name>-h<i>. It
	// holds letters, digits and '-', at most 20 characters.
	Name string
	// Hosts is 1 .. 254 and Planes is 1 .. 8.
	Hosts, Planes int
	// Fabric is netem's configuration of links, queues, impairments, faults
	// and topology. Up sets its Hosts, Planes and MaxDatagram.
	Fabric netem.Config
	// MTU is the MTU of every TUN interface. It defaults to 9,000.
	MTU int
}

func (c *Config) check() error {
	if c.MTU == 0 {
		c.MTU = 9000
	}
	var errs []error
	if c.Name == "" || len(c.Name) > 20 || strings.Trim(c.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
		errs = append(errs, fmt.Errorf("tunnet: name %q: want 1 to 20 letters, digits or '-'", c.Name))
	}
	if c.Hosts < 1 || c.Hosts > 254 {
		errs = append(errs, fmt.Errorf("tunnet: %d hosts: want 1 .. 254", c.Hosts))
	}
	if c.Planes < 1 || c.Planes > 8 {
		errs = append(errs, fmt.Errorf("tunnet: %d planes: want 1 .. 8", c.Planes))
	}
	if c.MTU < 576 || c.MTU > 65535 {
		errs = append(errs, fmt.Errorf("tunnet: MTU %d: want 576 .. 65,535", c.MTU))
	}
	return errors.Join(errs...)
}

// prefix is the start of every namespace name a network called name makes.
func prefix(name string) string { return "mroce-" + name + "-" }

// isHostOf says whether ns is named as a host's namespace of the network
// called name, mroce-NAME-hN. Network a's hosts are not network a-b's.
func isHostOf(name, ns string) bool {
	h, ok := strings.CutPrefix(ns, prefix(name)+"h")
	return ok && h != "" && strings.Trim(h, "0123456789") == ""
}

// namespace is host h's namespace.
func namespace(name string, h int) string { return fmt.Sprintf("%sh%d", prefix(name), h) }

// Addr is host h's address on plane p.
func Addr(h, p int) netip.Addr { return netem.Addr(p, h+1) }

// tunName is plane p's TUN interface in every host.
func tunName(p int) string { return fmt.Sprintf("mr%d", p) }
