// Package xfertest connects two devices of the verbs API and moves checked
// data between them, for the tests of the emulators and the applications.
//
// Each WRITE carries an immediate so that the target gets a completion of
// its own. A one-sided WRITE tells the target nothing, and the check of the
// bytes must come after they were placed, as in any RDMA program.
package xfertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/app/host"
	"github.com/mroce/mroce/endpoint"
)

// Pair is a connection from one device to another, with a source region of
// Size seeded bytes on the first and a target region of Size bytes on the
// second.
type Pair struct {
	QP       *endpoint.QP
	CQ       *endpoint.CQ // the connection's send completions
	Src, Dst *endpoint.MR
	Size     int
	target   *endpoint.QP // the accepted side, which takes each WRITE_IMM's receive
	targetCQ *endpoint.CQ
}

// Connect makes a listener on b, connects a to it at remote and registers
// the regions. remote is b's address as a reaches it, which an emulator
// between them may translate.
func Connect(ctx context.Context, a, b *endpoint.Device, remote endpoint.Remote, size int, seed byte) (*Pair, error) {
	apd, err := a.AllocPD()
	if err != nil {
		return nil, err
	}
	bpd, err := b.AllocPD()
	if err != nil {
		return nil, err
	}
	p := &Pair{CQ: a.CreateCQ(64), Size: size, targetCQ: b.CreateCQ(64)}
	lis, err := bpd.Listen(p.targetCQ, p.targetCQ, endpoint.QPOptions{})
	if err != nil {
		return nil, err
	}
	if p.QP, err = apd.Connect(ctx, remote, p.CQ, p.CQ, endpoint.QPOptions{}); err != nil {
		return nil, err
	}
	if p.target, err = lis.Accept(ctx); err != nil {
		return nil, err
	}
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{seed}).Read(data)
	if p.Src, err = apd.RegisterMR(data, endpoint.LocalWrite); err != nil {
		return nil, err
	}
	if p.Dst, err = p.target.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite); err != nil {
		return nil, err
	}
	return p, nil
}

// Post posts a WRITE_IMM of the whole source region to the target region,
// and the target's receive for it.
func (p *Pair) Post(id uint64) error {
	if err := p.target.PostRecv(id, 0); err != nil {
		return err
	}
	return p.QP.Post(endpoint.SendWR{ID: id, Op: endpoint.OpWriteImm, SGL: []endpoint.SGE{p.Src.SGE(0, uint32(p.Size))},
		RKey: p.Dst.RKey(), Imm: uint32(id)})
}

// Write WRITEs the whole region once, waits for the completion and checks
// the bytes. It returns how long the WRITE took.
func (p *Pair) Write(ctx context.Context) (time.Duration, error) {
	began := time.Now()
	if err := p.Post(1); err != nil {
		return 0, err
	}
	wc := make([]endpoint.Completion, 1)
	k, err := p.CQ.Wait(ctx, wc)
	took := time.Since(began)
	switch {
	case err != nil:
		return took, err
	case k != 1 || wc[0].Status != endpoint.StatusOK:
		return took, fmt.Errorf("xfertest: completion %+v", wc[0])
	}
	if _, err := p.targetCQ.Wait(ctx, wc); err != nil {
		return took, fmt.Errorf("xfertest: the target's completion: %w", err)
	}
	if wc[0].Status != endpoint.StatusOK || !wc[0].HasImm {
		return took, fmt.Errorf("xfertest: the target's completion %+v", wc[0])
	}
	if !bytes.Equal(p.Dst.Bytes(), p.Src.Bytes()) {
		return took, errors.New("xfertest: the data arrived wrong")
	}
	return took, nil
}

// Gbps is size bytes over d in Gb/s.
func Gbps(size int, d time.Duration) float64 { return float64(size) * 8 / d.Seconds() / 1e9 }

// End is one side of a connection as the application protocols use it,
// with its protection domain and completion queues.
type End struct {
	QP         *endpoint.QP
	PD         *endpoint.PD
	Send, Recv *endpoint.CQ
}

// Loopback opens two hosts with 4 paths on real UDP sockets at the
// loopback addresses client and server, connects the first to the second
// and returns both ends. The hosts close when the test ends.
func Loopback(tb testing.TB, client, server string) (End, End) {
	tb.Helper()
	open := func(addr string) *host.Host {
		h, err := host.Open([]netip.Addr{netip.MustParseAddr(addr)}, host.Options{Paths: 4, SourcePorts: 4, NoProgress: 10 * time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { h.Close() })
		return h
	}
	a, b := open(client), open(server)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adev, bdev := a.Device(), b.Device()
	var c, s End
	c.PD, _ = adev.AllocPD()
	s.PD, _ = bdev.AllocPD()
	c.Send, c.Recv = adev.CreateCQ(256), adev.CreateCQ(256)
	s.Send, s.Recv = bdev.CreateCQ(256), bdev.CreateCQ(256)
	lis, err := s.PD.Listen(s.Send, s.Recv, endpoint.QPOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	if c.QP, err = c.PD.Connect(ctx, b.Remote(), c.Send, c.Recv, endpoint.QPOptions{}); err != nil {
		tb.Fatal(err)
	}
	if s.QP, err = lis.Accept(ctx); err != nil {
		tb.Fatal(err)
	}
	return c, s
}
