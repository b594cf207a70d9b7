package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/mroce/mroce/app/filexfer"
	"github.com/mroce/mroce/conformance"
	"github.com/mroce/mroce/conformance/bugs"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/endpoint/software"
)

// contractEndpoint is this mroce as an endpoint of the conformance
// runner's contract (conformance/runner.go): it reads its role and case
// from the environment, moves or checks the data, writes its report, and
// returns its exit status.
func contractEndpoint(ctx context.Context) (int, error) {
	role, testcase, logdir := os.Getenv("ROLE"), os.Getenv("TESTCASE"), os.Getenv("LOGDIR")
	if !slices.ContainsFunc(conformance.RunnerCases, func(c conformance.RunnerCase) bool { return c.Name == testcase }) {
		return conformance.Unsupported, nil
	}
	planes, err := conformance.ParseAddrs(os.Getenv("PLANES"))
	if err != nil || len(planes) == 0 {
		return 1, fmt.Errorf("PLANES %q: %v", os.Getenv("PLANES"), err)
	}
	port, err := strconv.ParseUint(os.Getenv("PORT"), 10, 16)
	if err != nil || port == 0 {
		return 1, fmt.Errorf("PORT %q", os.Getenv("PORT"))
	}
	size, err := strconv.ParseInt(os.Getenv("SIZE"), 10, 64)
	if err != nil || size < 0 {
		return 1, fmt.Errorf("SIZE %q", os.Getenv("SIZE"))
	}
	o := transferOptions{port: uint16(port), paths: 8, sourcePorts: 16, chunk: 1 << 20, noProgress: 30 * time.Second}
	o.fill()
	// MROCE_BREAK builds deliberate bugs into one side for the conformance
	// suite's self-test (conformance/bugs). It is not a user's option.
	if o.broken, err = bugs.ForRole(os.Getenv("MROCE_BREAK"), role); err != nil {
		return 1, fmt.Errorf("MROCE_BREAK %w", err)
	}
	rep := conformance.EndpointReport{Role: role}
	requesters := 1
	if v := os.Getenv("REQUESTERS"); v != "" {
		if requesters, err = strconv.Atoi(v); err != nil || requesters < 1 || requesters > 1000 {
			return 1, fmt.Errorf("REQUESTERS %q: want 1 to 1000", v)
		}
	}
	op := testcase == "write" || testcase == "write-imm" || testcase == "read"
	switch role {
	case "responder":
		if op {
			err = contractOpResponder(ctx, planes, o, testcase, size, &rep)
		} else {
			err = contractResponder(ctx, planes, o, requesters, &rep)
		}
	case "requester":
		peer, perr := conformance.ParseAddrs(os.Getenv("PEER"))
		if perr != nil || len(peer) != len(planes) {
			return 1, fmt.Errorf("PEER %q: one address per plane of PLANES", os.Getenv("PEER"))
		}
		if op {
			err = contractOpRequester(ctx, planes, peer, size, testcase, o, &rep)
		} else {
			err = contractRequester(ctx, planes, peer, size, testcase, o, &rep)
		}
	default:
		return 1, fmt.Errorf("ROLE %q: want requester or responder", role)
	}
	if err != nil {
		rep.Error = err.Error()
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	if werr := os.WriteFile(filepath.Join(logdir, "report.json"), b, 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

func contractResponder(ctx context.Context, planes []netip.Addr, o transferOptions, requesters int, rep *conformance.EndpointReport) error {
	host, _, pd, err := contractHost(planes, o)
	if err != nil {
		return err
	}
	defer host.Close()
	// Each requester's transfer on its own connection, with its own
	// queues, all at once.
	lis, err := pd.Listen(nil, nil, endpoint.QPOptions{OwnCQs: 64})
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	type result struct {
		res filexfer.Result
		err error
	}
	results := make(chan result, requesters)
	for i := 0; i < requesters; i++ {
		qp, err := lis.Accept(actx)
		if err != nil {
			return err
		}
		conn := filexfer.Conn{PD: pd, QP: qp, Send: qp.SendCQ(), Recv: qp.RecvCQ()}
		go func() {
			res, err := filexfer.ReceiveFile(actx, conn, 2*filexfer.DefaultDepth, 16<<20, func(filexfer.Header) (io.Writer, error) { return io.Discard, nil }, nil)
			results <- result{res, err}
		}()
	}
	var first error
	for i := 0; i < requesters; i++ {
		r := <-results
		switch {
		case r.err != nil:
			first = cmp.Or(first, r.err)
		case rep.SHA256 != "" && r.res.SHA256 != rep.SHA256:
			first = cmp.Or(first, fmt.Errorf("two transfers of the same data arrived with SHA-256 %s and %s", rep.SHA256, r.res.SHA256))
		default:
			rep.Bytes += r.res.Header.Size
			rep.SHA256 = r.res.SHA256
			rep.Completions++
		}
	}
	if first == nil {
		// Wait for the requesters to close, so that late duplicates find a
		// connection (and are not counted as anything).
		time.Sleep(100 * time.Millisecond)
	}
	return first
}

// waitStart waits, connected, for the time in START (Unix nanoseconds),
// when the runner asks many requesters to begin together.
func waitStart(ctx context.Context) error {
	v := os.Getenv("START")
	if v == "" {
		return nil
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("START %q: want Unix nanoseconds", v)
	}
	select {
	case <-time.After(time.Until(time.Unix(0, ns))):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// contractDial connects to the responder at peer (one address per plane),
// giving the handshake 10 s.
func contractDial(ctx context.Context, pd *endpoint.PD, peer []netip.Addr, port uint16, send, recv *endpoint.CQ) (*endpoint.QP, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pd.Connect(cctx, endpoint.Remote{Planes: peer, Port: port}, send, recv, endpoint.QPOptions{})
}

func contractRequester(ctx context.Context, planes, peer []netip.Addr, size int64, name string, o transferOptions, rep *conformance.EndpointReport) error {
	host, dev, pd, err := contractHost(planes, o)
	if err != nil {
		return err
	}
	defer host.Close()
	conn := filexfer.Conn{PD: pd, Send: dev.CreateCQ(64), Recv: dev.CreateCQ(64)}
	conn.QP, err = contractDial(ctx, pd, peer, o.port, conn.Send, conn.Recv)
	if err != nil {
		return err
	}
	if err := waitStart(ctx); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	began := time.Now()
	res, err := filexfer.SendFile(tctx, conn, conformance.Data(size), name, size, o.chunk, filexfer.DefaultDepth, nil)
	rep.Bytes, rep.SHA256, rep.ElapsedNS = size, res.SHA256, time.Since(began).Nanoseconds()
	reportPaths(conn.QP, rep)
	conn.QP.Close()
	return err
}

// reportPaths adds the requester's path counters to its report.
func reportPaths(qp *endpoint.QP, rep *conformance.EndpointReport) {
	for _, p := range qp.Telemetry() {
		rep.Packets += p.PacketsSent
		rep.Retransmits += p.Retransmits
		rep.CEMarks += p.CEMarks
		rep.Timeouts += p.Timeouts
		rep.Lost += p.Lost
		rep.TailProbes += p.TailProbes
	}
}

// contractHost opens this endpoint on its planes: the host (to close)
// and a protection domain on it.
func contractHost(planes []netip.Addr, o transferOptions) (*software.UDPHost, *endpoint.Device, *endpoint.PD, error) {
	host, err := openHost(planes, o.port, o, software.UDPOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	dev := host.Device()
	pd, err := dev.AllocPD()
	if err != nil {
		host.Close()
		return nil, nil, nil, err
	}
	return host, dev, pd, nil
}
