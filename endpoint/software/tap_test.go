package software

import (
	"testing"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// reports records what a port reports to its receiver.
type reports struct{ tooBig, dropped, lost int }

func (r *reports) Receive(*link.Datagram, clock.Time) {}
func (r *reports) TooBig(*link.Datagram)              { r.tooBig++ }
func (r *reports) LocalDrop(*link.Datagram)           { r.dropped++ }
func (r *reports) Overflowed(lost int)                { r.lost += lost }

// A tap between the engine and the sockets passes the driver's reports
// through to the engine: datagrams refused as too big, dropped by the host
// on their way out, and lost in a full receive buffer.
func TestTapPassesReportsThrough(t *testing.T) {
	above := &reports{}
	_, attach := Tap(func(*link.Datagram, bool) {}).Wrapper()(nil)
	r := attach(above)
	tb, ok1 := r.(link.TooBigHandler)
	ld, ok2 := r.(link.LocalDropHandler)
	of, ok3 := r.(link.OverflowHandler)
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("the tap hides a report: too big %v, local drops %v, overflows %v", ok1, ok2, ok3)
	}
	tb.TooBig(&link.Datagram{})
	ld.LocalDrop(&link.Datagram{})
	of.Overflowed(3)
	if *above != (reports{1, 1, 3}) {
		t.Fatalf("reports above: %+v", *above)
	}
}
