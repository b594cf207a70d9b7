package netem

import (
	"reflect"
	"testing"
)

// Warm only asks for memory: on a packet or a link in any state the loop
// may find them in (fresh, on a hop, at its last with or without a buffer;
// idle, serializing, queued), it changes nothing and does not fail.
func TestWarmChangesNothing(t *testing.T) {
	f, _ := newTestFabric(t, Config{Hosts: 2, Planes: 1, Uplink: simpleLink(100e9, 1000), Downlink: simpleLink(100e9, 1000)})
	up := f.Uplink(0, 0)
	queued := &packet{fab: f, hops: 2}
	packets := []*packet{
		{},
		{fab: f, hops: 1},
		{fab: f, hops: 1, hop: 0, route: [4]*Link{up}},
		{fab: f, hops: 2, route: [4]*Link{up, f.Downlink(0, 1)}},
		{fab: f, hops: 4, hop: 3},
		queued,
	}
	packets[1].d.Data = make([]byte, 64)
	busy := *up
	busy.tx = packets[3]
	busy.queue.push(queued)
	links := []*Link{{}, up, &busy}
	for i, pkt := range packets {
		before := *pkt
		pkt.Warm(1)
		pkt.Warm(2)
		if !reflect.DeepEqual(before, *pkt) {
			t.Fatalf("packet %d: Warm changed it", i)
		}
	}
	for i, l := range links {
		before := *l
		l.Warm(1)
		l.Warm(2)
		if !reflect.DeepEqual(before, *l) {
			t.Fatalf("link %d: Warm changed it", i)
		}
	}
}
