package software

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/netem"
)

func simNet(t *testing.T, loss float64) *SimNetwork {
	t.Helper()
	l := netem.LinkConfig{Rate: 100e9, Delay: time.Microsecond}
	fc := netem.Config{Seed: 3, Hosts: 2, Planes: 4, Uplink: l, Downlink: l}
	if loss > 0 {
		fc.Downlink.Impair.Loss = &netem.RandomLoss{P: loss}
	}
	n, err := NewSimNetwork(fc, engine.Config{Paths: 8, Streams: 4}, 42)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The verbs flow end to end through the API. It registers, listens,
// connects, posts receives, SENDs, WRITEs and READs, and waits for
// completions.
func TestVerbsFlow(t *testing.T) {
	n := simNet(t, 0.01)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp := verbsFlow(t, ctx, n.Device(1), n.Device(0), n.Remote(1), 1<<20)
	if tel := qp.Telemetry(); len(tel) != 8 || tel[0].PacketsSent == 0 {
		t.Fatalf("telemetry %+v", tel)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := qp.State(); st != endpoint.Closed {
		t.Fatalf("state after close: %v", st)
	}
}

// verbsFlow connects client to server at remote, SENDs size bytes into a
// posted receive, WRITEs them to a region and READs them back, checking
// every completion and every byte. It returns the client's QP.
func verbsFlow(t *testing.T, ctx context.Context, server, client *endpoint.Device, remote endpoint.Remote, size uint32) *endpoint.QP {
	t.Helper()
	spd, _ := server.AllocPD()
	cpd, _ := client.AllocPD()
	scq, ccq := server.CreateCQ(64), client.CreateCQ(64)
	lis, err := spd.Listen(scq, scq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := cpd.Connect(ctx, remote, ccq, ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sqp, err := lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{9}).Read(data)
	src, _ := cpd.RegisterMR(data, endpoint.LocalWrite)
	back, _ := cpd.RegisterMR(make([]byte, size), endpoint.LocalWrite)
	inbox, _ := spd.RegisterMR(make([]byte, size), endpoint.LocalWrite)
	target, _ := spd.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite|endpoint.RemoteRead)
	// One stream carries, in order, the WRITE, the SEND and a READ of what
	// the WRITE put there. The SEND's receive completes only after the
	// WRITE is placed, so the server may read the region once it has it.
	if err := sqp.PostRecv(77, 1, inbox.SGE(0, size)); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostWrite(2, 1, src.SGE(0, size), target.RKey(), 0); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(1, 1, src.SGE(0, size)); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRead(3, 1, back.SGE(0, size), target.RKey(), 0); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]endpoint.Completion{}
	buf := make([]endpoint.Completion, 8)
	for len(got) < 3 {
		k, err := ccq.Wait(ctx, buf)
		if err != nil {
			t.Fatalf("%v; completions so far %+v", err, got)
		}
		for _, wc := range buf[:k] {
			got[wc.ID] = wc
		}
	}
	for id, wc := range got {
		if wc.Status != endpoint.StatusOK {
			t.Errorf("completion %d: %+v", id, wc)
		}
	}
	k, err := scq.Wait(ctx, buf)
	if err != nil || k != 1 || buf[0].ID != 77 || buf[0].Bytes != size || buf[0].Op != endpoint.OpRecv {
		t.Fatalf("receive completion %v %+v", err, buf[:k])
	}
	if !bytes.Equal(inbox.Bytes(), data) || !bytes.Equal(target.Bytes(), data) || !bytes.Equal(back.Bytes(), data) {
		t.Fatal("data differs")
	}
	return qp
}

// A full completion queue reports the overflow; it never drops silently.
func TestCQOverflowIsReported(t *testing.T) {
	n := simNet(t, 0)
	ctx := context.Background()
	cpd, _ := n.Device(0).AllocPD()
	spd, _ := n.Device(1).AllocPD()
	ccq, scq := n.Device(0).CreateCQ(2), n.Device(1).CreateCQ(8)
	if _, err := spd.Listen(scq, scq, endpoint.QPOptions{}); err != nil {
		t.Fatal(err)
	}
	qp, err := cpd.Connect(ctx, n.Remote(1), ccq, ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := cpd.RegisterMR(make([]byte, 100), endpoint.LocalWrite)
	dst, _ := spd.RegisterMR(make([]byte, 100), endpoint.LocalWrite|endpoint.RemoteWrite)
	for i := 0; i < 3; i++ {
		qp.PostWrite(uint64(i), 0, src.SGE(0, 100), dst.RKey(), 0)
	}
	n.Backend(0).Progress(ctx, n.Quiet)
	out := make([]endpoint.Completion, 8)
	k, err := ccq.Poll(out)
	if k != 2 || err != endpoint.ErrCQOverflow {
		t.Fatalf("polled %d, %v: want the 2 that fit and endpoint.ErrCQOverflow", k, err)
	}
}

// Waiting for something that can no longer happen in virtual time returns
// at once with ErrStalled instead of hanging.
func TestWaitInVirtualTimeNeverHangs(t *testing.T) {
	n := simNet(t, 0)
	cq := n.Device(0).CreateCQ(4)
	if _, err := cq.Wait(context.Background(), make([]endpoint.Completion, 1)); err != ErrStalled {
		t.Fatalf("Wait with nothing to come: %v", err)
	}
	// An idle connection keeps exchanging keep-alives, so the simulation
	// never runs dry; the wait still ends once nothing but keep-alives is
	// left. The connection is accepted, or its accept deadline would be
	// something left to happen.
	pd, _ := n.Device(0).AllocPD()
	lpd, _ := n.Device(1).AllocPD()
	scq := n.Device(1).CreateCQ(4)
	lis, err := lpd.Listen(scq, scq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.Connect(context.Background(), n.Remote(1), cq, cq, endpoint.QPOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lis.Accept(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := scq.Wait(context.Background(), make([]endpoint.Completion, 1)); err != ErrStalled {
		t.Fatalf("Wait on an idle connection: %v", err)
	}
}

// The API serves READ, a shared receive queue for accepted connections,
// and path events when a plane fails.
func TestReadSRQAndPathEventsThroughTheAPI(t *testing.T) {
	l := netem.LinkConfig{Rate: 100e9, Delay: time.Microsecond}
	fc := netem.Config{Seed: 3, Hosts: 2, Planes: 2, Uplink: l, Downlink: l,
		Faults: []netem.Fault{{At: 50 * time.Microsecond, Kind: netem.PlaneDown, Plane: 1}}}
	n, err := NewSimNetwork(fc, engine.Config{Paths: 4}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spd, _ := n.Device(1).AllocPD()
	cpd, _ := n.Device(0).AllocPD()
	scq, ccq := n.Device(1).CreateCQ(16), n.Device(0).CreateCQ(16)
	srq, err := spd.CreateSRQ()
	if err != nil {
		t.Fatal(err)
	}
	inbox, _ := spd.RegisterMR(make([]byte, 1000), endpoint.LocalWrite)
	srq.PostRecv(5, inbox.SGE(0, 1000))
	if _, err := spd.Listen(scq, scq, endpoint.QPOptions{SRQ: srq}); err != nil {
		t.Fatal(err)
	}
	qp, err := cpd.Connect(ctx, n.Remote(1), ccq, ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exposed, _ := spd.RegisterMR(bytes.Repeat([]byte("mroce"), 100000), endpoint.RemoteRead)
	local, _ := cpd.RegisterMR(make([]byte, 500000), endpoint.LocalWrite)
	msg, _ := cpd.RegisterMR([]byte("hello over a shared receive queue"), 0)
	qp.PostRead(1, 0, local.SGE(0, 500000), exposed.RKey(), 0)
	qp.PostSend(2, 1, msg.SGE(0, uint32(len(msg.Bytes()))))
	out := make([]endpoint.Completion, 4)
	for got := 0; got < 2; {
		k, err := ccq.Wait(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range out[:k] {
			if wc.Status != endpoint.StatusOK {
				t.Fatalf("%+v", wc)
			}
		}
		got += k
	}
	if !bytes.Equal(local.Bytes(), exposed.Bytes()) {
		t.Fatal("READ data differs")
	}
	k, err := scq.Wait(ctx, out)
	if err != nil || k != 1 || out[0].ID != 5 || string(inbox.Bytes()[:out[0].Bytes]) != string(msg.Bytes()) {
		t.Fatalf("SRQ receive: %v %+v", err, out[:k])
	}
	// Let the plane fail, at 50 µs by the fabric's schedule.
	n.Backend(0).Progress(ctx, func() bool { return n.Sim.Now() >= clock.Time(50*time.Microsecond) })
	evs := qp.PathEvents()
	down := 0
	for _, ev := range evs {
		if ev.Plane == 1 && ev.To.String() == "DOWN" {
			down++
		}
		if ev.Plane != 1 {
			t.Errorf("event on a healthy plane: %+v", ev)
		}
	}
	if down != 2 {
		t.Fatalf("%d paths reported DOWN on plane 1 (events %+v), want 2", down, evs)
	}
}

// server is a listener on host 1 of a loss-free simulated
// network, its accepted connections' completions on scq, and a client on
// host 0 with its queue ccq.
type server struct {
	n        *SimNetwork
	spd, cpd *endpoint.PD
	scq, ccq *endpoint.CQ
	lis      *endpoint.Listener
}

func listen(t *testing.T) *server { return listenWith(t, endpoint.QPOptions{}) }

// listenWith is listen with the listener's options.
func listenWith(t *testing.T, opts endpoint.QPOptions) *server {
	t.Helper()
	l := &server{n: simNet(t, 0)}
	server, client := l.n.Device(1), l.n.Device(0)
	l.spd, _ = server.AllocPD()
	l.cpd, _ = client.AllocPD()
	l.scq, l.ccq = server.CreateCQ(8), client.CreateCQ(8)
	var err error
	if l.lis, err = l.spd.Listen(l.scq, l.scq, opts); err != nil {
		t.Fatal(err)
	}
	return l
}

// connect opens a client connection and accepts it.
func (l *server) connect(t *testing.T, ctx context.Context) (client, server *endpoint.QP) {
	t.Helper()
	qp, err := l.cpd.Connect(ctx, l.n.Remote(1), l.ccq, l.ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sqp, err := l.lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return qp, sqp
}

// An acceptor may speak first. After WaitEstablished its send goes, and
// the initiator receives it.
func TestAcceptorSpeaksFirst(t *testing.T) {
	l := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp, sqp := l.connect(t, ctx)
	inbox, _ := l.cpd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err := qp.PostRecv(5, 1, inbox.SGE(0, 64)); err != nil {
		t.Fatal(err)
	}
	hello, _ := l.spd.RegisterMR([]byte("hello"), endpoint.LocalWrite)
	if err := sqp.WaitEstablished(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sqp.PostSend(1, 1, hello.SGE(0, 5)); err != nil {
		t.Fatalf("a send after WaitEstablished: %v", err)
	}
	buf := make([]endpoint.Completion, 1)
	if k, err := l.ccq.Wait(ctx, buf); err != nil || k != 1 || buf[0].ID != 5 || string(inbox.Bytes()[:buf[0].Bytes]) != "hello" {
		t.Fatalf("the initiator's receive: %v %+v", err, buf)
	}
}

// Two accepted connections, each given queues of its own by the
// listener's OwnCQs, complete each receive on its own queue, never on the
// other's or the listener's.
func TestAcceptedConnectionsGetTheirOwnQueues(t *testing.T) {
	l := listenWith(t, endpoint.QPOptions{OwnCQs: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, _ := l.cpd.RegisterMR([]byte("ab"), endpoint.LocalWrite)
	var served []*endpoint.QP
	for i := 0; i < 2; i++ {
		qp, sqp := l.connect(t, ctx)
		served = append(served, sqp)
		own := sqp.RecvCQ()
		if own == l.scq || sqp.SendCQ() == l.scq || (i == 1 && own == served[0].RecvCQ()) {
			t.Fatalf("connection %d shares a queue", i)
		}
		inbox, _ := l.spd.RegisterMR(make([]byte, 8), endpoint.LocalWrite)
		if err := sqp.PostRecv(uint64(10+i), 1, inbox.SGE(0, 8)); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostSend(uint64(i), 1, msg.SGE(uint64(i), 1)); err != nil {
			t.Fatal(err)
		}
		buf := make([]endpoint.Completion, 1)
		if k, err := own.Wait(ctx, buf); err != nil || k != 1 || buf[0].ID != uint64(10+i) || inbox.Bytes()[0] != "ab"[i] {
			t.Fatalf("connection %d: its own queue gave %v %+v", i, err, buf)
		}
	}
	if served[0].RecvCQ().Len() != 0 || l.scq.Len() != 0 {
		t.Fatalf("completions left on another connection's queue (%d) or the listener's (%d)",
			served[0].RecvCQ().Len(), l.scq.Len())
	}
}

// Queues are a listener's option or a connecting side's arguments, never
// both, and never missing. Each mistake is a clear error.
func TestQueueOptionsAreChecked(t *testing.T) {
	n := simNet(t, 0)
	pd, _ := n.Device(1).AllocPD()
	cq := n.Device(1).CreateCQ(4)
	if _, err := pd.Listen(nil, nil, endpoint.QPOptions{}); err == nil {
		t.Error("a listener without queues")
	}
	if _, err := pd.Listen(cq, cq, endpoint.QPOptions{OwnCQs: -1}); err == nil {
		t.Error("a listener with negative OwnCQs")
	}
	ctx := context.Background()
	if _, err := pd.Connect(ctx, n.Remote(0), cq, cq, endpoint.QPOptions{OwnCQs: 4}); err == nil {
		t.Error("a connecting side with OwnCQs")
	}
	if _, err := pd.Connect(ctx, n.Remote(0), nil, cq, endpoint.QPOptions{}); err == nil {
		t.Error("a connection without a send queue")
	}
}

// QP.Abort carries the application's code to the peer: the peer's posted
// receive and its connection end with an *endpoint.AbortError naming it,
// remote, and this side's connection with the same code, local.
func TestAbortCarriesTheCodeToThePeer(t *testing.T) {
	l := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp, sqp := l.connect(t, ctx)
	inbox, _ := l.spd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err := sqp.PostRecv(5, 1, inbox.SGE(0, 64)); err != nil {
		t.Fatal(err)
	}
	if err := qp.Abort(0xC0DE); err != nil {
		t.Fatal(err)
	}
	buf := make([]endpoint.Completion, 1)
	var remote *endpoint.AbortError
	if k, err := l.scq.Wait(ctx, buf); err != nil || k != 1 || buf[0].Status != endpoint.StatusFlushed || !errors.As(buf[0].Err, &remote) {
		t.Fatalf("the peer's receive: %v %+v", err, buf)
	}
	if remote.Code != 0xC0DE || !remote.Remote || !errors.Is(buf[0].Err, endpoint.ErrClosed) {
		t.Fatalf("the peer's receive ended with %v", buf[0].Err)
	}
	var local *endpoint.AbortError
	if _, err := qp.State(); !errors.As(err, &local) || local.Code != 0xC0DE || local.Remote {
		t.Fatalf("the aborting side ended with %v", err)
	}
	if _, err := sqp.State(); !errors.As(err, &remote) || remote.Code != 0xC0DE {
		t.Fatalf("the peer's connection ended with %v", err)
	}
	if err := qp.Close(); err != nil {
		t.Fatalf("Close after Abort: %v", err)
	}
}

// Each side's Params name its own wire identity and the peer's, and the
// two sides agree: one's Local is the other's Peer (docs/spec.md section
// 8.1).
func TestParamsNameBothEnds(t *testing.T) {
	l := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp, sqp := l.connect(t, ctx)
	if err := sqp.WaitEstablished(ctx); err != nil {
		t.Fatal(err)
	}
	c, s := qp.Params(), sqp.Params()
	if c.Local != s.Peer || s.Local != c.Peer {
		t.Fatalf("the ends disagree: client %+v, server %+v", c, s)
	}
	if c.Local.ConnID == 0 || s.Local.ConnID == 0 || c.Local.ConnID == s.Local.ConnID && c.Local.InitialPSN == s.Local.InitialPSN {
		t.Fatalf("identities not drawn: client %+v, server %+v", c.Local, s.Local)
	}
}

// QP.ClosedNormally is false while the connection runs, true once it has
// ended with a CLOSE NORMAL, and false after an abort.
func TestQPClosedNormally(t *testing.T) {
	for _, abort := range []bool{false, true} {
		l := listen(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		qp, sqp := l.connect(t, ctx)
		if err := sqp.WaitEstablished(ctx); err != nil {
			t.Fatal(err)
		}
		if qp.ClosedNormally() || sqp.ClosedNormally() {
			t.Fatal("a running connection reported closed")
		}
		inbox, _ := l.spd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
		if err := sqp.PostRecv(9, 0, inbox.SGE(0, 64)); err != nil {
			t.Fatal(err)
		}
		if abort {
			qp.Abort(7)
		} else {
			qp.Close()
		}
		// The receive is flushed once the end reaches the peer.
		if k, err := l.scq.Wait(ctx, make([]endpoint.Completion, 1)); err != nil || k != 1 {
			t.Fatalf("the peer's receive: %v", err)
		}
		if got := sqp.ClosedNormally(); got == abort {
			t.Errorf("after the peer's %s: ClosedNormally %v", map[bool]string{false: "close", true: "abort"}[abort], got)
		}
		cancel()
	}
}
