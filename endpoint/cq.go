package endpoint

import (
	"context"
	"errors"
	"sync"
)

// ErrCQOverflow is what a completion queue reports once it has lost
// completions because it was full.
var ErrCQOverflow = errors.New("endpoint: completion queue overflow: completions were lost")

// CQ is a completion queue, a bounded ring that work-request completions
// are pushed to. If it fills, further completions are lost, and the queue
// reports ErrCQOverflow from then on so that the loss is never silent.
type CQ struct {
	dev      *Device
	mu       sync.Mutex
	ring     []Completion
	head, n  int
	overflow bool
	closed   bool
}

// CreateCQ makes a completion queue holding up to depth completions. On a
// closed device the queue comes back closed, and its Poll and Wait report
// ErrClosed.
func (d *Device) CreateCQ(depth int) *CQ {
	if depth < 1 {
		depth = 1
	}
	q := &CQ{dev: d, ring: make([]Completion, depth)}
	d.mu.Lock()
	if d.cqs == nil {
		q.closed, q.ring = true, nil
	} else {
		d.cqs[q] = struct{}{}
	}
	d.mu.Unlock()
	return q
}

func (q *CQ) push(wc Completion) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		// Nobody will poll a closed queue, so the completion has nowhere to go.
	case q.n == len(q.ring):
		q.overflow = true
	default:
		q.ring[(q.head+q.n)%len(q.ring)] = wc
		q.n++
	}
}

// Poll moves up to len(out) completions into out and returns how many. It
// never blocks.
func (q *CQ) Poll(out []Completion) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, errCQClosed
	}
	k := 0
	for ; k < len(out) && q.n > 0; k++ {
		out[k] = q.ring[q.head]
		q.ring[q.head] = Completion{}
		q.head = (q.head + 1) % len(q.ring)
		q.n--
	}
	if q.overflow {
		return k, ErrCQOverflow
	}
	return k, nil
}

// Len is the number of completions waiting.
func (q *CQ) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// ready reports whether Wait has something to return, a completion or the
// queue's end.
func (q *CQ) ready() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n > 0 || q.closed
}

// Wait blocks until at least one completion is waiting or ctx ends, then
// polls into out.
func (q *CQ) Wait(ctx context.Context, out []Completion) (int, error) {
	if err := q.dev.b.Progress(ctx, q.ready); err != nil {
		return 0, err
	}
	return q.Poll(out)
}

// Close closes the queue. The completions in it are dropped, later ones
// have nowhere to go, and Poll and Wait report ErrClosed. A Wait in
// progress elsewhere returns.
func (q *CQ) Close() error {
	if !q.drop() {
		return nil
	}
	d := q.dev
	// A waiter's condition is checked when the backend makes progress.
	// Closing asks for progress so that a condition now true is seen. A
	// backend that cannot make progress has no waiters to wake.
	d.b.Progress(context.Background(), func() bool { return true })
	return nil
}

// drop closes the queue without asking the backend for progress, for a
// queue no one can be waiting on. It reports whether the queue was open.
func (q *CQ) drop() bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.closed = true
	q.ring, q.head, q.n = nil, 0, 0
	q.mu.Unlock()
	d := q.dev
	d.mu.Lock()
	delete(d.cqs, q)
	d.mu.Unlock()
	return true
}
