package filexfer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
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
		rres, rerr = ReceiveFile(ctx, rcv, 8, 1<<20, func(Header) (io.Writer, error) { return &out, nil }, nil)
	}()
	var last Progress
	sres, serr := SendFile(ctx, snd, r, "data.bin", size, chunk, 8, func(p Progress) { last = p })
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

// A reader that ends early is the sender's error. The sender closes the
// connection, and the receiver stops with an error rather than waiting.
func TestShortReaderFailsTheSender(t *testing.T) {
	_, serr, _, rerr, _ := run(t, strings.NewReader("only this"), 1<<20, 64<<10)
	if serr == nil || !strings.Contains(serr.Error(), "reading the data") {
		t.Fatalf("sender: %v", serr)
	}
	if rerr == nil {
		t.Fatal("the receiver saw no error")
	}
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
