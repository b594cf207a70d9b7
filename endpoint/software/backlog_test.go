package software

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
)

// peer is a connection's end as a client sees it, through the engine's
// events.
type peer struct {
	c     *engine.Conn
	state engine.ConnState
	err   error
	at    time.Duration // when it last changed state, on the simulation's clock
	now   func() time.Duration
}

func (p *peer) Completion(*engine.Conn, engine.Completion) {}
func (p *peer) State(_ *engine.Conn, s engine.ConnState, err error) {
	p.state, p.err, p.at = s, err, p.now()
}

// dial starts k handshakes at once from host 0 of n to host 1, through
// host 0's engine, so that none waits for another.
func dial(t *testing.T, n *SimNetwork, pd *memreg.Domain, k int) []*peer {
	t.Helper()
	ep := n.Backend(0).Endpoint()
	now := func() time.Duration { return time.Duration(n.Sim.Now()) }
	var out []*peer
	for i := 0; i < k; i++ {
		p := &peer{now: now}
		c, err := ep.Connect(n.Remote(1).Planes, n.Remote(1).Port, pd, p)
		if err != nil {
			t.Fatal(err)
		}
		p.c = c
		out = append(out, p)
	}
	return out
}

// count is how many of ps are in state s.
func count(ps []*peer, s engine.ConnState) int {
	k := 0
	for _, p := range ps {
		if p.state == s {
			k++
		}
	}
	return k
}

// In virtual time over the engine, connections that complete their
// handshake while the accept queue is full are closed at once, and their
// peers learn it within a round trip; the server's engine holds only
// those queued. A CONNECT that comes while the queue is full is refused.
// The queued connections are accepted and carry data.
func TestBacklogOverflowInVirtualTime(t *testing.T) {
	n := simNet(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spd, _ := n.Device(1).AllocPD()
	scq := n.Device(1).CreateCQ(8)
	lis, err := spd.Listen(scq, scq, endpoint.QPOptions{Backlog: 3})
	if err != nil {
		t.Fatal(err)
	}
	cpd := n.Backend(0).Registry().NewDomain()
	peers := dial(t, n, cpd, 8)
	settled := func() bool {
		return count(peers, engine.Closed) >= 5 && count(peers, engine.Established)+count(peers, engine.Closed) == len(peers)
	}
	if err := n.Backend(0).Progress(ctx, settled); err != nil {
		t.Fatal(err)
	}
	end := n.Sim.Now().Add(10 * time.Millisecond)
	n.Backend(0).Progress(ctx, func() bool { return n.Sim.Now() >= end })
	if count(peers, engine.Established) != 3 || count(peers, engine.Closed) != 5 {
		t.Fatalf("%d peers established, %d closed; want 3 and 5", count(peers, engine.Established), count(peers, engine.Closed))
	}
	for _, p := range peers {
		if p.state == engine.Closed && (!errors.Is(p.err, engine.ErrClosed) || p.at > time.Millisecond) {
			t.Fatalf("an overflowing peer closed at %v with %v; want a CLOSE within a millisecond", p.at, p.err)
		}
	}
	if k := n.Backend(1).Endpoint().Conns(); k != 3 {
		t.Fatalf("the server's engine holds %d connections, want the 3 queued", k)
	}
	late := dial(t, n, cpd, 1)
	if err := n.Backend(0).Progress(ctx, func() bool { return late[0].state == engine.Closed }); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(late[0].err, engine.ErrRefused) {
		t.Fatalf("a CONNECT to a full queue: %v, want refused", late[0].err)
	}
	for i := 0; i < 3; i++ {
		sqp, err := lis.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inbox, _ := spd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
		if err := sqp.PostRecv(uint64(i), 0, inbox.SGE(0, 64)); err != nil {
			t.Fatal(err)
		}
	}
	msg, _ := cpd.Register([]byte("queued, then accepted"), 0)
	for i, p := range peers {
		if p.state == engine.Established {
			if err := p.c.Post(engine.SendWR{ID: uint64(i), Op: engine.OpSend, Local: engine.SGE{Region: msg, Length: uint32(len(msg.Bytes()))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := make([]endpoint.Completion, 4)
	for got := 0; got < 3; {
		k, err := scq.Wait(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range out[:k] {
			if wc.Status != endpoint.StatusOK || wc.Bytes != uint32(len(msg.Bytes())) {
				t.Fatalf("an accepted connection's receive: %+v", wc)
			}
		}
		got += k
	}
}

// In virtual time over the engine, a connection not accepted within
// AcceptTimeout is closed at its deadline: its peer's connection fails
// then, and the server's engine no longer holds it. A connection accepted
// in time stays up and carries data past the deadline it had.
func TestUnacceptedConnectionClosesAtItsDeadline(t *testing.T) {
	n := simNet(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spd, _ := n.Device(1).AllocPD()
	cpd, _ := n.Device(0).AllocPD()
	scq, ccq := n.Device(1).CreateCQ(8), n.Device(0).CreateCQ(8)
	lis, err := spd.Listen(scq, scq, endpoint.QPOptions{AcceptTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	abandoned, err := cpd.Connect(ctx, n.Remote(1), ccq, ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	since := n.Sim.Now()
	// The client waits on its connection with nothing else to do: only the
	// deadline armed at the server keeps the simulation from being quiet.
	closed := func() bool { s, _ := abandoned.State(); return s == endpoint.Closed }
	if err := n.Backend(0).Progress(ctx, closed); err != nil {
		t.Fatalf("waiting for the deadline: %v", err)
	}
	waited := n.Sim.Now().Sub(since)
	if _, err := abandoned.State(); !errors.Is(err, endpoint.ErrClosed) || waited < 2*time.Second || waited > 2*time.Second+10*time.Millisecond {
		t.Fatalf("the abandoned connection closed after %v with %v; want a CLOSE at the 2 s deadline", waited, err)
	}
	if k := n.Backend(1).Endpoint().Conns(); k != 0 {
		t.Fatalf("the server's engine holds %d connections, want none", k)
	}
	// A connection accepted in time lives past its deadline.
	client, err := cpd.Connect(ctx, n.Remote(1), ccq, ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	server, err := lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inbox, _ := spd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err := server.PostRecv(1, 0, inbox.SGE(0, 64)); err != nil {
		t.Fatal(err)
	}
	end := n.Sim.Now().Add(3 * time.Second)
	n.Backend(0).Progress(ctx, func() bool { return n.Sim.Now() >= end })
	msg, _ := cpd.RegisterMR([]byte("accepted in time"), 0)
	if err := client.PostSend(2, 0, msg.SGE(0, uint32(len(msg.Bytes())))); err != nil {
		t.Fatal(err)
	}
	out := make([]endpoint.Completion, 1)
	if k, err := scq.Wait(ctx, out); err != nil || k != 1 || out[0].Status != endpoint.StatusOK {
		t.Fatalf("the accepted connection's receive after its deadline: %v %+v", err, out[:k])
	}
}

// Over real sockets, where the deadline and the overflow's close run on
// timers of their own goroutines: connections beyond the backlog and
// connections past their deadline close, their peers fail, and nothing is
// left behind, neither in the engine nor among the goroutines.
func TestBacklogAndDeadlineOverUDP(t *testing.T) {
	server, client := openUDP(t, []string{"127.0.0.121"}, 2), openUDP(t, []string{"127.0.0.122"}, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spd, _ := server.Device().AllocPD()
	cdev := client.Device()
	cpd, _ := cdev.AllocPD()
	cq := cdev.CreateCQ(64)
	lis, err := spd.Listen(nil, nil, endpoint.QPOptions{OwnCQs: 4, Backlog: 2, AcceptTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	goroutines := runtime.NumGoroutine()
	var qps []*endpoint.QP
	for round := 0; round < 3; round++ {
		// One at a time, so each completes its handshake: the two first
		// wait for their deadline, the others are refused at the CONNECT.
		for i := 0; i < 4; i++ {
			qp, err := cpd.Connect(ctx, server.Remote(), cq, cq, endpoint.QPOptions{})
			switch {
			case i < 2 && err != nil:
				t.Fatalf("round %d, connection %d: %v", round, i, err)
			case i >= 2 && !errors.Is(err, endpoint.ErrRefused):
				t.Fatalf("round %d, connection %d to a full queue: %v, want refused", round, i, err)
			}
			if err == nil {
				qps = append(qps, qp)
			}
		}
		for _, qp := range qps {
			if err := qp.WaitEstablished(ctx); err != nil {
				continue
			}
			err := client.Backend().Progress(ctx, func() bool { s, _ := qp.State(); return s == endpoint.Closed })
			if _, cerr := qp.State(); err != nil || !errors.Is(cerr, endpoint.ErrClosed) {
				t.Fatalf("round %d: a connection not accepted: %v, %v; want closed by the server", round, err, cerr)
			}
		}
		for _, qp := range qps {
			qp.Close()
		}
		qps = nil
	}
	var conns int
	server.Backend().Runner().Do(func() { conns = server.Backend().Endpoint().Conns() })
	if conns != 0 {
		t.Fatalf("the server's engine holds %d connections", conns)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Fatalf("%d goroutines, %d before", n, goroutines)
	}
}
