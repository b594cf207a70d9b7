package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/relay"
)

// buildBinary builds the mroce binary once for the test.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mroce")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	return bin
}

// freePort is a UDP port free on addr right now.
func freePort(t *testing.T, addr string) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		p := 20000 + rand.IntN(20000)
		ok := true
		for i := 0; i <= 16 && ok; i++ { // the receive port and its source ports
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(addr), Port: p + i})
			if err != nil {
				ok = false
				continue
			}
			c.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free ports")
	return 0
}

// The built binary runs as a user runs it, recv in one process and send of
// a file in another, over loopback with two planes. The file arrives
// intact and both report success.
func TestLargeSendRecvBinaryEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.bin")
	data := make([]byte, 9<<20+123)
	rand.NewChaCha8([32]byte{1}).Read(data)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	os.Mkdir(outDir, 0o755)
	port := fmt.Sprint(freePort(t, "127.0.0.91"))
	recv := exec.Command(bin, "recv", "--listen", "127.0.0.91,127.0.0.92", "--port", port, "--out", outDir)
	var recvOut bytes.Buffer
	recv.Stdout, recv.Stderr = &recvOut, &recvOut
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	defer recv.Process.Kill()
	time.Sleep(300 * time.Millisecond) // until it listens
	capture := filepath.Join(dir, "send.pcap")
	send := exec.Command(bin, "send", "--to", "127.0.0.91", "--to", "127.0.0.92", "--port", port, "--pcap", capture, "--log-level", "info", in)
	sendOut, err := send.CombinedOutput()
	if err != nil {
		t.Fatalf("send: %v: %s", err, sendOut)
	}
	if err := recv.Wait(); err != nil {
		t.Fatalf("recv: %v: %s", err, recvOut.String())
	}
	got, err := os.ReadFile(filepath.Join(outDir, "in.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the file arrived wrong (%d bytes, %v)", len(got), err)
	}
	sum := sha256.Sum256(data)
	for name, out := range map[string]string{"send": string(sendOut), "recv": recvOut.String()} {
		if !strings.Contains(out, hex.EncodeToString(sum[:])) {
			t.Errorf("%s does not report the SHA-256:\n%s", name, out)
		}
	}
	if !strings.Contains(string(sendOut), "source port") || strings.Count(string(sendOut), "GOOD") < 8 {
		t.Errorf("send's per-path table is missing:\n%s", sendOut)
	}
	if !strings.Contains(string(sendOut), `level=INFO msg=connected`) {
		t.Errorf("send logged nothing at info:\n%s", sendOut)
	}
	// The capture holds the connection's packets, both ways, as mroce
	// decode reads them.
	r := runCLI(t, "", "decode", "--pcap", capture, "--port", port)
	if r.code != 0 || !strings.Contains(r.stdout, "CONNECT") || !strings.Contains(r.stdout, "SEND") || !strings.Contains(r.stdout, "ACK") {
		t.Errorf("decode of the capture: exit %d, %.300s, %s", r.code, r.stdout, r.stderr)
	}
}

// --json prints one document with the schema's fields on both sides. The
// receiver runs without its command line, because two command lines at
// once in one process race inside the flag library.
func TestSendRecvJSON(t *testing.T) {
	port := freePort(t, "127.0.0.93")
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		o := transferOptions{port: uint16(port), paths: 8, sourcePorts: 16, chunk: 1 << 20, json: true,
			interval: 10 * time.Millisecond, noProgress: 30 * time.Second}
		err := runRecv(context.Background(), &out, &errOut, []netip.Addr{netip.MustParseAddr("127.0.0.93")}, "", outputOptions{}, o)
		code := 0
		if err != nil {
			code, errOut = 1, *bytes.NewBufferString(err.Error())
		}
		done <- result{out.String(), errOut.String(), code}
	}()
	time.Sleep(200 * time.Millisecond)
	s := runCLI(t, "", "send", "--to", "127.0.0.93", "--port", fmt.Sprint(port), "--size-mib", "4", "--json", "--interval", "10ms", "--paths", "4")
	r := <-done
	for name, res := range map[string]result{"send": s, "recv": r} {
		if res.code != 0 {
			t.Fatalf("%s: exit %d: %s", name, res.code, res.stderr)
		}
		var doc struct {
			Role      string `json:"role"`
			Size      int64  `json:"size"`
			Intervals []struct {
				Start, End, Gbps float64
				Bytes            int64
			} `json:"intervals"`
			End *struct {
				Bytes    int64   `json:"bytes"`
				Seconds  float64 `json:"seconds"`
				Gbps     float64 `json:"gbps"`
				SHA256   string  `json:"sha256"`
				Verified bool    `json:"verified"`
			} `json:"end"`
			Paths []struct {
				Path       int     `json:"path"`
				SourcePort uint16  `json:"source_port"`
				State      string  `json:"state"`
				Share      float64 `json:"share"`
			} `json:"paths_detail"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", name, err, res.stdout)
		}
		if doc.End == nil || !doc.End.Verified || doc.End.Bytes != 4<<20 || len(doc.End.SHA256) != 64 || doc.Size != 4<<20 || len(doc.Intervals) == 0 {
			t.Errorf("%s: %+v", name, doc)
		}
		var sum int64
		for _, iv := range doc.Intervals {
			sum += iv.Bytes
		}
		if sum != 4<<20 {
			t.Errorf("%s: intervals add up to %d bytes", name, sum)
		}
		if name == "send" {
			var share float64
			for _, p := range doc.Paths {
				share += p.Share
			}
			if len(doc.Paths) != 4 || share < 0.999 || share > 1.001 || doc.Paths[0].SourcePort == 0 {
				t.Errorf("send's paths: %+v", doc.Paths)
			}
		}
	}
}

// A sender that asks for more paths or larger packets than the receiver
// allows is told so, and what the handshake settled on is what it
// reports.
func TestSendReportsWhatTheHandshakeSettled(t *testing.T) {
	port := freePort(t, "127.0.0.89")
	done := make(chan error, 1)
	go func() {
		o := transferOptions{port: uint16(port), paths: 2, sourcePorts: 16, mtu: 1500, chunk: 1 << 20,
			interval: time.Hour, noProgress: 30 * time.Second}
		done <- runRecv(context.Background(), io.Discard, io.Discard, []netip.Addr{netip.MustParseAddr("127.0.0.89")}, "", outputOptions{}, o)
	}()
	time.Sleep(200 * time.Millisecond)
	s := runCLI(t, "", "send", "--to", "127.0.0.89", "--port", fmt.Sprint(port), "--size-mib", "1", "--paths", "8", "--mtu", "4000")
	if err := <-done; err != nil || s.code != 0 {
		t.Fatalf("recv: %v; send: exit %d: %s", err, s.code, s.stderr)
	}
	for _, want := range []string{"over 2 paths", "packets of up to 1500 bytes",
		"note: 2 of the 8 paths asked for: the receiver's --paths allows no more",
		"note: packets of up to 1500 bytes, not the 4000 of --mtu"} {
		if !strings.Contains(s.stdout, want) {
			t.Errorf("send does not say %q:\n%s", want, s.stdout)
		}
	}
}

// Bad input gets a clear message and the right exit status, 2 for usage
// errors and 1 for runtime errors.
func TestSendRecvErrors(t *testing.T) {
	busy, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 94)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := fmt.Sprint(busy.LocalAddr().(*net.UDPAddr).Port)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"send"}, 2, "send: --to: the receiver's address is needed"},
		{[]string{"send", "--to", "not-an-address"}, 2, `"not-an-address" is neither an IP address nor a host name that resolves`},
		{[]string{"send", "--to", "127.0.0.1", "/no/such/file"}, 2, "no such file or directory"},
		{[]string{"send", "--to", "127.0.0.1", "--paths", "0"}, 2, "--paths must be 1 to 256"},
		{[]string{"send", "--to", "127.0.0.1", "--local", "127.0.0.1,127.0.0.2"}, 2, "2 --local addresses for 1 --to addresses"},
		{[]string{"recv", "--listen", "127.0.0.94", "--port", busyPort}, 1, "address already in use"},
		{[]string{"recv", "--mtu", "100"}, 2, "--mtu must be 0 or 256 to 9000"},
		{[]string{"send", "--to", "127.0.0.1", "--metrics", "300.0.0.1:1"}, 1, "send: metrics: listen tcp"},
		{[]string{"send", "--to", "127.0.0.1", "--log-level", "loud"}, 2, `--log-level "loud": want debug, info, warn or error`},
		{[]string{"recv", "--pcap", "/no/such/dir/x.pcap"}, 1, "recv: pcap: open /no/such/dir/x.pcap"},
		{[]string{"send", "--to", "127.0.0.95", "--port", "9", "--timeout", "300ms", "--size-mib", "1"}, 1, "no answer from [127.0.0.95] port 9 (is mroce recv running there?)"},
	}
	for _, c := range cases {
		r := runCLI(t, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
}

// --metrics serves Prometheus metrics while the transfer runs, and a
// scrape sees every path's counters with their labels.
func TestSendMetrics(t *testing.T) {
	port := freePort(t, "127.0.0.96")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recvMetrics := ln.Addr().String()
	ln.Close()
	recvDone := make(chan error, 1)
	go func() {
		o := transferOptions{port: uint16(port), paths: 4, sourcePorts: 8, chunk: 1 << 20, json: true, noProgress: 30 * time.Second,
			metrics: recvMetrics, metricsLinger: 2 * time.Second}
		recvDone <- runRecv(context.Background(), io.Discard, io.Discard, []netip.Addr{netip.MustParseAddr("127.0.0.96")}, "", outputOptions{}, o)
	}()
	time.Sleep(200 * time.Millisecond)
	sendDone := make(chan result, 1)
	go func() {
		sendDone <- runCLI(t, "", "send", "--to", "127.0.0.96", "--port", fmt.Sprint(port), "--paths", "4",
			"--size-mib", "256", "--json", "--metrics", metricsAddr)
	}()
	var scraped string
	deadline := time.Now().Add(30 * time.Second)
	for scraped == "" && time.Now().Before(deadline) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `mroce_path_packets_sent_total{conn="127.0.0.96:`+fmt.Sprint(port)+`",path="3"`) {
				scraped = string(b)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	s := <-sendDone
	// The receiver's endpoint outlives its transfer by --metrics-linger,
	// with what its connection received.
	var received string
	for received == "" && time.Now().Before(deadline) {
		resp, err := http.Get("http://" + recvMetrics + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, l := range strings.Split(string(b), "\n") {
				v, ok := strings.CutPrefix(l, `mroce_connection_received_bytes_total{conn="sender"} `)
				if f, err := strconv.ParseFloat(v, 64); ok && err == nil && f >= 256<<20 {
					received = string(b) // the data, and the control messages beside it
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-recvDone; err != nil || s.code != 0 {
		t.Fatalf("send exit %d %s; recv %v", s.code, s.stderr, err)
	}
	if received == "" {
		t.Fatal("no scrape of the receiver after the transfer showed its 256 MiB received")
	}
	if scraped == "" {
		t.Fatal("no scrape showed the connection's paths")
	}
	for _, name := range []string{"mroce_path_rtt_seconds", "mroce_path_state", "mroce_path_retransmits_total", "mroce_path_ce_marks_total", "go_goroutines"} {
		if !strings.Contains(scraped, name) {
			t.Errorf("the scrape lacks %s", name)
		}
	}
}

// A sender killed mid-transfer makes the receiver fail within its
// --timeout, through the connection's keep-alives, and leave nothing in
// its --out directory: the data goes to a temporary file that is renamed
// only once verified.
func TestLargeRecvOfAKilledSenderLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	outDir := t.TempDir()
	port := freePort(t, "127.0.0.94")
	done := make(chan error, 1)
	go func() {
		var out, errOut bytes.Buffer
		o := transferOptions{port: uint16(port), paths: 4, sourcePorts: 16, chunk: 1 << 20,
			interval: time.Hour, noProgress: 2 * time.Second}
		done <- runRecv(context.Background(), &out, &errOut, []netip.Addr{netip.MustParseAddr("127.0.0.94")}, outDir, outputOptions{}, o)
	}()
	time.Sleep(200 * time.Millisecond)
	send := exec.Command(bin, "send", "--to", "127.0.0.94", "--port", fmt.Sprint(port), "--size-mib", "100000", "--paths", "4")
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	send.Process.Kill()
	send.Wait()
	killed := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("recv succeeded though its sender was killed")
		}
		if waited := time.Since(killed); waited > 2*time.Second+time.Second {
			t.Fatalf("recv took %v to give up, with --timeout 2s", waited)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("recv still waiting 20 s after its sender was killed")
	}
	if entries, _ := os.ReadDir(outDir); len(entries) != 0 {
		t.Fatalf("recv left %d files in its --out directory: %v", len(entries), entries)
	}
}

// A packet too big for its path fails with the flag that fixes it named,
// and other errors pass unchanged.
func TestMTUAdviceNamesTheFlag(t *testing.T) {
	tooBig := fmt.Errorf("filexfer: a SEND failed: %w", &engine.PathMTUError{Size: 9000, MaxPacket: 9000})
	if err := mtuAdvice(tooBig); !strings.Contains(err.Error(), "--mtu below 9000") || !errors.Is(err, tooBig) {
		t.Errorf("advice: %v", err)
	}
	other := errors.New("other")
	if mtuAdvice(other) != other || mtuAdvice(nil) != nil {
		t.Error("advice given where no packet was too big")
	}
}

// send says what the path MTU search found only where a plane carries
// less than the handshake allowed, and whether the search is over.
func TestPathMTUNote(t *testing.T) {
	for _, c := range []struct {
		got  endpoint.ConnParams
		want string
	}{
		{endpoint.ConnParams{MaxPacket: 9000, PathMTU: []int{9000, 9000}, PathMTUDone: true}, ""},
		{endpoint.ConnParams{MaxPacket: 9000}, ""},
		{endpoint.ConnParams{MaxPacket: 9000, PathMTU: []int{8972, 1472}, PathMTUDone: true},
			"packets of up to 1472 bytes: the planes carry 8972, 1472 bytes, as the path MTU search found (--mtu caps it)"},
		{endpoint.ConnParams{MaxPacket: 9000, PathMTU: []int{1200, 9000}},
			"packets of up to 1200 bytes: the planes carry 1200, 9000 bytes, so far: the path MTU search goes on (--mtu caps it)"},
	} {
		if got := pathMTUNote(c.got); got != c.want {
			t.Errorf("%+v: %q, want %q", c.got, got, c.want)
		}
	}
}

// A plane's address may be given by host name: localhost is a loopback
// address, IPv4 first; a literal is taken as it is.
func TestHostNamesResolve(t *testing.T) {
	if a, err := resolveAddr("localhost"); err != nil || !a.IsLoopback() {
		t.Fatalf("localhost: %v, %v", a, err)
	}
	if a, err := resolveAddr("127.0.0.93"); err != nil || a != netip.MustParseAddr("127.0.0.93") {
		t.Fatalf("a literal: %v, %v", a, err)
	}
	if _, err := resolveAddr("::ffff:127.0.0.1"); err == nil {
		t.Fatal("an IPv4-mapped address taken for a plane")
	}
}

// send runs through mroce netem relay's fabric when its ports are ones the
// relay carries: --local-port with the receiver's, and the relay's source
// ports after them.
func TestSendThroughTheRelay(t *testing.T) {
	if st := sendThroughRelay(t, 0); st.Delivered == 0 || st.Unmapped != 0 {
		t.Fatalf("relay %+v: the transfer did not cross it whole", st)
	}
}

// sendThroughRelay moves 4 MiB from send to recv, on two planes of a relay
// whose downlinks lose loss of their datagrams, with extra flags of send,
// and returns the relay's counters.
func sendThroughRelay(t *testing.T, loss float64, extra ...string) relay.Stats {
	t.Helper()
	port := uint16(20000 + rand.IntN(30000)) // the relay's tests bind the same addresses, with ports of their own
	ports := []uint16{port}
	for p := range uint16(4) {
		ports = append(ports, port+1+p)
	}
	link := netem.LinkConfig{Rate: 1e9, Delay: 10 * time.Microsecond}
	down := link
	if loss > 0 {
		down.Impair.Loss = &netem.RandomLoss{P: loss}
	}
	r, err := relay.Start(relay.Config{Hosts: 2, Planes: 2, Ports: ports, Fabric: netem.Config{Seed: 1, Uplink: link, Downlink: down}})
	if err != nil {
		t.Skipf("no relay here: %v", err)
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		o := transferOptions{port: port, paths: 4, sourcePorts: 4, chunk: 1 << 20, interval: time.Hour, noProgress: 20 * time.Second}
		done <- runRecv(context.Background(), io.Discard, io.Discard, []netip.Addr{relay.RealAddr(1, 0), relay.RealAddr(1, 1)}, "", outputOptions{}, o)
	}()
	time.Sleep(200 * time.Millisecond)
	args := append([]string{"send", "--size-mib", "4", "--paths", "4", "--source-ports", "4", "--port", fmt.Sprint(port),
		"--to", relay.VirtualAddr(1, 0).String() + "," + relay.VirtualAddr(1, 1).String(),
		"--local", relay.RealAddr(0, 0).String() + "," + relay.RealAddr(0, 1).String(), "--local-port", fmt.Sprint(port), "--timeout", "20s"}, extra...)
	s := runCLI(t, "", args...)
	if err := <-done; err != nil || s.code != 0 {
		t.Fatalf("recv: %v; send: exit %d\n%s%s", err, s.code, s.stdout, s.stderr)
	}
	return r.Stats()
}
