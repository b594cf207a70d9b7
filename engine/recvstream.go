// A receive stream. It holds the messages being received, by MSN, and the
// receives posted for them, by RSN (spec section 6.5).

package engine

import "github.com/mroce/mroce/proto"

// rxMessage is a message being received. It keeps the fields of its first
// accepted packet, which every later packet must repeat (spec section 6.5),
// and records the bytes placed.
type rxMessage struct {
	typ       proto.Type
	msgLen    uint32
	rkey      uint64
	roff      uint64
	rsn       uint32 // for a READ_REQ or an atomic, its tag
	imm       uint32
	solicited bool
	// An atomic's operand and, for CMP_SWAP, the value compared.
	operand, compare uint64

	// placed is the message's bytes placed so far. A READ_REQ or an
	// atomic places nothing: it is whole once accepted.
	placed spans
}

// recvStream is one stream's receive side.
type recvStream struct {
	// Messages in progress, by MSN from next.
	next uint32 // the next MSN to complete
	msgs msgRing

	// Posted receives, by RSN. recvs[head] is the receive of RSN base.
	recvs []recvEntry
	head  int
	base  uint32
}

// msgRing holds a stream's messages in progress by MSN, from the stream's
// next. MSN msn is in slot msn & (len - 1). The ring starts empty and
// doubles when a message arrives further ahead than it reaches. The DSN
// window bounds that. A peer can grow the ring to a pointer per DSN of the
// window (Config.DSNWindow) and no further. It does not shrink. It is a
// slice rather than a map because every data packet looks its message up.
type msgRing []*rxMessage

// get is message msn, or nil.
func (q msgRing) get(next, msn uint32) *rxMessage {
	if msn-next >= uint32(len(q)) {
		return nil
	}
	return q[msn&uint32(len(q)-1)]
}

// put sets message msn. msn - next must be less than the DSN window.
func (q *msgRing) put(next, msn uint32, m *rxMessage) {
	if msn-next >= uint32(len(*q)) {
		q.grow(next, msn-next+1)
	}
	(*q)[msn&uint32(len(*q)-1)] = m
}

// grow doubles the ring until it reaches reach messages from next.
func (q *msgRing) grow(next, reach uint32) {
	n := max(len(*q), initialMsgRing)
	for uint32(n) < reach {
		n *= 2
	}
	ring := make(msgRing, n)
	for i := range uint32(len(*q)) {
		ring[(next+i)&uint32(n-1)] = q.get(next, next+i)
	}
	*q = ring
}

// recvEntry is a posted receive, its id and buffers.
type recvEntry struct {
	id     uint64
	local  SGE
	list   []SGE // when the request gave a list
	length uint32
}

// scatter places src at message offset off in the receive's buffers.
func (e *recvEntry) scatter(off uint32, src []byte) error {
	if e.list != nil {
		return sgl(e.list).scatter(off, src)
	}
	one := [1]SGE{e.local}
	return sgl(one[:]).scatter(off, src)
}
