package netem

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// DropCause says why a link dropped a datagram.
type DropCause uint8

const (
	DropLoss         DropCause = iota // the loss model
	DropQueueFull                     // tail drop at the queue limit
	DropRED                           // RED without ECN, or a Not-ECT datagram
	DropDown                          // the plane is down
	DropBlackhole                     // the plane is blackholed
	DropTooBig                        // larger than the link's MTU
	DropSharedBuffer                  // over its queue's share of the switch's buffer
	numDropCauses
)

var dropNames = [numDropCauses]string{"loss", "queue-full", "red", "down", "blackhole", "too-big", "shared-buffer"}

func (c DropCause) String() string { return dropNames[c] }

// DropCauses lists every cause, for reports.
var DropCauses = []DropCause{DropLoss, DropQueueFull, DropRED, DropDown, DropBlackhole, DropTooBig, DropSharedBuffer}

// LinkStats are a link's counters.
type LinkStats struct {
	Enqueued uint64 // datagrams accepted into the queue
	Packets  uint64 // datagrams that finished transmission, those the wire then lost too
	Bytes    uint64 // their datagram sizes, without overhead
	CEMarks  uint64
	// QueueHighWater is the most bytes the queue held.
	QueueHighWater int
	Drops          [numDropCauses]uint64
	Duplicated     uint64
	Corrupted      uint64
	// PauseTime is how long PFC held the link paused.
	PauseTime time.Duration
}

func (s *LinkStats) dropsTotal() uint64 {
	var n uint64
	for _, d := range s.Drops {
		n += d
	}
	return n
}

type linkState uint8

const (
	linkUp linkState = iota
	linkDown
	linkBlackhole
)

// Link is one direction of a link. It is an output queue, a serializer at
// the link's rate, and the propagation delay to the far node. The queue
// discipline's settings are copied out of cfg into fields of their own,
// which every datagram reads.
type Link struct {
	// What a datagram's serialization reads and writes comes first, so
	// that a busy link's work touches few cache lines; the simulator's
	// speed with thousands of connections follows the lines it reads
	// (docs/results.md, simulator speed). The settings come after.
	fab          *Fabric
	p            *proc // the process that owns it
	queue        ring
	queueBytes   int
	tx           *packet    // being serialized, with its completion event pending
	wireFree     clock.Time // when the datagram on the wire finishes serialization
	rate         int64      // bits/s now, which a slowdown lowers
	mtu          int        // the largest datagram it carries now, 0 for any; a LinkMTU fault changes it
	txRemainder  int64      // bit-nanoseconds carried between datagrams, so rates do not drift
	overhead     int
	limit, ecnK  int         // cfg.Queue's Limit and ECNThreshold
	pool         *bufferPool // the switch's shared buffer, or nil
	ramp         *ECNRamp    // cfg.Queue's ECNRamp
	red          *RED        // cfg.Queue.RED
	delay        time.Duration
	lastArrival  clock.Time
	to           int // the far node: a host, leaf or spine index, by kind
	state        linkState
	eventPending bool // the link's completion event is scheduled
	pfc          bool // PFC lets the node this link feeds pause it
	paused       bool // the far node paused this link
	impaired     bool // corruption or duplication, which enqueue applies
	jittered     bool // jitter or reordering, which arrival applies

	// Over processes, an uplink decides when a datagram leaves whether the
	// link will have failed when it arrives at the far end, which another
	// process runs. changes holds the state changes scheduled for the link
	// and not yet made, in time order. decided is the latest arrival the
	// link decided so, or -1, and no change may come before it.
	changes []stateChange
	decided clock.Time
	stats   LinkStats

	id          int
	kind        LinkKind
	plane, from int // from is a host, leaf or spine index, by kind
	owner       int // the host whose uplink or downlink it is, or -1 between switches
	cfg         LinkConfig
	rng         *rand.Rand
	loss        LossModel
	redAvg      float64
	redWeight   float64
	// PFC: pauseStart is when the far node paused the link, ingressBytes
	// the bytes that came in on it and wait at the far node, and
	// pauseAsked says the far node has sent a pause or is sending one.
	pauseStart   clock.Time
	ingressBytes int
	pauseAsked   bool
	// _ makes a Link 576 bytes, a size class whose objects all start on a
	// cache line, so that the lines above are whole.
	_ [8]byte
}

// ID is the link's index in Fabric.Links.
func (l *Link) ID() int { return l.id }

// Kind, Plane, From and To say where the link is. From and To are host,
// leaf or spine indexes according to Kind.
func (l *Link) Kind() LinkKind { return l.kind }
func (l *Link) Plane() int     { return l.plane }
func (l *Link) From() int      { return l.from }
func (l *Link) To() int        { return l.to }

// Stats returns the link's counters. PauseTime includes a pause in progress.
func (l *Link) Stats() LinkStats {
	s := l.stats
	if l.paused {
		s.PauseTime += l.p.sched.Now().Sub(l.pauseStart)
	}
	return s
}

// QueueBytes is what the queue holds now.
func (l *Link) QueueBytes() int { return l.queueBytes }

// Rate is the link's current rate in bits per second.
func (l *Link) Rate() int64 { return l.rate }

func (l *Link) matches(m *LinkMatch) bool {
	if m == nil {
		return true
	}
	if m.Kind != AnyKind && m.Kind != l.kind {
		return false
	}
	switch l.kind {
	case Uplink:
		return m.Host < 0 || m.Host == l.from
	case Downlink:
		return m.Host < 0 || m.Host == l.to
	case FabricUp, CoreUp:
		return (m.Leaf < 0 || m.Leaf == l.from) && (m.Spine < 0 || m.Spine == l.to)
	default:
		return (m.Spine < 0 || m.Spine == l.from) && (m.Leaf < 0 || m.Leaf == l.to)
	}
}

// linkState is the state a fault of kind k leaves its links in. It reports
// false for a kind that changes no state, such as a slowdown.
func (k FaultKind) linkState() (s linkState, ok bool) {
	switch k {
	case PlaneDown:
		return linkDown, true
	case PlaneBlackhole:
		return linkBlackhole, true
	case Repair:
		return linkUp, true
	}
	return 0, false
}

// stateChange is a scheduled change of a link's state.
type stateChange struct {
	at    clock.Time
	state linkState
}

// stateAt is the link's state at time at, with its scheduled changes made.
func (l *Link) stateAt(at clock.Time) linkState {
	s := l.state
	for _, c := range l.changes {
		if c.at > at {
			break
		}
		s = c.state
	}
	return s
}

func (l *Link) setState(s linkState) {
	now := l.p.sched.Now()
	for len(l.changes) > 0 && l.changes[0].at <= now {
		l.changes = l.changes[1:] // made, since apply is what makes them
	}
	l.state = s
	if s == linkUp {
		return
	}
	// A failed link loses what it holds.
	cause := DropDown
	if s == linkBlackhole {
		cause = DropBlackhole
	}
	for l.queue.len() > 0 {
		pkt := l.queue.pop()
		l.dequeued(pkt.d.Size())
		l.leaveNode(pkt)
		l.drop(pkt, cause)
	}
}

// dropIfFailed drops pkt, with the failure's cause, when the link is down
// or blackholed.
func (l *Link) dropIfFailed(pkt *packet) bool {
	switch l.state {
	case linkDown:
		l.drop(pkt, DropDown)
	case linkBlackhole:
		l.drop(pkt, DropBlackhole)
	default:
		return false
	}
	return true
}

func (l *Link) drop(pkt *packet, cause DropCause) {
	l.stats.Drops[cause]++
	l.fab.record(l, pkt, Dropped, cause, l.p.sched.Now())
	l.fab.freePacket(l.p, pkt)
}

// enqueue is a datagram arriving at the link's input. The impairments come
// first, then the queue discipline, then the serializer if it is idle.
func (l *Link) enqueue(pkt *packet) {
	if l.dropIfFailed(pkt) {
		return
	}
	if l.mtu > 0 && pkt.d.Size() > l.mtu {
		// DF is set on every datagram (spec section 11), so a link drops
		// what it cannot carry. No ICMP error goes back.
		l.drop(pkt, DropTooBig)
		return
	}
	if !l.impaired {
		l.admit(pkt)
		return
	}
	im := &l.cfg.Impair
	if im.Corrupt > 0 && len(pkt.d.Data) > 0 && l.rng.Float64() < im.Corrupt {
		bit := l.rng.IntN(len(pkt.d.Data) * 8)
		pkt.d.Data[bit/8] ^= 0x80 >> (bit % 8)
		l.stats.Corrupted++
	}
	if im.Duplicate > 0 && l.rng.Float64() < im.Duplicate {
		l.stats.Duplicated++
		l.admit(l.fab.clone(l.p, pkt))
	}
	l.admit(pkt)
}

// admit applies the queue discipline and queues the datagram.
func (l *Link) admit(pkt *packet) {
	size := pkt.d.Size()
	if l.limit > 0 && l.queueBytes+size > l.limit {
		l.drop(pkt, DropQueueFull)
		return
	}
	if l.pool != nil && !l.pool.admits(l.queueBytes, size) {
		l.drop(pkt, DropSharedBuffer)
		return
	}
	ect := pkt.d.ECN != link.NotECT
	v := Queued
	if l.ecnK > 0 && l.queueBytes > l.ecnK && ect {
		pkt.d.ECN = link.CE
		v = Marked
	}
	if r := l.red; r != nil {
		l.redAvg += l.redWeight * (float64(l.queueBytes) - l.redAvg)
		if l.redHit(r) {
			if !r.ECN || !ect {
				l.drop(pkt, DropRED)
				return
			}
			pkt.d.ECN = link.CE
			v = Marked
		}
	}
	if v == Marked {
		l.stats.CEMarks++
	}
	l.stats.Enqueued++
	l.fab.record(l, pkt, v, 0, l.p.sched.Now())
	l.queue.push(pkt)
	l.queueBytes += size
	if l.pool != nil {
		l.pool.used += size
	}
	l.stats.QueueHighWater = max(l.stats.QueueHighWater, l.queueBytes)
	if in := pkt.pausable(); in != nil {
		in.ingressBytes += size
		if !in.pauseAsked && in.ingressBytes > in.cfg.Queue.PFC.XOff {
			in.pauseAsked = true
			l.fab.schedulePFC(in, true)
		}
	}
	l.kick()
}

// dequeued accounts for size bytes leaving the queue.
func (l *Link) dequeued(size int) {
	l.queueBytes -= size
	if l.pool != nil {
		l.pool.used -= size
	}
}

// bufferPool is one switch's SharedBuffer and the bytes its queues hold.
type bufferPool struct {
	bytes int
	alpha float64
	used  int
}

// admits reports whether a queue holding queued bytes may take size more.
func (b *bufferPool) admits(queued, size int) bool {
	free := b.bytes - b.used
	return size <= free && float64(queued) < b.alpha*float64(free)
}

// kick starts the next transmission if there is one and the link may send.
// It starts at once if the wire is free, and otherwise schedules the link's
// event for when it is.
func (l *Link) kick() {
	if l.paused || l.eventPending || l.queue.len() == 0 {
		return
	}
	now := l.p.sched.Now()
	if now < l.wireFree {
		l.eventPending = true
		l.p.sched.At(l.wireFree, l)
		return
	}
	l.startTx(now)
}

func (l *Link) redHit(r *RED) bool {
	switch {
	case l.redAvg < float64(r.MinThreshold):
		return false
	case l.redAvg >= float64(r.MaxThreshold):
		return true
	}
	p := r.MaxProb * (l.redAvg - float64(r.MinThreshold)) / float64(r.MaxThreshold-r.MinThreshold)
	return l.rng.Float64() < p
}

// serialization returns how long size bytes take on the wire, carrying the
// sub-nanosecond remainder to the next datagram.
func (l *Link) serialization(size int) time.Duration {
	bits := int64(size+l.overhead) * 8
	total := bits*1e9 + l.txRemainder
	l.txRemainder = total % l.rate
	return time.Duration(total / l.rate)
}

// startTx puts the head of the queue on the wire. Its completion needs an
// event only if something waits for it, which is the next datagram in the
// queue or the PFC accounting of the link it came in on. Otherwise it
// departs at once, scheduled to arrive when its serialization and delay are
// over. That saves an event per datagram on a link that is not backlogged.
func (l *Link) startTx(now clock.Time) {
	pkt := l.queue.pop()
	size := pkt.d.Size()
	l.dequeued(size)
	if r := l.ramp; r != nil && pkt.d.ECN != link.NotECT && pkt.d.ECN != link.CE && l.queueBytes > r.Min {
		if p := float64(l.queueBytes-r.Min) / float64(r.Max-r.Min); p >= 1 || l.rng.Float64() < p {
			pkt.d.ECN = link.CE
			l.stats.CEMarks++
			l.fab.record(l, pkt, Marked, 0, now)
		}
	}
	end := now.Add(l.serialization(size))
	l.wireFree = end
	if l.queue.len() > 0 || pkt.pausable() != nil {
		l.tx = pkt
		l.eventPending = true
		l.p.sched.At(end, l)
		return
	}
	l.depart(pkt, end)
}

// depart counts a datagram that finishes serialization at end and schedules
// its arrival at the far node, unless the loss model loses it on the wire:
// a lost datagram took the link's time, as a frame a bad link corrupts or
// a far end drops on arrival does, so a sender cannot make up its losses
// by sending faster than the link.
func (l *Link) depart(pkt *packet, end clock.Time) {
	l.stats.Packets++
	l.stats.Bytes += uint64(pkt.d.Size())
	if l.loss != nil && l.loss.Lose(l.rng, end) {
		// Its record is the drop alone: a Sent record says a datagram is
		// on its way to the far node, which taps count as delivered.
		l.stats.Drops[DropLoss]++
		l.fab.record(l, pkt, Dropped, DropLoss, end)
		l.fab.freePacket(l.p, pkt)
		return
	}
	l.fab.record(l, pkt, Sent, 0, end)
	at := l.arrival(end)
	next := pkt.next()
	if next != l.p {
		// Its far end is another process's. Its fate is decided now, and
		// no change of the link's state may come before it arrives.
		l.decided = max(l.decided, at)
	}
	if next == l.p || l.stateAt(at) != linkUp {
		// It arrives on its own process, or it is lost on the wire because
		// the link will have failed when it arrives. The arrival here then
		// drops it.
		l.p.sched.At(at, pkt)
	} else {
		pkt.crossed = true
		l.fab.group.Send(l.p.idx, next.idx, at, pkt)
	}
}

// leaveNode is the PFC bookkeeping of a datagram leaving the far node of
// the link it came in on.
func (l *Link) leaveNode(pkt *packet) {
	in := pkt.pausable()
	if in == nil {
		return
	}
	in.ingressBytes -= pkt.d.Size()
	if in.pauseAsked && in.ingressBytes <= in.cfg.Queue.PFC.XOn {
		in.pauseAsked = false
		l.fab.schedulePFC(in, false)
	}
}

// Fire is the link's event. The wire is free, and the datagram on it has
// finished if one waited for it.
func (l *Link) Fire() {
	l.eventPending = false
	if pkt := l.tx; pkt != nil {
		l.tx = nil
		l.leaveNode(pkt)
		l.depart(pkt, l.p.sched.Now())
	}
	l.kick()
}

// arrival is when a datagram that left now reaches the far node. It adds the
// delay, the jitter, which never reorders, and the reordering impairment.
func (l *Link) arrival(now clock.Time) clock.Time {
	at := now.Add(l.delay)
	if l.jittered {
		var overtaken bool
		if at, overtaken = l.jitter(now, at); overtaken {
			return at // a reordered datagram does not move the FIFO mark
		}
	}
	at = max(at, l.lastArrival)
	l.lastArrival = at
	return at
}

// jitter applies the jitter and reordering impairments to the arrival at
// at of a datagram that left now. It reports whether the datagram is
// reordered, overtaken by what follows.
func (l *Link) jitter(now, at clock.Time) (clock.Time, bool) {
	im := &l.cfg.Impair
	if im.Jitter > 0 {
		j := float64(im.Jitter)
		var x float64
		switch im.Distribution {
		case Normal:
			x = l.rng.NormFloat64() * j
		case Pareto:
			// Pareto with shape 3 and scale 2/3 has mean 1.
			x = j * ((2.0/3.0)/math.Cbrt(1-l.rng.Float64()) - 1)
		default:
			x = (2*l.rng.Float64() - 1) * j
		}
		at = max(now, at+clock.Time(x))
	}
	if im.Reorder > 0 && l.rng.Float64() < im.Reorder {
		return at.Add(im.ReorderGap), true
	}
	return at, false
}

// pfcEvent is a pause or resume reaching the link it controls.
type pfcEvent struct {
	link  *Link
	pause bool
}

func (f *Fabric) schedulePFC(l *Link, pause bool) {
	var e *pfcEvent
	if n := len(f.freePFC); n > 0 {
		e = f.freePFC[n-1]
		f.freePFC = f.freePFC[:n-1]
	} else {
		e = &pfcEvent{}
	}
	e.link, e.pause = l, pause
	l.p.sched.At(l.p.sched.Now().Add(l.delay), e) // a fabric with PFC has one process
}

func (e *pfcEvent) Fire() {
	l, pause := e.link, e.pause
	f := l.fab
	f.freePFC = append(f.freePFC, e)
	now := l.p.sched.Now()
	switch {
	case pause && !l.paused:
		l.paused = true
		l.pauseStart = now
	case !pause && l.paused:
		l.paused = false
		l.stats.PauseTime += now.Sub(l.pauseStart)
		l.kick()
	}
}

// ring is a FIFO of packets that grows as needed and never shrinks.
type ring struct {
	buf        []*packet
	head, size int
}

func (r *ring) len() int { return r.size }

func (r *ring) push(p *packet) {
	if r.size == len(r.buf) {
		n := max(16, 2*len(r.buf))
		buf := make([]*packet, n)
		for i := 0; i < r.size; i++ {
			buf[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = p
	r.size++
}

func (r *ring) pop() *packet {
	p := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return p
}
