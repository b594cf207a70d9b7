package contract

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/mroce/mroce/app/host"
	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/conformance"
	"github.com/mroce/mroce/endpoint"
)

// ProbeTarget opens this mroce on addr as the responder that the
// packet-level prober checks in conformance self. It listens and grants
// remote write and remote atomic access on a 1 MiB region, which is what a
// probe target must offer.
// With a pre-shared key in cred it runs in the authenticated mode, and the
// target it returns gives the prober the same key.
func ProbeTarget(addr netip.Addr, cred *auth.Credentials) (*host.Host, conformance.Target, error) {
	h, err := host.Open([]netip.Addr{addr}, host.Options{Paths: 8, SourcePorts: 2, NoProgress: 10 * time.Second, Auth: cred})
	if err != nil {
		return nil, conformance.Target{}, err
	}
	dev := h.Device()
	pd, err := dev.AllocPD()
	if err != nil {
		h.Close()
		return nil, conformance.Target{}, err
	}
	cq := dev.CreateCQ(64)
	lis, err := pd.Listen(cq, cq, endpoint.QPOptions{})
	if err != nil {
		h.Close()
		return nil, conformance.Target{}, err
	}
	go acceptAll(lis)
	// The prober reaches the region on each of the connections it opens, so
	// the region is the domain's and not one connection's.
	mr, err := pd.RegisterMR(make([]byte, 1<<20), endpoint.LocalWrite|endpoint.RemoteWrite|endpoint.RemoteAtomic)
	if err != nil {
		h.Close()
		return nil, conformance.Target{}, err
	}
	return h, conformance.Target{Addr: netip.AddrPortFrom(addr, h.Remote().Port), RKey: mr.RKey(), Len: 1 << 20, Streams: host.Streams, Auth: cred}, nil
}

// acceptAll accepts every connection that comes to lis until the listener
// or its host closes. A responder whose connections only take one-sided
// WRITEs into a region needs nothing of them but that: a listener closes
// a connection that waits for Accept past its deadline. Each connection
// stays until its peer ends it or the host closes.
func acceptAll(lis *endpoint.Listener) {
	for {
		if _, err := lis.Accept(context.Background()); err != nil {
			return
		}
	}
}

// RequesterStarter starts argv as a requester of the endpoint contract for
// the sender probe, which answers it with crafted ACKs and NACKs. The
// requester moves 64 MiB, more than any sender case waits for, binds
// 127.0.0.1 and the probe's port there, and logs under dir. The function
// it returns kills the requester.
func RequesterStarter(argv []string, dir string) func(peer netip.AddrPort) (func(), error) {
	n := 0
	return func(peer netip.AddrPort) (func(), error) {
		n++
		logdir := filepath.Join(dir, fmt.Sprintf("sender-%d", n))
		if err := os.MkdirAll(logdir, 0o755); err != nil {
			return nil, err
		}
		out, err := os.Create(filepath.Join(logdir, "output.log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		// START is empty so that the requester begins at once, whatever
		// this process's environment holds.
		cmd.Env = append(os.Environ(), "ROLE=requester", "TESTCASE=transfer", "PLANES=127.0.0.1", "PEER="+peer.Addr().String(),
			fmt.Sprintf("PORT=%d", peer.Port()), fmt.Sprintf("SIZE=%d", 64<<20), "REQUESTERS=1", "LOGDIR="+logdir, "START=")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			out.Close()
			return nil, err
		}
		return func() {
			cmd.Process.Kill()
			cmd.Wait()
			out.Close()
		}, nil
	}
}
