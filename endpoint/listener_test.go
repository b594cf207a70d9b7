package endpoint

import (
	"context"
	"runtime"
	"testing"
	"time"
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

// listening opens a listener with opts on a recorder.
func listening(t *testing.T, opts QPOptions) (*recorder, *Device, *PD, *Listener) {
	t.Helper()
	r := newRecorder()
	dev := Open(r)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := pd.Listen(nil, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, dev, pd, lis
}

// held is what the listener and its domain hold: connections waiting for
// Accept, connections in the domain, queues on the device.
func held(lis *Listener, pd *PD, dev *Device) (waiting, qps, cqs int) {
	lis.mu.Lock()
	waiting = len(lis.arriving) + len(lis.ready)
	lis.mu.Unlock()
	pd.mu.Lock()
	qps = len(pd.qps)
	pd.mu.Unlock()
	dev.mu.Lock()
	cqs = len(dev.cqs)
	dev.mu.Unlock()
	return waiting, qps, cqs
}

// A connection that completes its handshake while the accept queue is
// full is closed and freed, with the queues OwnCQs made for it, and a
// CONNECT that comes while it is full is refused. Those queued are
// accepted as if nothing happened, and once they are, the queue takes
// more.
func TestFullBacklogClosesWhatOverflows(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	r, dev, pd, lis := listening(t, QPOptions{OwnCQs: 4, Backlog: 2})
	// Five handshakes start while the queue is empty, so the backend
	// takes them all; three complete into a full queue.
	var sinks []Sink
	for i := 0; i < 5; i++ {
		h := r.make("qp")
		s, ok := r.accept(h)
		if !ok {
			t.Fatalf("CONNECT %d refused with an empty queue", i)
		}
		r.sinks[h] = s
		sinks = append(sinks, s)
	}
	for _, s := range sinks {
		s.State(Established, nil)
	}
	if _, ok := r.accept(r.make("qp")); ok {
		t.Fatal("a CONNECT was taken while the accept queue was full")
	}
	r.open["qp"]-- // the refused one, which the backend ends itself
	r.advance(0)   // the overflow is closed from the backend's clock, at once
	if r.closes["qp"] != 3 {
		t.Fatalf("%d connections closed, want the 3 that overflowed", r.closes["qp"])
	}
	if w, qps, cqs := held(lis, pd, dev); w != 2 || qps != 2 || cqs != 4 {
		t.Fatalf("after the overflow: %d waiting, %d in the domain, %d queues; want 2, 2 and 4", w, qps, cqs)
	}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		qp, err := lis.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := qp.State(); st != Established || qp.isClosed() {
			t.Fatalf("accepted connection %d is %v", i, st)
		}
	}
	if len(r.timers) != 0 {
		t.Fatalf("%d deadlines still armed after both were accepted", len(r.timers))
	}
	r.arrive(t) // the queue has room again
	if w, qps, _ := held(lis, pd, dev); w != 1 || qps != 3 {
		t.Fatalf("after two accepts and one more: %d waiting, %d in the domain; want 1 and 3", w, qps)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Fatalf("%d goroutines, %d before", n, goroutines)
	}
}

// A connection not accepted within AcceptTimeout, on the backend's clock,
// is closed and freed; one accepted in time is not touched when its
// deadline would have come, and each deadline counts from the
// connection's own handshake.
func TestUnacceptedConnectionExpires(t *testing.T) {
	r, dev, pd, lis := listening(t, QPOptions{OwnCQs: 4, AcceptTimeout: time.Second})
	r.arrive(t)
	r.arrive(t)
	r.advance(999 * time.Millisecond)
	if r.closes["qp"] != 0 {
		t.Fatal("a connection closed before its deadline")
	}
	kept, err := lis.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r.arrive(t) // its deadline is a second from now
	r.advance(time.Millisecond)
	if r.closes["qp"] != 1 {
		t.Fatalf("%d connections closed at the deadline, want the one not accepted", r.closes["qp"])
	}
	if st, _ := kept.State(); st != Established || kept.isClosed() {
		t.Fatalf("the accepted connection is %v", st)
	}
	if w, qps, cqs := held(lis, pd, dev); w != 1 || qps != 2 || cqs != 4 {
		t.Fatalf("after the deadline: %d waiting, %d in the domain, %d queues; want 1, 2 and 4", w, qps, cqs)
	}
	r.advance(time.Second)
	if w, qps, cqs := held(lis, pd, dev); r.closes["qp"] != 2 || w != 0 || qps != 1 || cqs != 2 {
		t.Fatalf("after the last deadline: %d closed, %d waiting, %d in the domain, %d queues; want 2, 0, 1 and 2",
			r.closes["qp"], w, qps, cqs)
	}
	if _, err := lis.Accept(context.Background()); err == nil {
		t.Fatal("Accept returned a connection past its deadline")
	}
}

// A connection that fails while it waits for Accept leaves with its
// deadline stopped, and a listener closed with connections waiting frees
// them and their queues.
func TestWaitingConnectionsLeaveCleanly(t *testing.T) {
	r, dev, pd, lis := listening(t, QPOptions{OwnCQs: 4})
	r.arrive(t)
	failing := r.sinks[QPHandle(r.next)]
	r.arrive(t)
	failing.State(Closed, ErrTimeout)
	if len(r.timers) != 1 {
		t.Fatalf("%d deadlines armed, want the waiting connection's", len(r.timers))
	}
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	if w, qps, cqs := held(lis, pd, dev); w != 0 || qps != 0 || cqs != 0 || len(r.timers) != 0 {
		t.Fatalf("after the close: %d waiting, %d in the domain, %d queues, %d deadlines; want none", w, qps, cqs, len(r.timers))
	}
}

// Backlog and AcceptTimeout are a listener's, and not negative.
func TestListenerOptionsAreChecked(t *testing.T) {
	r := newRecorder()
	dev := Open(r)
	pd, _ := dev.AllocPD()
	cq := dev.CreateCQ(4)
	for _, o := range []QPOptions{{Backlog: -1}, {AcceptTimeout: -time.Second}} {
		if _, err := pd.Listen(cq, cq, o); err == nil {
			t.Errorf("a listener with %+v", o)
		}
	}
	for _, o := range []QPOptions{{Backlog: 4}, {AcceptTimeout: time.Second}} {
		if _, err := pd.Connect(context.Background(), Remote{}, cq, cq, o); err == nil {
			t.Errorf("a connection made with %+v", o)
		}
	}
}
