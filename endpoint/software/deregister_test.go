package software

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/proto"
)

// A region deregistered in the middle of a WRITE into it has its key
// revoked at once. The WRITE's packets already in flight are refused with
// a BAD_KEY NACK and counted, and not one byte lands after the
// deregistration. The writer's work request completes with a remote
// access error, and the key stays dead for a new connection.
func TestDeregisterMidTransferRevokesTheKey(t *testing.T) {
	l := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp, sqp := l.connect(t, ctx)
	const size = 4 << 20
	src, _ := l.cpd.RegisterMR(bytes.Repeat([]byte{0xA5}, size), endpoint.LocalWrite)
	target, _ := l.spd.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite)
	key := target.RKey()
	if err := qp.PostWrite(1, 0, src.SGE(0, size), key, 0); err != nil {
		t.Fatal(err)
	}
	mem := target.Bytes()
	// Run until a quarter of the region is written and its end is not.
	if err := l.n.Backend(0).Progress(ctx, func() bool { return mem[size/4] != 0 }); err != nil {
		t.Fatal(err)
	}
	if mem[size-1] != 0 {
		t.Fatal("the WRITE was placed whole before the deregistration")
	}
	inFlight := 0
	for _, p := range qp.Telemetry() {
		inFlight += p.InFlight
	}
	if inFlight == 0 {
		t.Fatal("no packet in flight when the region is deregistered")
	}
	if err := target.Deregister(); err != nil {
		t.Fatal(err)
	}
	was := bytes.Clone(mem)
	out := make([]endpoint.Completion, 1)
	if k, err := l.ccq.Wait(ctx, out); err != nil || k != 1 || out[0].ID != 1 || out[0].Status != endpoint.StatusRemoteAccess || out[0].Err == nil {
		t.Fatalf("the writer's completion: %v %+v; want a remote access error", err, out[:k])
	}
	// Everything still in the network arrives, or is dropped, by now.
	if err := l.n.Backend(0).Progress(ctx, l.n.Quiet); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, was) {
		t.Fatal("bytes were placed in the region after it was deregistered")
	}
	refused := sqp.Handle().(*engine.Conn).ReceiverStats().Nacks[proto.NackBadKey]
	if refused == 0 {
		t.Fatal("no packet was refused for its revoked key")
	}
	// The key is never valid again, so a WRITE of a new connection is refused.
	again, _ := l.connect(t, ctx)
	other, _ := l.cpd.RegisterMR(bytes.Repeat([]byte{0x5A}, 64), endpoint.LocalWrite)
	if err := again.PostWrite(2, 0, other.SGE(0, 64), key, 0); err != nil {
		t.Fatal(err)
	}
	if k, err := l.ccq.Wait(ctx, out); err != nil || k != 1 || out[0].ID != 2 || out[0].Status != endpoint.StatusRemoteAccess {
		t.Fatalf("a WRITE to the revoked key on a new connection: %v %+v", err, out[:k])
	}
	if !bytes.Equal(mem, was) {
		t.Fatal("the new connection's WRITE was placed")
	}
}
