// Package perftest measures one connection over the verbs API as perftest
// does, with the tests write_bw, send_bw, read_bw and write_lat that mroce
// bench runs.
//
// A client runs the test and a server answers it. They agree on the test
// over stream 0 and run it on stream 1, so that no control message queues
// behind the measured ones. The client SENDs a JSON Request naming the
// test, sizes, iterations and depth. The server registers what the test
// needs and answers with a JSON Response that holds its region's key and
// length. The client ends the test with one more SEND on stream 0, which
// the server answers before it returns.
package perftest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mroce/mroce/endpoint"
)

// The tests, named as perftest's ib_write_bw and its siblings.
const (
	WriteBW  = "write_bw"
	SendBW   = "send_bw"
	ReadBW   = "read_bw"
	WriteLat = "write_lat"
)

// Tests lists the tests in the order help shows them.
var Tests = []string{WriteBW, SendBW, ReadBW, WriteLat}

// IsLatency reports whether test measures latency.
func IsLatency(test string) bool { return test == WriteLat }

// Request is what the client asks of the server.
type Request struct {
	Test  string `json:"test"`
	Sizes []int  `json:"sizes"`
	Iters int    `json:"iters"`
	Depth int    `json:"depth"`
	// RKey is the client's region that write_lat's server WRITEs back to.
	RKey uint64 `json:"rkey,omitempty"`
	// Duration, when set, runs each size for that long, at least one
	// operation, and Iters only bounds it (perftest's -D). The client's
	// own: the server serves operations as they come.
	Duration time.Duration `json:"-"`
}

// MaxIters is the most operations a size may run.
const MaxIters = 10_000_000

// until reports whether a size begun at began may start another
// operation, the done-th: under Iters, and within Duration when one is
// set, and always the first.
func (r Request) until(began time.Time, done int) bool {
	return done < r.Iters && (done == 0 || r.Duration == 0 || time.Since(began) < r.Duration)
}

// Response is the server's answer, naming its region or its refusal.
type Response struct {
	RKey  uint64 `json:"rkey"`
	Len   int    `json:"len"`
	Error string `json:"error,omitempty"`
}

// MaxSize is the largest message a test may use, 64 MiB.
const MaxSize = 64 << 20

// Sweep is the sizes of -a, the powers of two from 2 bytes to 8 MiB, as in
// perftest.
func Sweep() []int {
	var s []int
	for n := 2; n <= 8<<20; n *= 2 {
		s = append(s, n)
	}
	return s
}

// Result is one size's measurement. Bandwidth tests fill the BW fields,
// the latency test the latency ones. Latencies are one-way, half the round
// trip, as perftest reports them.
type Result struct {
	Bytes       int     `json:"bytes"`
	Iterations  int     `json:"iterations"`
	BWPeakGbps  float64 `json:"bw_peak_gbps,omitempty"`
	BWAvgGbps   float64 `json:"bw_average_gbps,omitempty"`
	MsgRateMpps float64 `json:"msg_rate_mpps,omitempty"`
	TMinUs      float64 `json:"t_min_us,omitempty"`
	TMaxUs      float64 `json:"t_max_us,omitempty"`
	TTypicalUs  float64 `json:"t_typical_us,omitempty"`
	TAvgUs      float64 `json:"t_avg_us,omitempty"`
	TStdevUs    float64 `json:"t_stdev_us,omitempty"`
	P99Us       float64 `json:"p99_us,omitempty"`
	P999Us      float64 `json:"p99_9_us,omitempty"`
}

// Ends is what perftest prints of a test's connection before its figures:
// each end's connection id, first PSN and DSN (what verbs calls the QPN
// and PSN), the key of the region each end uses in the test, and the
// packet size the handshake settled. A RemoteRKey of 0 is a key the test
// never tells this end: the client's, at the server of a bandwidth test.
type Ends struct {
	Params                endpoint.ConnParams
	LocalRKey, RemoteRKey uint64
}

// Side is one end's connection and what it registers with.
type Side struct {
	QP         *endpoint.QP
	PD         *endpoint.PD
	Send, Recv *endpoint.CQ
}

// NewSide allocates a protection domain of dev and completion queues for
// one side. The queues hold 4,096 completions, the deepest a request may
// keep in flight.
func NewSide(dev *endpoint.Device) (Side, error) {
	pd, err := dev.AllocPD()
	if err != nil {
		return Side{}, err
	}
	return Side{PD: pd, Send: dev.CreateCQ(4096), Recv: dev.CreateCQ(4096)}, nil
}

const (
	control = 0 // the stream of the request, the answer and the end
	data    = 1 // the stream of the test
)

// Validate checks a request.
func (r Request) Validate() error {
	if !slices.Contains(Tests, r.Test) {
		return fmt.Errorf("perftest: unknown test %q (want one of %v)", r.Test, Tests)
	}
	if len(r.Sizes) == 0 || r.Iters < 1 || r.Iters > MaxIters || r.Depth < 1 || r.Depth > 4096 {
		return fmt.Errorf("perftest: %d sizes, %d iterations, depth %d: want sizes, 1 to 10,000,000 iterations, depth 1 to 4,096", len(r.Sizes), r.Iters, r.Depth)
	}
	for _, n := range r.Sizes {
		if n < 1 || n > MaxSize {
			return fmt.Errorf("perftest: size %d: want 1 to %d bytes", n, MaxSize)
		}
	}
	return nil
}

// maxOf is the largest size.
func maxOf(sizes []int) int { return slices.Max(sizes) }

// ErrNoRequest is what Serve returns, with the cause, when the connection
// ends before the client's request arrives: a client that connected and
// left, or died. A server may take its next client.
var ErrNoRequest = errors.New("perftest: the connection ended before the client's request")

// exchange SENDs msg on the control stream and waits for the peer's
// message. The receive is posted before the SEND, so that the answer
// always finds one.
func exchange(ctx context.Context, s Side, msg any, into any) (err error) {
	in, err := s.PD.RegisterMR(make([]byte, 4096), endpoint.LocalWrite)
	if err != nil {
		return err
	}
	defer func() { release(s, in, err) }()
	if err := s.QP.PostRecv(1<<62, control, in.SGE(0, 4096)); err != nil {
		in.Deregister()
		return err
	}
	if msg != nil {
		if err := send(ctx, s, msg); err != nil {
			return err
		}
	}
	return receive(ctx, s, in, into)
}

// send SENDs msg on the control stream, JSON-encoded, or as it is when it
// is bytes already.
func send(ctx context.Context, s Side, msg any) (err error) {
	b, raw := msg.([]byte)
	if !raw {
		b, _ = json.Marshal(msg)
	}
	out, err := s.PD.RegisterMR(b, endpoint.LocalWrite)
	if err != nil {
		return err
	}
	defer func() { release(s, out, err) }()
	if err := s.QP.PostSend(1<<62, control, out.SGE(0, uint32(len(b)))); err != nil {
		out.Deregister()
		return err
	}
	return waitOne(ctx, s.Send, 1<<62)
}

// release deregisters a control message's region once nothing can use it
// any more: its request completed, or the connection ended and flushed
// it. A server that outlives its clients keeps none of their regions. A
// request still posted when the wait failed otherwise keeps its region.
func release(s Side, mr *endpoint.MR, err error) {
	if st, _ := s.QP.State(); err == nil || st == endpoint.Closed {
		mr.Deregister()
	}
}

func receive(ctx context.Context, s Side, in *endpoint.MR, into any) error {
	wc := make([]endpoint.Completion, 1)
	for {
		if _, err := s.Recv.Wait(ctx, wc); err != nil {
			return err
		}
		if wc[0].Status != endpoint.StatusOK {
			return fmt.Errorf("perftest: control message: %v: %v", wc[0].Status, wc[0].Err)
		}
		if wc[0].ID == 1<<62 {
			break
		}
	}
	if into == nil {
		return nil
	}
	if raw, ok := into.(*[]byte); ok {
		*raw = bytes.Clone(in.Bytes()[:wc[0].Bytes])
		return nil
	}
	if err := json.Unmarshal(in.Bytes()[:wc[0].Bytes], into); err != nil {
		return fmt.Errorf("perftest: a control message that is not JSON: %w", err)
	}
	return nil
}

// waitOne waits for the completion id on cq. Any other is an error.
func waitOne(ctx context.Context, cq *endpoint.CQ, id uint64) error {
	wc := make([]endpoint.Completion, 1)
	if _, err := cq.Wait(ctx, wc); err != nil {
		return err
	}
	if wc[0].Status != endpoint.StatusOK || wc[0].ID != id {
		return fmt.Errorf("perftest: completion %+v, want %d", wc[0], id)
	}
	return nil
}

// Serve answers one client's test on s and returns when the client ends it.
// A connection that ends before the request arrives returns ErrNoRequest.
// A request that is not JSON, not valid, or for another test than test
// (any, when it is "") is refused in the response (docs/apps.md). started,
// when not nil, is called once the request is answered.
func Serve(ctx context.Context, s Side, test string, started func(Request, Ends)) (Request, error) {
	var req Request
	var raw []byte
	if err := exchange(ctx, s, nil, &raw); err != nil {
		if st, _ := s.QP.State(); st == endpoint.Closed && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", ErrNoRequest, err)
		}
		return req, err
	}
	err := json.Unmarshal(raw, &req)
	switch {
	case err != nil:
		err = fmt.Errorf("perftest: a request that is not JSON: %w", err)
	case test != "" && req.Test != test:
		err = fmt.Errorf("perftest: this server serves %s, not %s", test, req.Test)
	default:
		err = req.Validate()
	}
	if err != nil {
		send(ctx, s, Response{Error: err.Error()})
		return req, err
	}
	size := maxOf(req.Sizes)
	// The region is this client's alone: another client of the same
	// listener cannot reach it with its key (docs/spec.md section 5.1).
	region, err := s.QP.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite|endpoint.RemoteRead)
	if err != nil {
		return req, err
	}
	// The client's end comes on the control stream, so its receive goes
	// before the answer.
	end, err := s.PD.RegisterMR(make([]byte, 4096), endpoint.LocalWrite)
	if err != nil {
		return req, err
	}
	if err := s.QP.PostRecv(1<<62, control, end.SGE(0, 4096)); err != nil {
		return req, err
	}
	switch req.Test {
	case SendBW:
		for i := 0; i < req.Depth; i++ {
			if err := s.QP.PostRecv(uint64(i), data, region.SGE(0, uint32(size))); err != nil {
				return req, err
			}
		}
	case WriteLat:
		if err := s.QP.PostRecv(0, data); err != nil {
			return req, err
		}
	}
	if err := send(ctx, s, Response{RKey: region.RKey(), Len: size}); err != nil {
		return req, err
	}
	if started != nil {
		started(req, Ends{Params: s.QP.Params(), LocalRKey: region.RKey(), RemoteRKey: req.RKey})
	}
	wc := make([]endpoint.Completion, 64)
	for {
		k, err := s.Recv.Wait(ctx, wc)
		if err != nil {
			return req, err
		}
		for _, c := range wc[:k] {
			if c.Status != endpoint.StatusOK {
				return req, fmt.Errorf("perftest: receive: %v: %v", c.Status, c.Err)
			}
			switch {
			case c.Stream == control:
				// The end, answered. The client closes once it has the
				// answer, and its CLOSE may overtake the answer's ACK:
				// the answer's send then ends flushed by a normal close,
				// and the test still succeeded.
				if err := send(ctx, s, Response{RKey: region.RKey(), Len: size}); err != nil {
					if !s.QP.ClosedNormally() {
						return req, err
					}
				}
				return req, nil
			case req.Test == SendBW:
				if err := s.QP.PostRecv(c.ID, data, region.SGE(0, uint32(size))); err != nil {
					return req, err
				}
			case req.Test == WriteLat:
				// The pong is the same size back, a WRITE_IMM into the
				// client's region.
				if err := s.QP.PostRecv(0, data); err != nil {
					return req, err
				}
				if err := s.QP.Post(endpoint.SendWR{ID: 1, Op: endpoint.OpWriteImm, Stream: data, Unsignaled: true,
					SGL: []endpoint.SGE{region.SGE(0, c.Bytes)}, RKey: req.RKey, Imm: c.Imm}); err != nil {
					return req, err
				}
			}
		}
	}
}

// Run runs req against the server at the other end of s, one Result per
// size. started, when not nil, is called once the server has answered,
// and done after each size.
func Run(ctx context.Context, s Side, req Request, started func(Ends), done func(Result)) ([]Result, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	size := maxOf(req.Sizes)
	local, err := s.QP.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite)
	if err != nil {
		return nil, err
	}
	if req.Test == WriteLat {
		req.RKey = local.RKey()
	}
	var resp Response
	if err := exchange(ctx, s, req, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" {
		return nil, errors.New("perftest: the server refused: " + resp.Error)
	}
	if started != nil {
		started(Ends{Params: s.QP.Params(), LocalRKey: local.RKey(), RemoteRKey: resp.RKey})
	}
	var out []Result
	for _, n := range req.Sizes {
		var r Result
		if req.Test == WriteLat {
			r, err = latency(ctx, s, req, local, resp, n)
		} else {
			r, err = bandwidth(ctx, s, req, local, resp, n)
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
		if done != nil {
			done(r)
		}
	}
	// The server answers the end and leaves.
	var bye Response
	if err := exchange(ctx, s, Request{Test: req.Test}, &bye); err != nil {
		return out, err
	}
	return out, nil
}

// bandwidth keeps Depth messages of n bytes in flight for Iters
// completions.
func bandwidth(ctx context.Context, s Side, req Request, local *endpoint.MR, resp Response, n int) (Result, error) {
	r := Result{Bytes: n, Iterations: req.Iters}
	op := map[string]endpoint.Opcode{WriteBW: endpoint.OpWrite, SendBW: endpoint.OpSend, ReadBW: endpoint.OpRead}[req.Test]
	post := func(i int) error {
		return s.QP.Post(endpoint.SendWR{ID: uint64(i), Op: op, Stream: data, SGL: []endpoint.SGE{local.SGE(0, uint32(n))},
			RKey: resp.RKey})
	}
	posted, completed := 0, 0
	began := time.Now()
	marks := []mark{{began, 0}}
	// Each wait takes every completion there is, so that a mark counts
	// what had completed by its time, not a backlog cut short.
	wc := make([]endpoint.Completion, max(64, req.Depth))
	for completed < posted || req.until(began, posted) {
		for req.until(began, posted) && posted-completed < req.Depth {
			if err := post(posted); err != nil {
				return r, err
			}
			posted++
		}
		k, err := s.Send.Wait(ctx, wc)
		if err != nil {
			return r, err
		}
		for _, c := range wc[:k] {
			if c.Status != endpoint.StatusOK {
				return r, fmt.Errorf("perftest: %s of %d bytes: %v: %v", req.Test, n, c.Status, c.Err)
			}
			completed++
		}
		marks = addMark(marks, mark{time.Now(), completed})
	}
	took := time.Since(began)
	r.Iterations = completed
	r.BWAvgGbps = float64(n) * float64(completed) * 8 / took.Seconds() / 1e9
	r.MsgRateMpps = float64(completed) / took.Seconds() / 1e6
	r.BWPeakGbps = peakGbps(marks, n, max(1, completed/10))
	r.BWPeakGbps = math.Max(r.BWPeakGbps, r.BWAvgGbps)
	return r, nil
}

// mark is how many operations had completed by a time.
type mark struct {
	at   time.Time
	done int
}

// addMark adds m to marks, or moves the last mark to m where the one
// before it is less than a spacing older: a hundredth of MinPeakWindow, or
// a thousandth of the time since the first mark if that is longer. The
// peak spans at least MinPeakWindow and a tenth of the operations, so
// marks closer than that say nothing more, and a size that runs for
// seconds (-D) would otherwise keep one for every wait.
func addMark(marks []mark, m mark) []mark {
	n := len(marks)
	spacing := max(MinPeakWindow/100, m.at.Sub(marks[0].at)/1000)
	if n > 1 && m.at.Sub(marks[n-2].at) < spacing {
		marks[n-1] = m
		return marks
	}
	return append(marks, m)
}

// MinPeakWindow is the shortest span the peak bandwidth is taken over.
// Completions reach the application in batches, and over a span of a
// batch or two their rate says nothing of the network's.
const MinPeakWindow = time.Millisecond

// peakGbps is the peak bandwidth of n-byte operations: the best rate over
// a span between two marks that holds at least window operations and
// lasts at least MinPeakWindow, or none when no span does.
func peakGbps(marks []mark, n, window int) float64 {
	var best float64
	i := 0
	for j := 1; j < len(marks); j++ {
		long := func(k int) bool {
			return marks[j].done-marks[k].done >= window && marks[j].at.Sub(marks[k].at) >= MinPeakWindow
		}
		for i+1 < j && long(i+1) {
			i++ // the shortest span that ends at j and is long enough
		}
		if long(i) {
			best = math.Max(best, float64(n)*float64(marks[j].done-marks[i].done)*8/marks[j].at.Sub(marks[i].at).Seconds()/1e9)
		}
	}
	return best
}

// latency ping-pongs WRITE_IMMs of n bytes Iters times, one at a time.
func latency(ctx context.Context, s Side, req Request, local *endpoint.MR, resp Response, n int) (Result, error) {
	r := Result{Bytes: n}
	var samples []float64
	wc := make([]endpoint.Completion, 1)
	start := time.Now()
	for i := 0; req.until(start, i); i++ {
		if err := s.QP.PostRecv(uint64(i), data); err != nil {
			return r, err
		}
		began := time.Now()
		if err := s.QP.Post(endpoint.SendWR{ID: uint64(i), Op: endpoint.OpWriteImm, Stream: data, Unsignaled: true,
			SGL: []endpoint.SGE{local.SGE(0, uint32(n))}, RKey: resp.RKey, Imm: uint32(i)}); err != nil {
			return r, err
		}
		if _, err := s.Recv.Wait(ctx, wc); err != nil {
			return r, err
		}
		rtt := time.Since(began)
		if wc[0].Status != endpoint.StatusOK || wc[0].Imm != uint32(i) {
			return r, fmt.Errorf("perftest: write_lat of %d bytes: pong %+v", n, wc[0])
		}
		samples = append(samples, float64(rtt.Nanoseconds())/2/1e3)
	}
	r.Iterations = len(samples)
	slices.Sort(samples)
	q := func(p float64) float64 { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	var sum, sq float64
	for _, v := range samples {
		sum += v
	}
	r.TAvgUs = sum / float64(len(samples))
	for _, v := range samples {
		sq += (v - r.TAvgUs) * (v - r.TAvgUs)
	}
	r.TMinUs, r.TMaxUs, r.TTypicalUs = samples[0], samples[len(samples)-1], q(0.5)
	r.TStdevUs = math.Sqrt(sq / float64(len(samples)))
	r.P99Us, r.P999Us = q(0.99), q(0.999)
	return r, nil
}
