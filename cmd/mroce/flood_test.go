package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mroce/mroce/app/xferstats"
	"github.com/mroce/mroce/proto"
)

// connectPacket is a well-formed CONNECT, as mroce send's would be but for
// its connection id, asking for the answer at replyPort.
func connectPacket(id uint32, replyPort uint16) []byte {
	var pkt proto.Packet
	if err := proto.Build(&pkt, make([]byte, 512), proto.TypeConnect, 0, 0); err != nil {
		panic(err)
	}
	h := pkt.Handshake()
	h.SetSrcConnID(id)
	h.SetInitialPSN(rand.Uint32())
	h.SetInitialDSN(rand.Uint32())
	h.SetDSNWindow(4096)
	h.SetMaxPacket(1472)
	h.SetPaths(8)
	h.SetStreams(2)
	h.SetReplyPort(replyPort)
	h.SetMaxReadsOut(16)
	h.SetMaxReadsIn(16)
	h.SetInboundCapacity(proto.CapacityUnknown)
	return bytes.Clone(pkt.Seal())
}

// flooder sends CONNECTs at a steady rate from several UDP sockets, each
// with a fresh random connection id, and counts what comes back. It never
// sends the third message, so no handshake completes.
type flooder struct {
	socks            []*net.UDPConn
	sent, failed     atomic.Int64
	accepts, refused atomic.Int64 // ACCEPTs, and CLOSEs, of the target
	retries          atomic.Int64 // RETRYs of the target, which made no state
	wg               sync.WaitGroup
}

// flood sends rate CONNECTs a second to target from socks sockets on
// local for d. stop ends it early, closes the sockets and waits for the
// flooder's goroutines; it may be called again.
func flood(t *testing.T, local netip.Addr, target netip.AddrPort, rate, socks int, d time.Duration) (f *flooder, stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	f = &flooder{}
	for i := 0; i < socks; i++ {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadBuffer(4 << 20)
		f.socks = append(f.socks, c)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			buf := make([]byte, 2048)
			for {
				k, err := c.Read(buf)
				if err != nil {
					return
				}
				var pkt proto.Packet
				if pkt.Decode(buf[:k]) != nil {
					continue
				}
				switch pkt.Type() {
				case proto.TypeAccept:
					f.accepts.Add(1)
				case proto.TypeClose:
					f.refused.Add(1)
				case proto.TypeRetry:
					f.retries.Add(1)
				}
			}
		}()
	}
	dst := net.UDPAddrFromAddrPort(target)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		start := time.Now()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for due := int64(time.Since(start).Seconds() * float64(rate)); f.sent.Load()+f.failed.Load() < due; i++ {
				c := f.socks[i%len(f.socks)]
				id := rand.Uint32() | 1
				if _, err := c.WriteToUDP(connectPacket(id, uint16(c.LocalAddr().(*net.UDPAddr).Port)), dst); err != nil {
					f.failed.Add(1)
					if f.failed.Load() < 5 {
						t.Logf("flood: %v", err)
					}
				} else {
					f.sent.Add(1)
				}
			}
		}
	}()
	var once sync.Once
	return f, func() {
		once.Do(func() {
			cancel()
			for _, c := range f.socks {
				c.Close()
			}
			f.wg.Wait()
		})
	}
}

// heapInUse scrapes go_memstats_heap_inuse_bytes from a metrics server.
func heapInUse(addr string) (float64, error) {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no go_memstats_heap_inuse_bytes at %s", addr)
}

// freeTCP is a TCP address on loopback free right now.
func freeTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

const mib = 1 << 20

// 4,000 CONNECTs a second for 30 s, from four sockets, against mroce recv
// while it receives a transfer from mroce send, both the built binary over
// loopback. The CONNECTs are well formed and never completed, as a flood
// from forged sources would be. The transfer completes and verifies. The
// receiver's heap, scraped from its --metrics, stays within floodBound of
// where it was before the flood, and returns within settleBound of it
// once the flood ends.
//
// recv runs with GOGC=2, so that a collection follows every 2% of heap
// growth, under a MiB over its live heap of some 20 MiB. The heap in use
// then follows the live heap, and the figures show what the flood keeps
// rather than when the collector last ran. With the default of 100 the
// heap in use climbs towards twice the live heap, flood or none, before
// anything is collected.
func TestLargeConnectFloodDuringATransfer(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s flood against the built binary: with the large tests")
	}
	const (
		rate     = 4000
		floodFor = 30 * time.Second
		// The transfer runs at 0.2 Gb/s, the rate the receiver's hints
		// allow, for some 50 s: a second to start, 3 s measured before the
		// flood, the flood, and 9 s for the heap to settle after it. The
		// low rate leaves the two cores to the flood.
		gbps    = "0.2"
		sizeMiB = 1100
		// floodBound is what the flood may add to the heap. The engine
		// keeps at most RetryAt (512) handshakes from sources that never
		// return a RETRY's token half-open, each some 10 KiB with its
		// endpoint QP, 5 MiB in all, and at most MaxAccepting (1,024);
		// the ids of those that timed out stay quarantined for 2 MPL, a
		// few hundred, under a MiB. The rest is the collector's 2% and the
		// flood's own garbage between two collections.
		floodBound = 32 * mib
		// settleBound is what may stay once the flood is over: the tables
		// that grew to hold the handshakes keep their size, about a MiB,
		// and the collector's 2% of the heap.
		settleBound = 6 * mib
	)
	bin := buildBinary(t)
	recvAddr, sendAddr, floodAddr := "127.0.0.131", "127.0.0.132", netip.MustParseAddr("127.0.0.133")
	port := freePort(t, recvAddr)
	metrics := freeTCP(t)
	var recvOut, recvErr bytes.Buffer
	recv := exec.Command(bin, "recv", "--listen", recvAddr, "--port", fmt.Sprint(port), "--metrics", metrics,
		"--inbound-gbps", gbps, "--interval", "0", "--json")
	recv.Stdout, recv.Stderr = &recvOut, &recvErr
	recv.Env = append(os.Environ(), "GOGC=2")
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	defer recv.Process.Kill()
	for try := 0; ; try++ {
		if _, err := heapInUse(metrics); err == nil {
			break
		} else if try == 100 {
			t.Fatalf("recv serves no metrics: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var sendOut, sendErr bytes.Buffer
	send := exec.Command(bin, "send", "--to", recvAddr, "--local", sendAddr, "--port", fmt.Sprint(port),
		"--size-mib", fmt.Sprint(sizeMiB), "--interval", "0", "--json")
	send.Stdout, send.Stderr = &sendOut, &sendErr
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	defer send.Process.Kill()
	// sample scrapes the heap every 250 ms for d, or until done says so of
	// a sample, and returns the least and the most seen.
	sample := func(d time.Duration, done func(float64) bool) (lo, hi float64) {
		end := time.Now().Add(d)
		for n := 0; time.Now().Before(end); n++ {
			v, err := heapInUse(metrics)
			if err != nil {
				t.Fatalf("scraping recv: %v\n%s%s", err, recvOut.String(), recvErr.String())
			}
			if n == 0 || v < lo {
				lo = v
			}
			hi = max(hi, v)
			if done(v) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		return lo, hi
	}
	never := func(float64) bool { return false }
	time.Sleep(time.Second) // the transfer under way
	base, _ := sample(3*time.Second, never)
	f, stop := flood(t, floodAddr, netip.AddrPortFrom(netip.MustParseAddr(recvAddr), uint16(port)), rate, 4, floodFor)
	defer stop()
	_, peak := sample(floodFor, never)
	ended := time.Now()
	// The least of the 8 s after the flood, while the transfer still runs:
	// its half-open handshakes time out within the 1 s connect timeout,
	// and their quarantined ids within 2 MPL.
	after, _ := sample(8*time.Second, never)
	settled := time.Since(ended)
	stop()
	t.Logf("recv's heap in use: %.1f MiB before the flood, at most %.1f MiB during it (+%.1f), at least %.1f MiB in the %.1f s after it (+%.1f)",
		base/mib, peak/mib, (peak-base)/mib, after/mib, settled.Seconds(), (after-base)/mib)
	t.Logf("the flood: %d CONNECTs in %v (%d not sent), answered by %d ACCEPTs, %d RETRYs and %d CLOSEs",
		f.sent.Load(), floodFor, f.failed.Load(), f.accepts.Load(), f.retries.Load(), f.refused.Load())
	if err := send.Wait(); err != nil {
		t.Fatalf("send: %v\n%s%s", err, sendOut.String(), sendErr.String())
	}
	if err := recv.Wait(); err != nil {
		t.Fatalf("recv: %v\n%s%s", err, recvOut.String(), recvErr.String())
	}
	var rs, ss xferstats.Report
	if err := json.Unmarshal(recvOut.Bytes(), &rs); err != nil {
		t.Fatalf("recv's report: %v\n%s", err, recvOut.String())
	}
	if err := json.Unmarshal(sendOut.Bytes(), &ss); err != nil {
		t.Fatalf("send's report: %v\n%s", err, sendOut.String())
	}
	if rs.End == nil || ss.End == nil || !rs.End.Verified || rs.End.SHA256 != ss.End.SHA256 || rs.End.Bytes != sizeMiB*mib {
		t.Fatalf("the transfer: recv %+v, send %+v", rs.End, ss.End)
	}
	t.Logf("the transfer: %d MiB in %.1f s at %.2f Gb/s, verified", sizeMiB, rs.End.Seconds, rs.End.Gbps)
	if rs.End.Seconds < (floodFor + 4*time.Second).Seconds() {
		t.Errorf("the transfer took %.1f s: it did not outlast the flood", rs.End.Seconds)
	}
	if want := int64(0.95 * rate * floodFor.Seconds()); f.sent.Load() < want || f.accepts.Load() == 0 || f.retries.Load() == 0 {
		t.Errorf("the flood fell short: %d CONNECTs sent, want %d; %d ACCEPTs and %d RETRYs, want both",
			f.sent.Load(), want, f.accepts.Load(), f.retries.Load())
	}
	if peak > base+floodBound {
		t.Errorf("the heap grew by %.1f MiB during the flood, more than %d MiB", (peak-base)/mib, floodBound/mib)
	}
	if after > base+settleBound {
		t.Errorf("the heap was at least %.1f MiB over its level before the flood in the 8 s after it, more than %d MiB", (after-base)/mib, settleBound/mib)
	}
}
