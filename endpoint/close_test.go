package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// recorder is a backend that keeps nothing but what was made and closed.
// That is enough to see that every Close releases what the backend holds,
// once.
type recorder struct {
	next   int
	open   map[string]int // by kind, what is made and not yet closed
	closes map[string]int
	accept func(QPHandle) (Sink, bool)
	sinks  map[QPHandle]Sink
	// now is the recorder's clock, which only advance moves, and timers
	// are AfterFunc's, armed and not yet fired or stopped.
	now    time.Duration
	timers []*fakeTimer
}

type fakeTimer struct {
	at time.Duration
	f  func()
}

func newRecorder() *recorder {
	return &recorder{open: map[string]int{}, closes: map[string]int{}, sinks: map[QPHandle]Sink{}}
}

func (r *recorder) make(kind string) int { r.next++; r.open[kind]++; return r.next }
func (r *recorder) close(kind string) error {
	if r.open[kind] == 0 {
		return fmt.Errorf("a %s closed that was not open", kind)
	}
	r.open[kind]--
	r.closes[kind]++
	return nil
}

type region struct{ buf []byte }

func (g *region) Key() uint64   { return 7 }
func (g *region) Bytes() []byte { return g.buf }

func (r *recorder) Caps() Caps                            { return Caps{Name: "recorder"} }
func (r *recorder) AllocPD() (PDHandle, error)            { return r.make("pd"), nil }
func (r *recorder) DeallocPD(PDHandle) error              { return r.close("pd") }
func (r *recorder) CreateSRQ(PDHandle) (SRQHandle, error) { return r.make("srq"), nil }
func (r *recorder) PostSRQRecv(SRQHandle, RecvWR) error   { return nil }
func (r *recorder) DestroySRQ(SRQHandle) error            { return r.close("srq") }
func (r *recorder) DeregisterMR(MRHandle) error           { return r.close("mr") }
func (r *recorder) RegisterMR(_ PDHandle, buf []byte, _ Access) (MRHandle, error) {
	r.make("mr")
	return &region{buf}, nil
}
func (r *recorder) RegisterQPMR(_ QPHandle, buf []byte, _ Access) (MRHandle, error) {
	r.make("mr")
	return &region{buf}, nil
}
func (r *recorder) Connect(_ PDHandle, _ Remote, _ SRQHandle, s Sink) (QPHandle, error) {
	h := r.make("qp")
	r.sinks[h] = s
	s.State(Established, nil)
	return h, nil
}
func (r *recorder) Listen(_ PDHandle, _ SRQHandle, accept func(QPHandle) (Sink, bool)) (ListenerHandle, error) {
	r.accept = accept
	return r.make("listener"), nil
}
func (r *recorder) CloseListener(ListenerHandle) error {
	r.accept = nil
	return r.close("listener")
}
func (r *recorder) PostSend(QPHandle, SendWR) error    { return nil }
func (r *recorder) PostRecv(QPHandle, RecvWR) error    { return nil }
func (r *recorder) Telemetry(QPHandle) []PathTelemetry { return nil }
func (r *recorder) Received(QPHandle) ReceiveCounters  { return ReceiveCounters{} }
func (r *recorder) Params(QPHandle) ConnParams         { return ConnParams{} }
func (r *recorder) CloseQP(h QPHandle) error {
	r.sinks[h].State(Closed, ErrClosed)
	return r.close("qp")
}
func (r *recorder) AbortQP(h QPHandle, code uint32) error {
	r.sinks[h].State(Closed, &AbortError{Code: code})
	return r.close("qp")
}

// Progress holds or fails at once, since nothing happens on its own here.
func (r *recorder) Progress(_ context.Context, cond func() bool) error {
	if !cond() {
		return errors.New("recorder: the condition does not hold")
	}
	return nil
}

// AfterFunc arms a timer on the recorder's clock.
func (r *recorder) AfterFunc(d time.Duration, f func()) func() bool {
	t := &fakeTimer{at: r.now + d, f: f}
	r.timers = append(r.timers, t)
	return func() bool {
		i := slices.Index(r.timers, t)
		if i >= 0 {
			r.timers = slices.Delete(r.timers, i, i+1)
		}
		return i >= 0
	}
}

// advance moves the clock on by d, firing the timers due on the way in
// the order of their deadlines.
func (r *recorder) advance(d time.Duration) {
	end := r.now + d
	for {
		var next *fakeTimer
		for _, t := range r.timers {
			if t.at <= end && (next == nil || t.at < next.at) {
				next = t
			}
		}
		if next == nil {
			break
		}
		r.timers = slices.DeleteFunc(r.timers, func(t *fakeTimer) bool { return t == next })
		r.now = max(r.now, next.at)
		next.f()
	}
	r.now = end
}

// arrive has the backend accept a connection, as a peer's CONNECT would,
// and complete its handshake.
func (r *recorder) arrive(t *testing.T) {
	t.Helper()
	h := r.make("qp")
	s, ok := r.accept(h)
	if !ok {
		t.Fatal("the listener refused a connection")
	}
	r.sinks[h] = s
	s.State(Established, nil)
}

// everything makes one of each object on a device.
func everything(t *testing.T, dev *Device) (*PD, *CQ, *MR, *SRQ, *Listener, *QP, *QP) {
	t.Helper()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq := dev.CreateCQ(4)
	mr, err := pd.RegisterMR(make([]byte, 64), LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := pd.Listen(cq, cq, QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dev.b.(*recorder).arrive(t)
	accepted, err := lis.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.Connect(context.Background(), Remote{Planes: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, cq, cq, QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pd, cq, mr, srq, lis, qp, accepted
}

// Each object's Close releases what the backend holds for it, once however
// often it is called, and later calls on it fail with ErrClosed.
func TestEveryObjectCloses(t *testing.T) {
	r := newRecorder()
	dev := Open(r)
	pd, cq, mr, srq, lis, qp, accepted := everything(t, dev)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		for what, err := range map[string]error{"qp": qp.Close(), "accepted": accepted.Close(), "listener": lis.Close(),
			"srq": srq.Close(), "mr": mr.Deregister(), "cq": cq.Close(), "pd": pd.Close(), "device": dev.Close()} {
			if err != nil {
				t.Fatalf("close %d of the %s: %v", i+1, what, err)
			}
		}
	}
	want := map[string]int{"pd": 1, "srq": 1, "mr": 1, "listener": 1, "qp": 2}
	for kind, n := range want {
		if r.closes[kind] != n || r.open[kind] != 0 {
			t.Errorf("%s: closed %d times, %d left open; want %d and 0", kind, r.closes[kind], r.open[kind], n)
		}
	}
	later := map[string]error{}
	later["post"] = qp.PostSend(1, 0, mr.SGE(0, 1))
	later["post recv"] = qp.PostRecv(1, 0)
	later["SRQ recv"] = srq.PostRecv(1)
	_, later["accept"] = lis.Accept(ctx)
	_, later["poll"] = cq.Poll(make([]Completion, 1))
	_, later["wait"] = cq.Wait(ctx, make([]Completion, 1))
	_, later["register"] = pd.RegisterMR(make([]byte, 8), LocalWrite)
	_, later["SRQ"] = pd.CreateSRQ()
	_, later["listen"] = pd.Listen(cq, cq, QPOptions{})
	_, later["connect"] = pd.Connect(ctx, Remote{}, cq, cq, QPOptions{})
	_, later["PD"] = dev.AllocPD()
	_, later["CQ of a closed device"] = dev.CreateCQ(1).Poll(nil)
	for what, err := range later {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after close: %v, want ErrClosed", what, err)
		}
	}
}

// Closing a device closes everything made on it, down to the regions and
// connections of its domains, each once; another device on the same
// backend keeps its own.
func TestClosingADeviceClosesWhatWasMadeOnIt(t *testing.T) {
	r := newRecorder()
	other := Open(r)
	keep, err := other.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	keptMR, _ := keep.RegisterMR(make([]byte, 8), LocalWrite)
	dev := Open(r)
	_, cq, mr, srq, lis, qp, accepted := everything(t, dev)
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"pd": 1, "srq": 1, "mr": 1, "listener": 1, "qp": 2}
	for kind, n := range want {
		if r.closes[kind] != n {
			t.Errorf("%s closed %d times, want %d", kind, r.closes[kind], n)
		}
	}
	if r.open["pd"] != 1 || r.open["mr"] != 1 {
		t.Errorf("the other device's domain and region: %d and %d open, want 1 and 1", r.open["pd"], r.open["mr"])
	}
	if s, _ := qp.State(); s != Closed {
		t.Errorf("a connection of the closed device is %v", s)
	}
	if s, _ := accepted.State(); s != Closed {
		t.Errorf("an accepted connection of the closed device is %v", s)
	}
	if _, err := cq.Poll(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("the device's queue polls %v", err)
	}
	if err := mr.Deregister(); err != nil || srq.Close() != nil || lis.Close() != nil {
		t.Error("closing what the device closed again is an error")
	}
	if err := keptMR.Deregister(); err != nil {
		t.Fatal(err)
	}
}

// A listener closed with connections that arrived and were not accepted
// closes them; one closed while the backend reaches it refuses what comes.
func TestClosingAListenerClosesWhatWaits(t *testing.T) {
	r := newRecorder()
	dev := Open(r)
	pd, _ := dev.AllocPD()
	cq := dev.CreateCQ(4)
	lis, err := pd.Listen(cq, cq, QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	accept := r.accept
	r.arrive(t)
	r.arrive(t)
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	if r.closes["qp"] != 2 || r.open["qp"] != 0 {
		t.Fatalf("%d waiting connections closed, %d open: want 2 and 0", r.closes["qp"], r.open["qp"])
	}
	if _, ok := accept(99); ok {
		t.Fatal("a closed listener accepted a connection")
	}
}

// Work naming a deregistered region is refused before it reaches the
// backend.
func TestDeregisteredRegionIsRefused(t *testing.T) {
	r := newRecorder()
	dev := Open(r)
	_, _, mr, srq, _, qp, _ := everything(t, dev)
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{"write": qp.PostWrite(1, 0, mr.SGE(0, 8), 5, 0), "recv": qp.PostRecv(2, 0, mr.SGE(0, 8)),
		"SRQ recv": srq.PostRecv(3, mr.SGE(0, 8))} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("a %s into a deregistered region: %v", what, err)
		}
	}
	if err := qp.PostSend(4, 0, SGE{Length: 1}); err == nil {
		t.Error("a buffer without a region was taken")
	}
}
