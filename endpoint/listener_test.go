package endpoint

import (
	"context"
	"testing"
)

// A listener hands out a connection only once its handshake completes, in
// the order they complete. One that never completes, a stray or forged
// CONNECT, is never what Accept returns, and one that fails leaves the
// listener.
func TestAcceptReturnsOnlyCompletedConnections(t *testing.T) {
	r := newRecorder()
	dev := Open(r)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq := dev.CreateCQ(4)
	lis, err := pd.Listen(cq, cq, QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stray := r.make("qp")
	straySink, ok := r.accept(stray)
	if !ok {
		t.Fatal("the listener refused a connection")
	}
	if _, err := lis.Accept(context.Background()); err == nil {
		t.Fatal("Accept returned a connection whose handshake had not completed")
	}
	r.arrive(t) // a real peer, whose handshake completes
	qp, err := lis.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if qp.Handle() == QPHandle(stray) {
		t.Fatal("Accept returned the stray connection")
	}
	if st, _ := qp.State(); st != Established {
		t.Fatalf("the accepted connection is %v", st)
	}
	straySink.State(Closed, ErrTimeout)
	lis.mu.Lock()
	left := len(lis.arriving) + len(lis.ready)
	lis.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d connections left on the listener after the stray failed", left)
	}
	pd.mu.Lock()
	held := len(pd.qps)
	pd.mu.Unlock()
	if held != 1 {
		t.Fatalf("the domain holds %d connections after the stray failed, want the accepted one", held)
	}
}
