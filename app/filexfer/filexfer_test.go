package filexfer

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mroce/mroce/app/xfertest"
)

// pair connects two hosts on loopback and returns the client's end and
// the server's.
func pair(t *testing.T) (Conn, Conn) {
	t.Helper()
	c, s := xfertest.Loopback(t, "127.0.0.71", "127.0.0.72")
	return Conn(c), Conn(s)
}

// run sends what r yields under the claim of size bytes and receives it.
// It returns both sides' results and errors and what was written.
func run(t *testing.T, r io.Reader, size int64, chunk int) (Result, error, Result, error, []byte) {
	t.Helper()
	snd, rcv := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	var rres Result
	var rerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rres, rerr = ReceiveFile(ctx, rcv, func(Header) (io.Writer, error) { return &out, nil }, Options{Depth: 8})
	}()
	var last Progress
	sres, serr := SendFile(ctx, snd, r, "data.bin", size, Options{Chunk: chunk, Depth: 8, Progress: func(p Progress) { last = p }})
	wg.Wait()
	if serr == nil && last.Bytes != size {
		t.Errorf("last progress %+v, want %d bytes", last, size)
	}
	return sres, serr, rres, rerr, out.Bytes()
}

// A file's bytes arrive whole and in order, in chunks over many paths, and
// both sides agree on its SHA-256, which is the data's.
func TestSendFileArrivesVerified(t *testing.T) {
	for _, size := range []int{0, 1, 300 << 10, 5<<20 + 7} {
		data := make([]byte, size)
		rand.NewChaCha8([32]byte{byte(size)}).Read(data)
		sres, serr, rres, rerr, got := run(t, bytes.NewReader(data), int64(size), 256<<10)
		if serr != nil || rerr != nil {
			t.Fatalf("%d bytes: sender %v, receiver %v", size, serr, rerr)
		}
		want := sha256.Sum256(data)
		if !bytes.Equal(got, data) || sres.SHA256 != hex.EncodeToString(want[:]) || rres.SHA256 != sres.SHA256 {
			t.Fatalf("%d bytes: got %d bytes, SHA-256 %s / %s", size, len(got), sres.SHA256, rres.SHA256)
		}
		if rres.Header.Name != "data.bin" || rres.Header.Size != int64(size) {
			t.Fatalf("header %+v", rres.Header)
		}
	}
}

// A reader that ends early is the sender's error. The sender aborts with
// CodeRead, and the receiver stops with that reason rather than waiting.
func TestShortReaderFailsTheSender(t *testing.T) {
	_, serr, _, rerr, _ := run(t, strings.NewReader("only this"), 1<<20, 64<<10)
	if serr == nil || !strings.Contains(serr.Error(), "reading the data") {
		t.Fatalf("sender: %v", serr)
	}
	if !isPeer(rerr, "sender", CodeRead) {
		t.Fatalf("receiver: %v", rerr)
	}
}

// isPeer reports whether err is the peer side's abort with code.
func isPeer(err error, side string, code Code) bool {
	var pe *PeerError
	return errors.As(err, &pe) && pe.Side == side && pe.Code == code
}

// failingWriter takes limit bytes and then fails as a full disk does.
type failingWriter struct{ limit int }

func (w *failingWriter) Write(b []byte) (int, error) {
	if len(b) > w.limit {
		return 0, syscall.ENOSPC
	}
	w.limit -= len(b)
	return len(b), nil
}

// Each way one side gives up reaches the other as its reason: a full
// disk and a refusal with the receiver's words, an interrupt of either
// side, a peer that stalls past the patience of the other. Each ends the
// other side with a PeerError naming the side and its code, well within
// the connection's no-progress timeout, which could not name it.
func TestEachSideTellsTheOtherWhyItGaveUp(t *testing.T) {
	const size = 64 << 20
	data := make([]byte, size)
	defer noGoroutinesLeft(t, runtime.NumGoroutine())
	for _, c := range []struct {
		name         string
		failing      string // the side that gives up
		code         Code
		reason       string // in the receiver's verdict
		open         func(Header) (io.Writer, error)
		sendCtx      func(context.Context) context.Context
		recvCtx      func(context.Context) context.Context
		stallReader  bool
		recvPatience time.Duration
		size         int64 // 0: the whole 64 MiB
	}{
		{name: "disk full", failing: "receiver", code: CodeWrite, reason: "no space left on device",
			open: func(Header) (io.Writer, error) { return &failingWriter{limit: 3 << 20}, nil }},
		{name: "refused", failing: "receiver", code: CodeRefused, reason: "the output file exists",
			open: func(Header) (io.Writer, error) { return nil, ErrExists }},
		// All of it sent before the refusal, which the sender reads as its
		// verdict.
		{name: "refused, small", failing: "receiver", code: CodeRefused, reason: "the output file exists", size: 1000,
			open: func(Header) (io.Writer, error) { return nil, ErrExists }},
		{name: "disk full, small", failing: "receiver", code: CodeWrite, reason: "no space left on device", size: 100 << 10,
			open: func(Header) (io.Writer, error) { return &failingWriter{limit: 10 << 10}, nil }},
		{name: "sender interrupted", failing: "sender", code: CodeInterrupted, sendCtx: cancelAfter(20 * time.Millisecond)},
		{name: "receiver interrupted", failing: "receiver", code: CodeInterrupted, recvCtx: cancelAfter(20 * time.Millisecond)},
		{name: "sender stalls", failing: "receiver", code: CodeTimeout, stallReader: true, recvPatience: 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			snd, rcv := pair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sctx, rctx := ctx, ctx
			if c.sendCtx != nil {
				sctx = c.sendCtx(ctx)
			}
			if c.recvCtx != nil {
				rctx = c.recvCtx(ctx)
			}
			open := c.open
			if open == nil {
				open = func(Header) (io.Writer, error) { return io.Discard, nil }
			}
			n := cmp.Or(c.size, size)
			var r io.Reader = bytes.NewReader(data[:n])
			stalled := make(chan struct{})
			if c.stallReader {
				r = io.MultiReader(io.LimitReader(r, 1<<20), &stallingReader{until: stalled}, r)
			}
			var rerr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, rerr = ReceiveFile(rctx, rcv, open, Options{Depth: 4, Patience: c.recvPatience})
				close(stalled)
			}()
			_, serr := SendFile(sctx, snd, r, "data.bin", n, Options{Chunk: 64 << 10, Depth: 4})
			<-done
			failer, other, otherSide := rerr, serr, "receiver"
			if c.failing == "sender" {
				failer, other, otherSide = serr, rerr, "sender"
			}
			if failer == nil {
				t.Fatalf("the %s did not fail", c.failing)
			}
			if !isPeer(other, c.failing, c.code) {
				t.Fatalf("the %s ended with %v, want the %s's %v", otherSide, other, c.failing, c.code)
			}
			var pe *PeerError
			errors.As(other, &pe)
			if !strings.Contains(pe.Reason, c.reason) {
				t.Fatalf("the reason %q does not say %q", pe.Reason, c.reason)
			}
		})
	}
}

// noGoroutinesLeft fails unless the goroutines are back to before within
// a few seconds: every side that failed, and its host, has ended.
func noGoroutinesLeft(t *testing.T, before int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if runtime.NumGoroutine() <= before {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
}

// cancelAfter gives a context that is cancelled after d, as an interrupt
// cancels the command's.
func cancelAfter(d time.Duration) func(context.Context) context.Context {
	return func(ctx context.Context) context.Context {
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(d, cancel)
		return ctx
	}
}

// stallingReader blocks its first read until until is closed, and then
// has nothing.
type stallingReader struct{ until chan struct{} }

func (s *stallingReader) Read([]byte) (int, error) {
	<-s.until
	return 0, io.EOF
}

// The parsers refuse what is not a header, trailer or verdict.
func TestParsersRefuseGarbage(t *testing.T) {
	for _, b := range []string{"", "{", `{"size":-1,"chunk":1}`, `{"size":1,"chunk":0}`, `[1]`} {
		if _, err := parseHeader([]byte(b)); !errors.Is(err, ErrProtocol) {
			t.Errorf("header %q: %v", b, err)
		}
	}
	for _, b := range []string{"", `{"sha256":"00"}`, `{"sha256":"` + strings.Repeat("zz", 32) + `"}`} {
		if _, err := parseTrailer([]byte(b)); !errors.Is(err, ErrProtocol) {
			t.Errorf("trailer %q: %v", b, err)
		}
	}
	for _, b := range []string{"", `{"ok":true}`, `{"ok":false,"sha256":"12"}`} {
		if _, err := parseVerdict([]byte(b)); !errors.Is(err, ErrProtocol) {
			t.Errorf("verdict %q: %v", b, err)
		}
	}
	if h, err := parseHeader([]byte(`{"name":"x","size":5,"chunk":2}`)); err != nil || h.Size != 5 || h.Chunk != 2 {
		t.Errorf("a good header: %+v, %v", h, err)
	}
}

// FuzzParseControl gives any bytes to the parsers of the header, trailer
// and verdict. None may panic, and what they accept keeps the rules.
func FuzzParseControl(f *testing.F) {
	f.Add([]byte(`{"name":"a","size":10,"chunk":4}`))
	f.Add([]byte(`{"sha256":"` + strings.Repeat("ab", 32) + `"}`))
	f.Add([]byte(`{"ok":true,"sha256":"` + strings.Repeat("01", 32) + `"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := parseHeader(b); err == nil && (h.Size < 0 || h.Chunk <= 0) {
			t.Fatalf("header %+v", h)
		}
		if tr, err := parseTrailer(b); err == nil && !isSHA256(tr.SHA256) {
			t.Fatalf("trailer %+v", tr)
		}
		if v, err := parseVerdict(b); err == nil && v.OK && !isSHA256(v.SHA256) {
			t.Fatalf("verdict %+v", v)
		}
	})
}
