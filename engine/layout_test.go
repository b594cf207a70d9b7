package engine

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"unsafe"
)

// A sender's paths are an array of whole cache lines, so that each path's
// first line holds what checking a path reads (sendPath): a field added
// without adjusting sendPathPad would shift every path off its lines. The
// layout is a 64-bit machine's (pointers and ints of 8 bytes).
func TestSendPathIsWholeLines(t *testing.T) {
	tunedFor64Bit(t)
	var p sendPath
	if got := unsafe.Sizeof(p); got != sendPathSize {
		t.Fatalf("a sendPath is %d bytes, want %d: adjust sendPathPad", got, sendPathSize)
	}
	// What each kind of packet reads, by line (sendPath's comments).
	lines := []struct {
		what        string
		first, last uintptr // offsets of the first byte and one past the last
		line        uintptr
	}{
		{"checking a path", 0, unsafe.Offsetof(p.timeouts) + 1, 0},
		{"sending's window, timer and round trip", unsafe.Offsetof(p.s), unsafe.Offsetof(p.rtt) + unsafe.Sizeof(p.rtt), 1},
		{"an ACK's epochs, CE count and loss rounds", unsafe.Offsetof(p.epochStart), unsafe.Offsetof(p.lossAvg) + 8, 2},
		{"the packets sent and acknowledged", unsafe.Offsetof(p.ctr) + unsafe.Offsetof(p.ctr.PacketsSent), unsafe.Offsetof(p.ctr) + unsafe.Offsetof(p.ctr.Acked) + 8, 3},
	}
	for _, l := range lines {
		if l.first/64 != l.line || (l.last-1)/64 != l.line {
			t.Errorf("what %s reads lies in bytes %d to %d, not in line %d", l.what, l.first, l.last, l.line)
		}
	}
}

// What a connection's packets read first is in its first cache line, the
// bits of known peer addresses among it.
func TestConnFirstLine(t *testing.T) {
	tunedFor64Bit(t)
	var c Conn
	if end := unsafe.Offsetof(c.known) + unsafe.Sizeof(c.known); end > 64 {
		t.Fatalf("known ends at byte %d, past the first line", end)
	}
}

// A message is whole cache lines, what its packets read in the first two:
// allocated on a line, its lines are its own.
func TestMessageIsWholeLines(t *testing.T) {
	tunedFor64Bit(t)
	var m message
	if got := unsafe.Sizeof(m); got != messageSize {
		t.Fatalf("a message is %d bytes, want %d: adjust messagePad", got, messageSize)
	}
	for name, end := range map[string]uintptr{
		"progress":                     unsafe.Offsetof(m.failed) + 1,
		"stream":                       unsafe.Offsetof(m.wr) + unsafe.Offsetof(m.wr.Stream) + 2,
		"target, immediate, solicited": unsafe.Offsetof(m.wr) + unsafe.Offsetof(m.wr.Solicited) + 1,
	} {
		if end > 128 || name != "target, immediate, solicited" && end > 64 {
			t.Errorf("the request's %s ends at byte %d, past its line", name, end)
		}
	}
}

// What a data packet reads on the receiving side besides its connection
// and path, a message in progress and a stream, are a cache line each.
func TestReceiveStateIsWholeLines(t *testing.T) {
	tunedFor64Bit(t)
	if got := unsafe.Sizeof(rxMessage{}); got != 64 {
		t.Errorf("an rxMessage is %d bytes, want 64: adjust rxMessagePad", got)
	}
	if got := unsafe.Sizeof(recvStream{}); got != 64 {
		t.Errorf("a recvStream is %d bytes, want 64", got)
	}
}

// A connection's sender and receiver each start on a cache line, at a
// whole number of lines from the connection's start (a Conn is allocated
// on a line): their first lines are what their packets read first, and a
// field added before or in the sender would shift the receiver across two.
func TestConnHalvesStartOnLines(t *testing.T) {
	tunedFor64Bit(t)
	var c Conn
	for name, off := range map[string]uintptr{"sender": unsafe.Offsetof(c.snd), "receiver": unsafe.Offsetof(c.rcv)} {
		if off%64 != 0 {
			t.Errorf("the %s starts at byte %d of the connection, %d into a line: adjust rcvPad", name, off, off%64)
		}
	}
}

// knows answers from its bits for the first 64 planes and from the
// addresses beyond, and agrees with the addresses as setRemote sets and
// clears them.
func TestKnowsFollowsTheAddresses(t *testing.T) {
	c := &Conn{remote: make([]netip.Addr, 70)}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		p := rng.IntN(len(c.remote))
		a := netip.Addr{}
		if rng.IntN(3) > 0 {
			a = netip.AddrFrom4([4]byte{10, byte(p), 0, 1})
		}
		c.setRemote(p, a)
		for q := range c.remote {
			if c.knows(q) != c.remote[q].IsValid() {
				t.Fatalf("plane %d: knows %v, address %v", q, c.knows(q), c.remote[q])
			}
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
