package engine

import (
	"errors"

	"github.com/mroce/mroce/memreg"
)

// SRQ is a shared receive queue. Its receives are posted once and consumed
// by the SENDs and WRITE_IMMs of every connection that uses it, so that a
// server with thousands of connections need not post receives on each.
//
// A connection hands a shared receive to a stream's receive sequence number
// (RSN) only when a packet for that RSN arrives, and first hands out the
// RSNs before it, in order. So a SEND that overtakes its predecessors still
// gets its own buffer, and receives are consumed in RSN order per stream
// (spec section 6.5).
type SRQ struct {
	pd    *memreg.Domain
	queue []recvEntry
	head  int
}

// NewSRQ makes a shared receive queue for connections of domain pd.
func (e *Endpoint) NewSRQ(pd *memreg.Domain) *SRQ { return &SRQ{pd: pd} }

// Len is the number of receives waiting in the queue.
func (q *SRQ) Len() int { return len(q.queue) - q.head }

// PostRecv adds a receive. Its Stream is ignored.
func (q *SRQ) PostRecv(wr RecvWR) error {
	var one [1]SGE
	length, err := gatherList(wr.Local, wr.SGL, &one).check(q.pd, memreg.LocalWrite)
	if err != nil {
		return err
	}
	q.queue = append(q.queue, recvEntry{id: wr.ID, local: wr.Local, list: wr.SGL, length: length})
	return nil
}

func (q *SRQ) take() (recvEntry, bool) {
	if q.head == len(q.queue) {
		return recvEntry{}, false
	}
	e := q.queue[q.head]
	q.queue[q.head] = recvEntry{}
	q.head++
	if q.head == len(q.queue) {
		q.queue, q.head = q.queue[:0], 0
	}
	return e, true
}

// giveBack returns the receives a closing connection took but never filled
// to the front of the queue, in order.
func (q *SRQ) giveBack(es []recvEntry) {
	if len(es) == 0 {
		return
	}
	rest := q.queue[q.head:]
	q.queue = append(append(make([]recvEntry, 0, len(es)+len(rest)), es...), rest...)
	q.head = 0
}

// UseSRQ makes the connection take its receives from q. Call it before any
// receive is posted on the connection, from the accept callback or right
// after Connect. q must belong to the connection's protection domain.
func (c *Conn) UseSRQ(q *SRQ) error {
	if q.pd != c.pd {
		return errors.New("engine: the shared receive queue belongs to another protection domain")
	}
	for i := range c.rcv.streams {
		if st := &c.rcv.streams[i]; len(st.recvs) > st.head {
			return errors.New("engine: receives are already posted on the connection")
		}
	}
	c.rcv.srq = q
	return nil
}
