package engine

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

// The simulator's warming only asks for memory: the pacing and ACK timers'
// Warm and the endpoint's WarmReceive change nothing of a connection or an
// endpoint, whether the connection is new, idle or in the middle of a
// transfer, and whatever the datagram (an ACK, data, one for no
// connection, one too short to name any).
func TestWarmChangesNothing(t *testing.T) {
	var fresh Conn
	for step := 1; step <= 2; step++ {
		(*pacing)(&fresh.snd).Warm(step)
		(*acking)(&fresh).Warm(step)
	}
	if !reflect.DeepEqual(fresh, Conn{}) {
		t.Fatal("Warm changed a connection never set up")
	}

	n := newNet(t, twoHostFabric(2), Config{})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 1<<20, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 1<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	check := func(when string) {
		t.Helper()
		for _, c := range []*Conn{pr.a, pr.b} {
			before := contents(c)
			for step := 1; step <= 2; step++ {
				(*pacing)(&c.snd).Warm(step)
				(*acking)(c).Warm(step)
			}
			for _, typ := range []proto.Type{proto.TypeAck, proto.TypeNack, proto.TypeCNP, proto.TypeProbeReply, proto.TypeWrite, proto.TypeSend} {
				for _, id := range []uint32{c.localID, c.localID + 1} {
					b := make([]byte, proto.CommonHeaderLen)
					b[1] = byte(typ)
					binary.BigEndian.PutUint32(b[8:], id)
					c.ep.WarmReceive(&link.Datagram{Data: b})
					c.ep.WarmReceive(&link.Datagram{Data: b[:proto.CommonHeaderLen-1]})
				}
			}
			if after := contents(c); after != before {
				t.Fatalf("%s: warming changed the connection or its endpoint:\n%s\nnow\n%s", when, before, after)
			}
		}
	}
	check("idle")
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 1 << 20}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	n.run(20*time.Microsecond, func() bool { return false })
	if len(pr.ra.done) != 0 || pr.a.snd.inflightAll == 0 {
		t.Fatalf("not in the middle of the transfer: %d completions, %d packets in flight", len(pr.ra.done), pr.a.snd.inflightAll)
	}
	check("mid-transfer")
}

// contents prints a connection's state and what its slices and paths hold
// (a comparison of the structs alone would miss a write through a slice:
// a ring's record, a path's), with its endpoint's counters.
func contents(c *Conn) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%+v\n%+v\n%+v\n", c.snd, c.rcv, c.ep.stats)
	for _, p := range c.snd.paths {
		fmt.Fprintf(&b, "%+v %+v\n", *p, *p.cwin)
	}
	for _, st := range c.snd.streams {
		for _, m := range st.queue {
			fmt.Fprintf(&b, "%+v\n", *m)
		}
	}
	return b.String()
}
