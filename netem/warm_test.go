package netem

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// warmRecorder is a host's receiver that records what it is asked to warm.
type warmRecorder struct{ warmed []*link.Datagram }

func (r *warmRecorder) Receive(*link.Datagram, clock.Time) {}
func (r *warmRecorder) WarmReceive(d *link.Datagram)       { r.warmed = append(r.warmed, d) }

// Warm only asks for memory: on a packet or a link in any state the loop
// may find them in (fresh, on a hop, at its last with or without a buffer;
// idle, serializing, queued; with a hop out of its route), it changes
// nothing and does not fail. A packet on its last hop, and only one, has
// the receiver of the host it reaches warm its datagram, at Warm's second
// step.
func TestWarmChangesNothing(t *testing.T) {
	f, _ := newTestFabric(t, Config{Hosts: 2, Planes: 1, Uplink: simpleLink(100e9, 1000), Downlink: simpleLink(100e9, 1000)})
	receivers := []*warmRecorder{{}, {}}
	for h, r := range receivers {
		f.Host(h).Attach(r)
	}
	up, down := f.Uplink(0, 0), f.Downlink(0, 1)
	queued := &packet{fab: f, hops: 2}
	route := [4]uint32{uint32(up.id), uint32(down.id)}
	arriving := &packet{fab: f, hops: 2, hop: 1, route: route}
	arriving.d.Data = make([]byte, 64)
	packets := []*packet{
		{},
		{fab: f, hops: 1},
		{fab: f, hops: 2, route: route},
		{fab: f, hops: 4, hop: 3},
		{fab: f, hops: 0, hop: 255},
		{fab: f, hops: 2, hop: 1, route: [4]uint32{0, 1 << 30}}, // an id past the links
		queued,
		arriving,
	}
	packets[1].d.Data = make([]byte, 64)
	busy := *up
	busy.tx = packets[2]
	busy.queue.push(queued)
	links := []*Link{{}, up, &busy}
	warmUnchanged(t, "packet", packets)
	warmUnchanged(t, "link", links)
	if got := receivers[1].warmed; len(got) != 1 || got[0] != &arriving.d || len(receivers[0].warmed) != 0 {
		t.Fatalf("receivers warmed %v and %v, want only host 1's, once, with the arriving datagram", receivers[0].warmed, got)
	}
	arriving.Warm(1)
	if len(receivers[1].warmed) != 1 {
		t.Fatal("Warm's first step warmed the receiver")
	}
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

// What a datagram reads and writes on a link is in the link's first four
// cache lines: the queue and its settings, the serializer, the arrival,
// the state, and the counters it bumps (a Link is 576 bytes, an
// allocation class whose objects all start on a line).
func TestLinkHotLines(t *testing.T) {
	tunedFor64Bit(t)
	var l Link
	if size := unsafe.Sizeof(l); size != 576 {
		t.Fatalf("a Link is %d bytes, not the 576 of an allocation class whose objects start on lines", size)
	}
	hot := map[string]uintptr{
		"fab": unsafe.Offsetof(l.fab), "p": unsafe.Offsetof(l.p), "queue": unsafe.Offsetof(l.queue) + unsafe.Sizeof(l.queue),
		"queueBytes": unsafe.Offsetof(l.queueBytes), "tx": unsafe.Offsetof(l.tx), "wireFree": unsafe.Offsetof(l.wireFree),
		"rate": unsafe.Offsetof(l.rate), "txRemainder": unsafe.Offsetof(l.txRemainder), "overhead": unsafe.Offsetof(l.overhead),
		"limit": unsafe.Offsetof(l.limit), "ecnK": unsafe.Offsetof(l.ecnK), "red": unsafe.Offsetof(l.red),
		"delay": unsafe.Offsetof(l.delay), "lastArrival": unsafe.Offsetof(l.lastArrival), "to": unsafe.Offsetof(l.to),
		"state": unsafe.Offsetof(l.state), "eventPending": unsafe.Offsetof(l.eventPending), "pfc": unsafe.Offsetof(l.pfc),
		"paused": unsafe.Offsetof(l.paused), "impaired": unsafe.Offsetof(l.impaired), "jittered": unsafe.Offsetof(l.jittered),
		"changes": unsafe.Offsetof(l.changes) + unsafe.Sizeof(l.changes), "decided": unsafe.Offsetof(l.decided),
		"stats.Enqueued": unsafe.Offsetof(l.stats) + unsafe.Offsetof(l.stats.Enqueued),
		"stats.Packets":  unsafe.Offsetof(l.stats) + unsafe.Offsetof(l.stats.Packets),
		"stats.Bytes":    unsafe.Offsetof(l.stats) + unsafe.Offsetof(l.stats.Bytes),
		"stats.CEMarks":  unsafe.Offsetof(l.stats) + unsafe.Offsetof(l.stats.CEMarks),
		"stats.QueueHighWater": unsafe.Offsetof(l.stats) + unsafe.Offsetof(l.stats.QueueHighWater) +
			unsafe.Sizeof(l.stats.QueueHighWater),
	}
	for name, end := range hot {
		if end > 4*64 {
			t.Errorf("%s ends at byte %d, past the fourth line", name, end)
		}
	}
}

// What a hop reads of a packet, its route and its datagram's size and
// mark, is the packet's first cache line; a packet is 192 bytes, so
// allocated on a line (on 64-bit machines).
func TestPacketHopLine(t *testing.T) {
	tunedFor64Bit(t)
	var pkt packet
	if got := unsafe.Sizeof(pkt); got != 192 {
		t.Fatalf("a packet is %d bytes, want 192", got)
	}
	d := unsafe.Offsetof(pkt.d)
	for name, end := range map[string]uintptr{
		"route":   unsafe.Offsetof(pkt.route) + unsafe.Sizeof(pkt.route),
		"hop":     unsafe.Offsetof(pkt.hop) + 1,
		"data":    d + unsafe.Offsetof(pkt.d.Data) + unsafe.Sizeof(pkt.d.Data),
		"pad":     d + unsafe.Offsetof(pkt.d.Pad) + unsafe.Sizeof(pkt.d.Pad),
		"mark":    d + unsafe.Offsetof(pkt.d.ECN) + 1,
		"crossed": unsafe.Offsetof(pkt.crossed) + 1,
	} {
		if end > 64 {
			t.Errorf("the packet's %s ends at byte %d, past its first line", name, end)
		}
	}
}

// tunedFor64Bit skips a layout test on a machine whose pointers and ints
// are not 8 bytes: the layouts are tuned for 64-bit machines.
func tunedFor64Bit(t *testing.T) {
	t.Helper()
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is tuned for 64-bit machines")
	}
}
