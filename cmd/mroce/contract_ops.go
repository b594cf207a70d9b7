package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/mroce/mroce/conformance"
	"github.com/mroce/mroce/endpoint"
)

// The runner's operation cases (write, write-imm, read) between this mroce
// and itself, following the convention docs/conformance.md gives every
// implementation: on stream 1, the responder SENDs its region's key and
// length (16 bytes, big-endian); the requester moves the data in 1 MiB
// operations and then SENDs a done message; the responder reports when the
// done message completes (after everything before it on the stream).

// opChunk is the size of each WRITE, WRITE_IMM or READ.
const opChunk = 1 << 20

const (
	opStream = 1
	idAdvert = 1 << 40 // the responder's advertisement, and its receive
	idDone   = 2 << 40 // the requester's done message, and its receive
)

func opChunks(size int64) int { return int((size + opChunk - 1) / opChunk) }

func contractOpResponder(ctx context.Context, planes []netip.Addr, o transferOptions, testcase string, size int64, rep *conformance.EndpointReport) error {
	host, dev, pd, err := contractHost(planes, o)
	if err != nil {
		return err
	}
	defer host.Close()
	send, recv := dev.CreateCQ(64), dev.CreateCQ(opChunks(size)+8)
	lis, err := pd.Listen(send, recv, endpoint.QPOptions{})
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	qp, err := lis.Accept(actx)
	if err != nil {
		return err
	}
	defer qp.Close()
	buf := make([]byte, size)
	access := endpoint.LocalWrite | endpoint.RemoteWrite
	if testcase == "read" {
		if _, err := io.ReadFull(conformance.Data(size), buf); err != nil {
			return err
		}
		access = endpoint.LocalWrite | endpoint.RemoteRead
	}
	region, err := pd.RegisterMR(buf, access)
	if err != nil {
		return err
	}
	// Receives first: one per WRITE_IMM (a notice, no data), and the done
	// message.
	if testcase == "write-imm" {
		for i := 0; i < opChunks(size); i++ {
			if err := qp.PostRecv(uint64(i), opStream); err != nil {
				return err
			}
		}
	}
	done, err := pd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err != nil {
		return err
	}
	if err := qp.PostRecv(idDone, opStream, done.SGE(0, 64)); err != nil {
		return err
	}
	advert, err := pd.RegisterMR(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, region.RKey()), uint64(size)), endpoint.LocalWrite)
	if err != nil {
		return err
	}
	if err := qp.WaitEstablished(actx); err != nil {
		return err
	}
	if err := qp.PostSend(idAdvert, opStream, advert.SGE(0, 16)); err != nil {
		return err
	}
	wc := make([]endpoint.Completion, 64)
	imms := 0
	for finished := false; !finished; {
		k, err := recv.Wait(actx, wc)
		if err != nil {
			return err
		}
		for _, c := range wc[:k] {
			if c.Status != endpoint.StatusOK {
				return fmt.Errorf("receive %d: %v: %v", c.ID, c.Status, c.Err)
			}
			switch {
			case c.ID == idDone:
				finished = true
			case !c.HasImm:
				return fmt.Errorf("receive %d completed without an immediate", c.ID)
			case c.Imm != uint32(imms):
				return fmt.Errorf("WRITE_IMM %d carried immediate %d: out of order or repeated", imms, c.Imm)
			default:
				imms++
			}
		}
	}
	sum := sha256.Sum256(region.Bytes())
	rep.Bytes, rep.SHA256, rep.Completions = size, hex.EncodeToString(sum[:]), max(1, imms)
	// Let the requester see the done message acknowledged and close first.
	time.Sleep(100 * time.Millisecond)
	return nil
}

func contractOpRequester(ctx context.Context, planes, peer []netip.Addr, size int64, testcase string, o transferOptions, rep *conformance.EndpointReport) error {
	host, dev, pd, err := contractHost(planes, o)
	if err != nil {
		return err
	}
	defer host.Close()
	n := opChunks(size)
	send, recv := dev.CreateCQ(n+8), dev.CreateCQ(8)
	qp, err := contractDial(ctx, pd, peer, o.port, send, recv)
	if err != nil {
		return err
	}
	defer qp.Close()
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The advertisement (a SEND that finds no receive yet is refused RNR
	// and comes again).
	advert, err := pd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err != nil {
		return err
	}
	if err := qp.PostRecv(idAdvert, opStream, advert.SGE(0, 64)); err != nil {
		return err
	}
	wc := make([]endpoint.Completion, 64)
	if _, err := recv.Wait(tctx, wc[:1]); err != nil {
		return err
	}
	if c := wc[0]; c.Status != endpoint.StatusOK || c.Bytes != 16 {
		return fmt.Errorf("the responder's advertisement: %v (%d bytes), %v", c.Status, c.Bytes, c.Err)
	}
	rkey, rlen := binary.BigEndian.Uint64(advert.Bytes()), binary.BigEndian.Uint64(advert.Bytes()[8:])
	if rlen < uint64(size) {
		return fmt.Errorf("the responder's region holds %d bytes, the case moves %d", rlen, size)
	}
	buf := make([]byte, size)
	if testcase != "read" {
		if _, err := io.ReadFull(conformance.Data(size), buf); err != nil {
			return err
		}
	}
	local, err := pd.RegisterMR(buf, endpoint.LocalWrite)
	if err != nil {
		return err
	}
	began := time.Now()
	for i := 0; i < n; i++ {
		off := uint64(i) * opChunk
		wr := endpoint.SendWR{ID: uint64(i), Stream: opStream, SGL: []endpoint.SGE{local.SGE(off, uint32(min(opChunk, uint64(size)-off)))},
			RKey: rkey, RemoteOffset: off}
		switch testcase {
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
	for got := 0; got < n; {
		k, err := send.Wait(tctx, wc)
		if err != nil {
			return err
		}
		for _, c := range wc[:k] {
			if c.Status != endpoint.StatusOK {
				return fmt.Errorf("%s %d: %v: %v", testcase, c.ID, c.Status, c.Err)
			}
			got++
		}
	}
	sum := sha256.Sum256(local.Bytes())
	rep.Bytes, rep.SHA256, rep.ElapsedNS = size, hex.EncodeToString(sum[:]), time.Since(began).Nanoseconds()
	doneMsg, err := pd.RegisterMR([]byte("done"), endpoint.LocalWrite)
	if err != nil {
		return err
	}
	if err := qp.PostSend(idDone, opStream, doneMsg.SGE(0, 4)); err != nil {
		return err
	}
	if _, err := send.Wait(tctx, wc[:1]); err != nil {
		return err
	}
	if c := wc[0]; c.Status != endpoint.StatusOK || c.ID != idDone {
		return errors.New("the done message: " + c.Status.String())
	}
	reportPaths(qp, rep)
	return nil
}
