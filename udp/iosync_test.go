package udp

import (
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// Two drivers in one process order memory by the datagrams between them,
// as the kernel does: what was written before a send is there for the
// reader of the datagram, with nothing else between the two goroutines.
// Under the race detector the read is reported unless the drivers say so.
func TestDatagramOrdersMemory(t *testing.T) {
	rx := newDriver(t, runningLoop(t), Config{Planes: addrs([]string{"127.0.0.8"})})
	tx := newDriver(t, clock.NewLoop(), Config{Planes: addrs([]string{"127.0.0.9"})})
	region := make([]byte, 16)
	seen := make(chan byte, 1)
	rx.Start(link.ReceiverFunc(func(d *link.Datagram, _ clock.Time) {
		if len(d.Data) == 1 {
			select {
			case seen <- region[d.Data[0]]:
			default:
			}
		}
	}))
	region[7] = 42
	tx.Send([]link.Datagram{{Src: tx.LocalPorts()[0], Dst: rx.LocalPorts()[0], Data: append(tx.Buffer(), 7)}})
	tx.Flush()
	select {
	case b := <-seen:
		if b != 42 {
			t.Fatalf("read %d, want 42", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
	}
}
