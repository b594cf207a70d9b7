package contract

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/mroce/mroce/app/filexfer"
	"github.com/mroce/mroce/conformance"
	"github.com/mroce/mroce/endpoint"
)

// transferResponder receives one filexfer transfer from each requester,
// all at once, and checks that they carried the same data.
func transferResponder(ctx context.Context, cfg Config, rep *conformance.EndpointReport) error {
	h, _, pd, err := openHost(cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	// Each connection gets completion queues of its own, so that one
	// requester's completions never wait behind another's. Every requester
	// comes at once, so the accept queue holds them all.
	lis, err := pd.Listen(nil, nil, endpoint.QPOptions{OwnCQs: 64, Backlog: max(cfg.Requesters, endpoint.DefaultBacklog)})
	if err != nil {
		return err
	}
	if err := ready(cfg); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	type result struct {
		res filexfer.Result
		err error
	}
	results := make(chan result, cfg.Requesters)
	discard := func(filexfer.Header) (io.Writer, error) { return io.Discard, nil }
	for i := 0; i < cfg.Requesters; i++ {
		qp, err := lis.Accept(actx)
		if err != nil {
			return err
		}
		conn := filexfer.Conn{PD: pd, QP: qp, Send: qp.SendCQ(), Recv: qp.RecvCQ()}
		go func() {
			res, err := filexfer.ReceiveFile(actx, conn, discard, filexfer.Options{Depth: 2 * filexfer.DefaultDepth, Chunk: 16 << 20})
			results <- result{res, err}
		}()
	}
	var first error
	for i := 0; i < cfg.Requesters; i++ {
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
		// The requesters close after the verdict. Staying a little longer
		// lets their late duplicates find the connection rather than an
		// unknown one.
		time.Sleep(100 * time.Millisecond)
	}
	return first
}

// transferRequester sends conformance.Data(Size) to the responder with
// filexfer.
func transferRequester(ctx context.Context, cfg Config, rep *conformance.EndpointReport) error {
	h, dev, _, err := openHost(cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	cctx, cancel := context.WithTimeout(ctx, dialWait)
	conn, err := filexfer.Dial(cctx, dev, endpoint.Remote{Planes: cfg.Peer, Port: cfg.Port})
	cancel()
	if err != nil {
		return err
	}
	if err := waitStart(ctx, cfg); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	began := time.Now()
	res, err := filexfer.SendFile(tctx, conn, conformance.Data(cfg.Size), cfg.Case, cfg.Size, filexfer.Options{Chunk: 1 << 20})
	rep.Bytes, rep.SHA256, rep.ElapsedNS = cfg.Size, res.SHA256, time.Since(began).Nanoseconds()
	reportPaths(conn.QP, rep)
	conn.QP.Close()
	return err
}
