package contract

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/mroce/mroce/conformance"
	"github.com/mroce/mroce/endpoint"
)

// The operation cases write, write-imm and read follow the convention
// docs/conformance.md gives every implementation, all on stream 1. The
// responder SENDs its region's key and length in 16 bytes, big-endian. The
// requester moves the data in operations of opChunk and then SENDs a done
// message. The responder reports when the done message completes, which on
// one stream is after everything before it.

// opChunk is the size of each WRITE, WRITE_IMM or READ.
const opChunk = 1 << 20

const (
	opStream = 1
	idAdvert = 1 << 40 // the responder's advertisement and its receive
	idDone   = 2 << 40 // the requester's done message and its receive
)

func opChunks(size int64) int { return int((size + opChunk - 1) / opChunk) }

// opResponder serves one requester's operations on a region of Size bytes
// and hashes the region when the done message arrives.
func opResponder(ctx context.Context, cfg Config, rep *conformance.EndpointReport) error {
	h, dev, pd, err := openHost(cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	send, recv := dev.CreateCQ(64), dev.CreateCQ(opChunks(cfg.Size)+8)
	lis, err := pd.Listen(send, recv, endpoint.QPOptions{})
	if err != nil {
		return err
	}
	if err := ready(cfg); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	qp, err := lis.Accept(actx)
	if err != nil {
		return err
	}
	defer qp.Close()
	region, err := responderRegion(qp, cfg)
	if err != nil {
		return err
	}
	if err := postResponderRecvs(pd, qp, cfg); err != nil {
		return err
	}
	if err := advertise(actx, pd, qp, region, cfg.Size); err != nil {
		return err
	}
	imms, err := awaitDone(actx, recv)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(region.Bytes())
	rep.Bytes, rep.SHA256, rep.Completions = cfg.Size, hex.EncodeToString(sum[:]), max(1, imms)
	// The requester closes once it sees the done message acknowledged.
	// Closing first would fail its last completion.
	time.Sleep(100 * time.Millisecond)
	return nil
}

// responderRegion registers the region the requester's operations reach,
// for its connection alone (docs/spec.md section 5.1). For read it holds
// conformance.Data(Size), which the requester checks.
func responderRegion(qp *endpoint.QP, cfg Config) (*endpoint.MR, error) {
	buf := make([]byte, cfg.Size)
	access := endpoint.LocalWrite | endpoint.RemoteWrite
	if cfg.Case == "read" {
		if _, err := io.ReadFull(conformance.Data(cfg.Size), buf); err != nil {
			return nil, err
		}
		access = endpoint.LocalWrite | endpoint.RemoteRead
	}
	return qp.RegisterMR(buf, access)
}

// postResponderRecvs posts a receive for each WRITE_IMM, which carries no
// data but consumes one, and one for the done message. They go before the
// advertisement, so that nothing the requester sends after reading it
// finds no receive.
func postResponderRecvs(pd *endpoint.PD, qp *endpoint.QP, cfg Config) error {
	if cfg.Case == "write-imm" {
		for i := 0; i < opChunks(cfg.Size); i++ {
			if err := qp.PostRecv(uint64(i), opStream); err != nil {
				return err
			}
		}
	}
	done, err := pd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err != nil {
		return err
	}
	return qp.PostRecv(idDone, opStream, done.SGE(0, 64))
}

// advertise SENDs the region's key and length once the connection is
// established.
func advertise(ctx context.Context, pd *endpoint.PD, qp *endpoint.QP, region *endpoint.MR, size int64) error {
	msg := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, region.RKey()), uint64(size))
	advert, err := pd.RegisterMR(msg, endpoint.LocalWrite)
	if err != nil {
		return err
	}
	if err := qp.WaitEstablished(ctx); err != nil {
		return err
	}
	return qp.PostSend(idAdvert, opStream, advert.SGE(0, 16))
}

// awaitDone waits for the done message and counts the WRITE_IMMs before
// it. Their immediates must come in order and once each, since one stream
// completes its messages in the order they were sent.
func awaitDone(ctx context.Context, recv *endpoint.CQ) (imms int, err error) {
	wc := make([]endpoint.Completion, 64)
	for {
		k, err := recv.Wait(ctx, wc)
		if err != nil {
			return imms, err
		}
		for _, c := range wc[:k] {
			switch {
			case c.Status != endpoint.StatusOK:
				return imms, fmt.Errorf("receive %d: %v: %v", c.ID, c.Status, c.Err)
			case c.ID == idDone:
				return imms, nil
			case !c.HasImm:
				return imms, fmt.Errorf("receive %d completed without an immediate", c.ID)
			case c.Imm != uint32(imms):
				return imms, fmt.Errorf("WRITE_IMM %d carried immediate %d: out of order or repeated", imms, c.Imm)
			}
			imms++
		}
	}
}

// opRequester moves Size bytes with the case's operations, hashes what it
// sent or read, and SENDs the done message.
func opRequester(ctx context.Context, cfg Config, rep *conformance.EndpointReport) error {
	h, dev, pd, err := openHost(cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	n := opChunks(cfg.Size)
	send, recv := dev.CreateCQ(n+8), dev.CreateCQ(8)
	qp, err := dial(ctx, cfg, pd, send, recv)
	if err != nil {
		return err
	}
	defer qp.Close()
	tctx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	rkey, err := readAdvert(tctx, pd, qp, recv, cfg.Size)
	if err != nil {
		return err
	}
	buf := make([]byte, cfg.Size)
	if cfg.Case != "read" {
		if _, err := io.ReadFull(conformance.Data(cfg.Size), buf); err != nil {
			return err
		}
	}
	local, err := pd.RegisterMR(buf, endpoint.LocalWrite)
	if err != nil {
		return err
	}
	began := time.Now()
	if err := runOps(tctx, qp, send, local, rkey, cfg); err != nil {
		return err
	}
	sum := sha256.Sum256(local.Bytes())
	rep.Bytes, rep.SHA256, rep.ElapsedNS = cfg.Size, hex.EncodeToString(sum[:]), time.Since(began).Nanoseconds()
	if err := sendDone(tctx, pd, qp, send); err != nil {
		return err
	}
	reportPaths(qp, rep)
	return nil
}

// readAdvert receives the responder's key and length and checks that the
// region holds size bytes. The responder may SEND before this receive is
// posted, and the transport then refuses it with RNR and resends.
func readAdvert(ctx context.Context, pd *endpoint.PD, qp *endpoint.QP, recv *endpoint.CQ, size int64) (rkey uint64, err error) {
	advert, err := pd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err != nil {
		return 0, err
	}
	if err := qp.PostRecv(idAdvert, opStream, advert.SGE(0, 64)); err != nil {
		return 0, err
	}
	wc := make([]endpoint.Completion, 1)
	if _, err := recv.Wait(ctx, wc); err != nil {
		return 0, err
	}
	if c := wc[0]; c.Status != endpoint.StatusOK || c.Bytes != 16 {
		return 0, fmt.Errorf("the responder's advertisement: %v (%d bytes), %v", c.Status, c.Bytes, c.Err)
	}
	rkey, rlen := binary.BigEndian.Uint64(advert.Bytes()), binary.BigEndian.Uint64(advert.Bytes()[8:])
	if rlen < uint64(size) {
		return 0, fmt.Errorf("the responder's region holds %d bytes, the case moves %d", rlen, size)
	}
	return rkey, nil
}

// runOps posts every operation at once and waits for all to complete.
// WRITE_IMM i carries immediate i, so the responder can check the order.
func runOps(ctx context.Context, qp *endpoint.QP, send *endpoint.CQ, local *endpoint.MR, rkey uint64, cfg Config) error {
	n := opChunks(cfg.Size)
	for i := 0; i < n; i++ {
		off := uint64(i) * opChunk
		wr := endpoint.SendWR{ID: uint64(i), Stream: opStream, RKey: rkey, RemoteOffset: off,
			SGL: []endpoint.SGE{local.SGE(off, uint32(min(opChunk, uint64(cfg.Size)-off)))}}
		switch cfg.Case {
		case "write":
			wr.Op = endpoint.OpWrite
		case "write-imm":
			wr.Op, wr.Imm = endpoint.OpWriteImm, uint32(i)
		case "read":
			wr.Op = endpoint.OpRead
		}
		if err := qp.Post(wr); err != nil {
			return err
		}
	}
	wc := make([]endpoint.Completion, 64)
	for got := 0; got < n; {
		k, err := send.Wait(ctx, wc)
		if err != nil {
			return err
		}
		for _, c := range wc[:k] {
			if c.Status != endpoint.StatusOK {
				return fmt.Errorf("%s %d: %v: %v", cfg.Case, c.ID, c.Status, c.Err)
			}
			got++
		}
	}
	return nil
}

// sendDone SENDs the done message and waits for its completion.
func sendDone(ctx context.Context, pd *endpoint.PD, qp *endpoint.QP, send *endpoint.CQ) error {
	msg, err := pd.RegisterMR([]byte("done"), endpoint.LocalWrite)
	if err != nil {
		return err
	}
	if err := qp.PostSend(idDone, opStream, msg.SGE(0, 4)); err != nil {
		return err
	}
	wc := make([]endpoint.Completion, 1)
	if _, err := send.Wait(ctx, wc); err != nil {
		return err
	}
	if c := wc[0]; c.Status != endpoint.StatusOK || c.ID != idDone {
		return errors.New("the done message: " + c.Status.String())
	}
	return nil
}
