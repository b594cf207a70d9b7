package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
	"github.com/mroce/mroce/relay"
	"github.com/mroce/mroce/tunnet"
)

// Emulators the runner can put between the endpoints.
const (
	// Relay is the UDP relay of package relay. It needs no root and runs
	// on any OS. The endpoints run as ordinary processes on loopback
	// addresses.
	Relay = "relay"
	// TUN is the kernel-path emulator of package tunnet. It needs Linux
	// and root. Each endpoint runs in its own network namespace, on real
	// kernel sockets, behind one TUN interface per plane.
	TUN = "tun"
)

// emulator is a running emulated network of the runner. It gives host h's
// addresses and commands, and the fabric between the hosts. In both
// emulators, host h is the fabric's host h+1.
type emulator interface {
	Do(func(*netem.Fabric))
	Close() error
	// local is the address host h binds on plane p, and reach the one its
	// peers send to.
	local(h, p int) netip.Addr
	reach(h, p int) netip.Addr
	port() uint16
	command(ctx context.Context, h int, argv []string) *exec.Cmd
	// payload is the mroce packet a datagram of the fabric carries as its
	// UDP payload. ok is false for anything else.
	payload(d *link.Datagram) (b []byte, ok bool)
}

// startEmulator starts an emulator of kind with hosts and planes over a
// fabric of fc.
func startEmulator(kind string, hosts, planes int, fc netem.Config) (emulator, error) {
	switch kind {
	case Relay, "":
		port := uint16(20000 + rand.IntN(30000))
		var ports []uint16
		for i := 0; i <= 32; i++ {
			ports = append(ports, port+uint16(i))
		}
		r, err := relay.Start(relay.Config{Hosts: hosts, Planes: planes, Ports: ports, Fabric: fc})
		if err != nil {
			return nil, err
		}
		return &relayEmulator{r, port}, nil
	case TUN:
		n, err := tunnet.Up(tunnet.Config{Name: fmt.Sprintf("conf%d", rand.IntN(1e6)), Hosts: hosts, Planes: planes, Fabric: fc})
		if err != nil {
			return nil, err
		}
		return &tunEmulator{n}, nil
	}
	return nil, fmt.Errorf("conformance: no emulator %q (want %s or %s)", kind, Relay, TUN)
}

type relayEmulator struct {
	*relay.Relay
	basePort uint16
}

func (e *relayEmulator) local(h, p int) netip.Addr { return relay.RealAddr(h, p) }
func (e *relayEmulator) reach(h, p int) netip.Addr { return relay.VirtualAddr(h, p) }
func (e *relayEmulator) port() uint16              { return e.basePort }
func (e *relayEmulator) command(ctx context.Context, _ int, argv []string) *exec.Cmd {
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}
func (e *relayEmulator) payload(d *link.Datagram) ([]byte, bool) { return d.Data, true }

type tunEmulator struct{ *tunnet.Net }

func (e *tunEmulator) local(h, p int) netip.Addr { return tunnet.Addr(h, p) }
func (e *tunEmulator) reach(h, p int) netip.Addr { return tunnet.Addr(h, p) }

// port is the default, since every host has its own namespace.
func (e *tunEmulator) port() uint16 { return proto.DefaultPort }
func (e *tunEmulator) command(ctx context.Context, h int, argv []string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", e.Namespace(h)}, argv...)...)
}

// payload reads the UDP payload, since the TUN emulator's datagrams are
// whole IP packets.
func (e *tunEmulator) payload(d *link.Datagram) ([]byte, bool) { return tunnet.UDPPayload(d.Data) }
