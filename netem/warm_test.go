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
	warmUnchanged(t, "packet", packets)
	warmUnchanged(t, "link", links)
}

// warmUnchanged fails unless both steps of Warm leave each of events as it
// was.
func warmUnchanged[T any, E interface {
	*T
	Warm(step int)
}](t *testing.T, what string, events []E) {
	t.Helper()
	for i, ev := range events {
		before := *(*T)(ev)
		ev.Warm(1)
		ev.Warm(2)
		if !reflect.DeepEqual(before, *(*T)(ev)) {
			t.Fatalf("%s %d: Warm changed it", what, i)
		}
	}
}
