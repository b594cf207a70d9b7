package host

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/internal/pcapio"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.113")}

// A host with a capture and a metrics server connects to another. The
// capture holds the handshake, and a scrape shows the connection that was
// added to the collector.
func TestOpenWithCaptureAndMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pcap := filepath.Join(t.TempDir(), "c.pcap")
	server, err := Open(loopback, Options{Paths: 2, SourcePorts: 4, NoProgress: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	client, err := Open(loopback, Options{Paths: 2, SourcePorts: 4, NoProgress: 10 * time.Second, Pcap: pcap, Metrics: addr})
	if err != nil {
		t.Fatal(err)
	}
	spd, _ := server.Device().AllocPD()
	scq := server.Device().CreateCQ(8)
	if _, err := spd.Listen(scq, scq, endpoint.QPOptions{}); err != nil {
		t.Fatal(err)
	}
	cpd, _ := client.Device().AllocPD()
	ccq := client.Device().CreateCQ(8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp, err := cpd.Connect(ctx, server.Remote(), ccq, ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client.Metrics.Add("server", qp)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `mroce_path_packets_sent_total{conn="server"`) || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("the scrape lacks the connection or the Go collector:\n%.500s", body)
	}
	qp.Close()
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapio.NewReader(f, server.Remote().Port)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; ; n++ {
		if _, err := r.Next(); err != nil {
			break
		}
	}
	if n < 2 {
		t.Errorf("the capture holds %d datagrams to or from the server, want the handshake at least", n)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("the metrics server outlived Close")
	}
}

// What cannot be opened says which part failed.
func TestOpenErrors(t *testing.T) {
	busy, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP(loopback[0].AsSlice())})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := uint16(busy.LocalAddr().(*net.UDPAddr).Port)
	for _, c := range []struct {
		o   Options
		msg string
	}{
		{Options{Port: port, Paths: 1, SourcePorts: 1}, "cannot open the endpoint"},
		{Options{Paths: 1, SourcePorts: 1, Pcap: "/no/such/dir/x.pcap"}, "pcap: open /no/such/dir/x.pcap"},
		{Options{Paths: 1, SourcePorts: 1, Metrics: "300.0.0.1:1"}, "metrics: listen tcp"},
	} {
		if h, err := Open(loopback, c.o); err == nil || !strings.Contains(err.Error(), c.msg) {
			if h != nil {
				h.Close()
			}
			t.Errorf("%+v: %v, want %q", c.o, err, c.msg)
		}
	}
}

func TestLocalFor(t *testing.T) {
	a, err := LocalFor(netip.MustParseAddr("127.0.0.1"))
	if err != nil || !a.IsLoopback() {
		t.Fatalf("%v %v", a, err)
	}
}
