package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TestSharedReceiveQueue has three clients SEND to one server whose
// connections share one receive queue. When the queue runs dry the senders
// are told RNR, and they resume when receives are posted again. Every
// message lands once, in a receive of its own, and each connection's
// receives complete in order.
func TestSharedReceiveQueue(t *testing.T) {
	fc := netem.Config{Seed: 2, Hosts: 4, Planes: 2, Uplink: link100(), Downlink: link100()}
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.02}
	n := newNet(t, fc, Config{Paths: 4, Streams: 2})
	server := n.hosts[3]
	srq := server.ep.NewSRQ(server.pd)
	var accepted []*Conn
	rec := &recorder{}
	server.ep.Listen(server.pd, func(c *Conn) (Events, bool) {
		if err := c.UseSRQ(srq); err != nil {
			t.Error(err)
		}
		accepted = append(accepted, c)
		return rec, true
	})
	const clients, perClient, size = 3, 20, 3000
	buf := server.region(t, 2*clients*perClient*size, 0, memreg.LocalWrite)
	post := func(from, count int) {
		for i := from; i < from+count; i++ {
			if err := srq.PostRecv(RecvWR{ID: uint64(i), Local: SGE{buf, uint64(i * size), size}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	post(0, clients*perClient/2) // half of what is needed
	var sent [][]byte
	var conns []*Conn
	for c := 0; c < clients; c++ {
		src := n.hosts[c].region(t, perClient*size, uint64(c+1), memreg.LocalWrite)
		conn, _ := n.hosts[c].ep.Connect([]netip.Addr{netem.Addr(0, 3), netem.Addr(1, 3)}, proto.DefaultPort, n.hosts[c].pd, &recorder{})
		conns = append(conns, conn)
		sent = append(sent, src.Bytes())
		n.run(time.Second, func() bool { return conn.State() == Established })
		for m := 0; m < perClient; m++ {
			conn.Post(SendWR{ID: uint64(m), Op: OpSend, Stream: uint16(m % 2), Local: SGE{src, uint64(m * size), size}})
		}
	}
	n.run(5*time.Millisecond, func() bool { return len(rec.done) == clients*perClient })
	if len(rec.done) != clients*perClient/2 || srq.Len() != 0 {
		t.Fatalf("%d receives done with half the receives posted; %d left in the queue", len(rec.done), srq.Len())
	}
	post(clients*perClient/2, clients*perClient/2+10)
	if !n.run(time.Second, func() bool { return len(rec.done) == clients*perClient }) {
		t.Fatalf("%d of %d receives", len(rec.done), clients*perClient)
	}
	used := map[uint64]bool{}
	for _, wc := range rec.done {
		if wc.Status != StatusOK || wc.Bytes != size || used[wc.ID] {
			t.Fatalf("receive completion %+v (used twice: %v)", wc, used[wc.ID])
		}
		used[wc.ID] = true
	}
	// Every message's bytes are in some receive, exactly once.
	landed := map[string]int{}
	for id := range used {
		landed[string(buf.Bytes()[id*size:(id+1)*size])]++
	}
	for c := range sent {
		for m := 0; m < perClient; m++ {
			if landed[string(sent[c][m*size:(m+1)*size])] != 1 {
				t.Fatalf("client %d message %d landed %d times", c, m, landed[string(sent[c][m*size:(m+1)*size])])
			}
		}
	}
	if rnr := accepted[0].ReceiverStats().Nacks[proto.NackRNR] + accepted[1].ReceiverStats().Nacks[proto.NackRNR] +
		accepted[2].ReceiverStats().Nacks[proto.NackRNR]; rnr == 0 {
		t.Error("the dry queue refused nothing")
	}
	if srq.Len() != 10 {
		t.Errorf("%d receives left, want 10", srq.Len())
	}
	if err := accepted[0].PostRecv(RecvWR{Local: SGE{buf, 0, 10}}); err == nil {
		t.Error("a receive posted on a connection that uses a shared queue")
	}
}
