package endpoint

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
)

// openUDP opens a host on planes with paths paths, trying other ports if
// some are taken; it closes when the test ends.
func openUDP(t *testing.T, planes []string, paths int) *UDPHost {
	t.Helper()
	var lastErr error
	for try := 0; try < 20; try++ {
		base := uint16(20000 + rand.IntN(40000))
		cfg := engine.Config{Port: base, Paths: paths, Streams: 4, NoProgress: 10 * time.Second}
		for _, p := range planes {
			cfg.Planes = append(cfg.Planes, netip.MustParseAddr(p))
		}
		for i := 1; i <= paths; i++ {
			cfg.SourcePorts = append(cfg.SourcePorts, base+uint16(i))
		}
		h, err := OpenUDP(cfg)
		if err == nil {
			t.Cleanup(func() { h.Close() })
			return h
		}
		lastErr = err
	}
	t.Fatalf("no free ports: %v", lastErr)
	return nil
}

// The verbs flow over real UDP sockets in real time: connect, SEND, WRITE
// and READ between two hosts on loopback, completions waited for through
// the completion queues, the bytes checked, the paths' telemetry read.
func TestVerbsOverUDP(t *testing.T) {
	server := openUDP(t, []string{"127.0.0.61", "127.0.0.62"}, 4)
	client := openUDP(t, []string{"127.0.0.63", "127.0.0.64"}, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sdev, cdev := server.Device(), client.Device()
	spd, _ := sdev.AllocPD()
	cpd, _ := cdev.AllocPD()
	scq, ccq := sdev.CreateCQ(64), cdev.CreateCQ(64)
	lis, err := spd.Listen(scq, scq, QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := cpd.Connect(ctx, server.Remote(), ccq, ccq, QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sqp, err := lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(data)
	src, _ := cpd.RegisterMR(data, LocalWrite)
	back, _ := cpd.RegisterMR(make([]byte, size), LocalWrite)
	inbox, _ := spd.RegisterMR(make([]byte, size), LocalWrite)
	target, _ := spd.RegisterMR(make([]byte, size), LocalWrite|RemoteWrite|RemoteRead)
	if err := sqp.PostRecv(77, 1, inbox.SGE(0, size)); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(1, 1, src.SGE(0, size)); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostWrite(2, 2, src.SGE(0, size), target.RKey(), 0); err != nil {
		t.Fatal(err)
	}
	// READ back what the WRITE put there: stream 2 keeps it after the WRITE.
	if err := qp.PostRead(3, 2, back.SGE(0, size), target.RKey(), 0); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]Completion{}
	buf := make([]Completion, 8)
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
		if wc.Status != StatusOK {
			t.Errorf("completion %d: %+v", id, wc)
		}
	}
	k, err := scq.Wait(ctx, buf)
	if err != nil || k != 1 || buf[0].ID != 77 || buf[0].Bytes != size {
		t.Fatalf("receive completion %v %+v", err, buf[:k])
	}
	if !bytes.Equal(inbox.Bytes(), data) || !bytes.Equal(target.Bytes(), data) || !bytes.Equal(back.Bytes(), data) {
		t.Fatal("data differs")
	}
	tel := qp.Telemetry()
	if len(tel) != 4 {
		t.Fatalf("telemetry of %d paths", len(tel))
	}
	for _, p := range tel {
		if p.PacketsSent == 0 || p.RTT.Samples == 0 {
			t.Errorf("path %d carried nothing: %+v", p.Path, p)
		}
	}
	if st := server.DriverStats(); st.Received == 0 || st.ECNSeen == 0 {
		t.Errorf("server driver %+v", st)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
}

// Progress waits for a condition met later, and gives up when its context
// ends.
func TestLoopRunnerProgress(t *testing.T) {
	loop := clock.NewLoop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go loop.Run(ctx)
	r := NewLoopRunner(loop)
	n := 0 // the loop's
	go func() {
		for i := 0; i < 5; i++ {
			r.Do(func() { n++ })
		}
	}()
	if err := r.Progress(ctx, func() bool { return n == 5 }); err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	defer stop()
	if err := r.Progress(short, func() bool { return n == 6 }); err == nil {
		t.Fatal("a condition that never holds was met")
	}
}
