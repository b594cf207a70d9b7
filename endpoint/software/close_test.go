package software

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
)

// Closing works through the engine. A closed listener's endpoint refuses
// CONNECTs. A closed connection's peer sees it closed and its posted
// receive flushed. A closed device's queues and shared receive queues
// refuse their callers.
func TestClosingReachesTheEngine(t *testing.T) {
	l := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp, sqp := l.connect(t, ctx)
	inbox, _ := l.spd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err := sqp.PostRecv(9, 0, inbox.SGE(0, 64)); err != nil {
		t.Fatal(err)
	}
	if err := l.lis.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.cpd.Connect(ctx, l.n.Remote(1), l.ccq, l.ccq, endpoint.QPOptions{}); !errors.Is(err, endpoint.ErrRefused) {
		t.Fatalf("connecting to a closed listener: %v, want ErrRefused", err)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
	out := make([]endpoint.Completion, 1)
	if k, err := l.scq.Wait(ctx, out); err != nil || k != 1 || out[0].ID != 9 || out[0].Status != endpoint.StatusFlushed {
		t.Fatalf("the peer's receive: %v %+v; want it flushed", err, out[:k])
	}
	if s, err := sqp.State(); s != endpoint.Closed || !errors.Is(err, endpoint.ErrClosed) {
		t.Fatalf("the peer's connection is %v (%v)", s, err)
	}
	srq, err := l.spd.CreateSRQ()
	if err != nil {
		t.Fatal(err)
	}
	dev := l.n.Device(1)
	cq := dev.CreateCQ(4)
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cq.Wait(ctx, out); !errors.Is(err, endpoint.ErrClosed) {
		t.Fatalf("waiting on a closed device's queue: %v", err)
	}
	if err := srq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srq.PostRecv(1, inbox.SGE(0, 8)); !errors.Is(err, endpoint.ErrClosed) {
		t.Fatalf("a receive on a closed shared queue: %v", err)
	}
	if _, err := l.spd.Listen(l.scq, l.scq, endpoint.QPOptions{SRQ: srq}); !errors.Is(err, endpoint.ErrClosed) {
		t.Fatalf("listening with a closed shared queue: %v", err)
	}
}

// A closed UDP host's engine no longer runs. What needs it fails with
// ErrClosed at once, and closing what was made on it neither hangs nor
// fails.
func TestClosedUDPHostRefusesWithoutHanging(t *testing.T) {
	var h *UDPHost
	for try := 0; try < 20 && h == nil; try++ {
		h, _ = OpenUDP(UDPOptions{Planes: []netip.Addr{netip.MustParseAddr("127.0.0.68")}, Port: uint16(20000 + rand.IntN(40000)), Paths: 1})
	}
	if h == nil {
		t.Fatal("no free port")
	}
	dev := h.Device()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq := dev.CreateCQ(4)
	if _, err := pd.Listen(cq, cq, endpoint.QPOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pd.CreateSRQ(); !errors.Is(err, endpoint.ErrClosed) {
		t.Fatalf("a shared queue on a closed host: %v", err)
	}
	if _, err := cq.Wait(ctx, make([]endpoint.Completion, 1)); !errors.Is(err, endpoint.ErrClosed) {
		t.Fatalf("waiting on a closed host: %v", err)
	}
	if err := dev.Close(); err != nil {
		t.Fatalf("closing a closed host's device: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("closing the host again: %v", err)
	}
}
