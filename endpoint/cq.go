package endpoint

import (
	"context"
	"errors"
	"sync"
)

// ErrCQOverflow is what a completion queue reports once it has lost
// completions because it was full.
var ErrCQOverflow = errors.New("endpoint: completion queue overflow: completions were lost")

// CQ is a completion queue: a bounded ring that work-request completions
// are pushed to. If it fills, further completions are lost and the queue
// reports ErrCQOverflow from then on: never silently.
type CQ struct {
	dev      *Device
	mu       sync.Mutex
	ring     []Completion
	head, n  int
	overflow bool
}

// CreateCQ makes a completion queue holding up to depth completions.
func (d *Device) CreateCQ(depth int) *CQ {
	if depth < 1 {
		depth = 1
	}
	return &CQ{dev: d, ring: make([]Completion, depth)}
}

func (q *CQ) push(wc Completion) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == len(q.ring) {
		q.overflow = true
		return
	}
	q.ring[(q.head+q.n)%len(q.ring)] = wc
	q.n++
}

// Poll moves up to len(out) completions into out and returns how many. It
// never blocks.
func (q *CQ) Poll(out []Completion) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
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

// Wait blocks until at least one completion is waiting (or ctx ends), then
// polls into out.
func (q *CQ) Wait(ctx context.Context, out []Completion) (int, error) {
	if err := q.dev.b.Progress(ctx, func() bool { return q.Len() > 0 }); err != nil {
		return 0, err
	}
	return q.Poll(out)
}
