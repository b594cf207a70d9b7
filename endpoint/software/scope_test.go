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

// A region registered for one accepted connection is reached through its
// key on that connection alone. Two other clients of the same listener,
// in the same protection domain, present the key: a WRITE and a READ, both
// refused as an unknown key is, with nothing placed and nothing read. The
// connection it was registered for writes and reads it.
func TestConnectionRegionRefusesOtherConnections(t *testing.T) {
	l := listenWith(t, endpoint.QPOptions{OwnCQs: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owner, served := l.connect(t, ctx)
	const size = 64 << 10
	region, err := served.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite|endpoint.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	copy(region.Bytes()[size-6:], "secret")
	key := region.RKey()

	forged, _ := l.cpd.RegisterMR(bytes.Repeat([]byte("HIJACKED"), size/8), endpoint.LocalWrite)
	stolen, _ := l.cpd.RegisterMR(make([]byte, size), endpoint.LocalWrite)
	writer, writerServed := l.connect(t, ctx)
	reader, readerServed := l.connect(t, ctx)
	if err := writer.PostWrite(1, 0, forged.SGE(0, size-6), key, 0); err != nil {
		t.Fatal(err)
	}
	if err := reader.PostRead(2, 0, stolen.SGE(0, size), key, 0); err != nil {
		t.Fatal(err)
	}
	refused := map[uint64]bool{}
	out := make([]endpoint.Completion, 1)
	for len(refused) < 2 {
		if k, err := l.ccq.Wait(ctx, out); err != nil || k != 1 {
			t.Fatalf("waiting for the refusals: %v", err)
		}
		if out[0].Status != endpoint.StatusRemoteAccess {
			t.Fatalf("work request %d completed %v, want a remote access error", out[0].ID, out[0].Status)
		}
		refused[out[0].ID] = true
	}
	if err := l.n.Backend(0).Progress(ctx, l.n.Quiet); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(region.Bytes(), append(make([]byte, size-6), "secret"...)) {
		t.Fatal("another connection's WRITE reached the region")
	}
	if bytes.Contains(stolen.Bytes(), []byte("secret")) {
		t.Fatal("another connection's READ returned the region's bytes")
	}
	for name, qp := range map[string]*endpoint.QP{"writer": writerServed, "reader": readerServed} {
		if n := qp.Handle().(*engine.Conn).ReceiverStats().Nacks[proto.NackBadKey]; n == 0 {
			t.Errorf("the %s's requests were not refused for their key", name)
		}
	}

	// The owner's own WRITE and READ go through.
	mine, _ := l.cpd.RegisterMR(bytes.Repeat([]byte{0x3C}, 100), endpoint.LocalWrite)
	back, _ := l.cpd.RegisterMR(make([]byte, size), endpoint.LocalWrite)
	if err := owner.PostWrite(3, 0, mine.SGE(0, 100), key, 0); err != nil {
		t.Fatal(err)
	}
	if err := owner.PostRead(4, 0, back.SGE(0, size), key, 0); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < 2; done++ {
		if k, err := l.ccq.Wait(ctx, out); err != nil || k != 1 || out[0].Status != endpoint.StatusOK {
			t.Fatalf("the owner's work request: %v %+v", err, out[:k])
		}
	}
	if !bytes.Equal(back.Bytes()[:100], mine.Bytes()) || string(back.Bytes()[size-6:]) != "secret" {
		t.Fatal("the owner's WRITE and READ did not reach its region")
	}
}

// A region cannot be registered for a connection once the connection is
// closed.
func TestConnectionRegionNeedsAnOpenConnection(t *testing.T) {
	l := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, served := l.connect(t, ctx)
	if err := served.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := served.RegisterMR(make([]byte, 8), endpoint.LocalWrite); err == nil {
		t.Fatal("a region was registered for a closed connection")
	}
}
