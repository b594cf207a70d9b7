package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/app/appmsg"
	"github.com/mroce/mroce/app/filexfer"
	"github.com/mroce/mroce/app/host"
	"github.com/mroce/mroce/app/perftest"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/proto"
)

const appsDoc = "../../docs/apps.md"

// appsTypes are the control messages docs/apps.md specifies, by the names
// its tables give them.
var appsTypes = map[string]reflect.Type{
	"filexfer.Header":   reflect.TypeFor[filexfer.Header](),
	"filexfer.Trailer":  reflect.TypeFor[filexfer.Trailer](),
	"filexfer.Verdict":  reflect.TypeFor[filexfer.Verdict](),
	"perftest.Request":  reflect.TypeFor[perftest.Request](),
	"perftest.Response": reflect.TypeFor[perftest.Response](),
}

// docBlocks returns, for each <!-- kind: NAME --> marker of docs/apps.md,
// the lines that follow it up to the first blank line after some text.
func docBlocks(t *testing.T, kind string) map[string][][]string {
	t.Helper()
	text, err := os.ReadFile(appsDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][]string{}
	marker := regexp.MustCompile(`^<!-- ` + kind + `: (\S+) -->$`)
	lines := strings.Split(string(text), "\n")
	for i, l := range lines {
		m := marker.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var block []string
		for _, b := range lines[i+1:] {
			if strings.TrimSpace(b) == "" {
				break
			}
			block = append(block, b)
		}
		out[m[1]] = append(out[m[1]], block)
	}
	return out
}

// filled is a value of type ty with every field set to something other
// than its zero, so that JSON writes every member.
func filled(ty reflect.Type) reflect.Value {
	v := reflect.New(ty).Elem()
	for i := range ty.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Uint32, reflect.Uint64:
			f.SetUint(1)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		}
	}
	return v
}

// members lists the members of a JSON object in the order they come.
func members(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%s is not a JSON object", b)
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tok.(string))
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// Every message table of docs/apps.md lists the members mroce writes, in
// its order, each marked "always" exactly when mroce writes it at its zero
// value; every example decodes strictly into its message and encodes back
// to the same bytes.
func TestAppsDocTables(t *testing.T) {
	tables := docBlocks(t, "json")
	for name, ty := range appsTypes {
		blocks := tables[name]
		if len(blocks) != 1 {
			t.Errorf("docs/apps.md has %d tables of %s, want 1", len(blocks), name)
			continue
		}
		var doc []string
		var always []bool
		for _, row := range blocks[0] {
			cells := strings.Split(strings.Trim(row, "|"), "|")
			if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "Member" {
				continue
			}
			doc = append(doc, strings.TrimSpace(cells[0]))
			always = append(always, strings.TrimSpace(cells[2]) == "always")
		}
		all, _ := json.Marshal(filled(ty).Interface())
		if got := members(t, all); !slices.Equal(got, doc) {
			t.Errorf("%s: mroce writes the members %v, docs/apps.md lists %v", name, got, doc)
			continue
		}
		zero, _ := json.Marshal(reflect.New(ty).Elem().Interface())
		atZero := members(t, zero)
		for i, m := range doc {
			if slices.Contains(atZero, m) != always[i] {
				t.Errorf("%s.%s: written at zero %v, docs/apps.md says always %v", name, m, slices.Contains(atZero, m), always[i])
			}
		}
	}
	examples := docBlocks(t, "example")
	for name, blocks := range examples {
		ty, ok := appsTypes[name]
		if !ok {
			t.Errorf("docs/apps.md has an example of %s, which is no message", name)
			continue
		}
		for _, b := range blocks {
			text := strings.TrimSpace(strings.Join(b, ""))
			v := reflect.New(ty)
			dec := json.NewDecoder(strings.NewReader(text))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v.Interface()); err != nil {
				t.Errorf("%s example %s: %v", name, text, err)
				continue
			}
			back, _ := json.Marshal(v.Interface())
			if string(back) != text {
				t.Errorf("%s example %s: mroce writes it as %s", name, text, back)
			}
		}
	}
	for name := range appsTypes {
		if len(examples[name]) == 0 {
			t.Errorf("docs/apps.md has no example of %s", name)
		}
	}
}

// captured reads the application messages of a golden capture.
func captured(t *testing.T, name string) []appmsg.Message {
	t.Helper()
	packets, err := capturePayloads("../../testdata/apps/"+name+".pcap", 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := appmsg.Extract(packets)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if !m.Complete() {
			t.Fatalf("%s: %v is not all in the capture", name, m.String())
		}
	}
	return msgs
}

// appPeer is one side of a golden capture's exchange, played through the
// endpoint API, with nothing of app/filexfer or app/perftest, against the
// mroce command of the other side.
type appPeer struct {
	t        *testing.T
	ctx      context.Context
	pd       *endpoint.PD
	qp       *endpoint.QP
	scq, rcq *endpoint.CQ
	lis      *endpoint.Listener
	bufs     map[uint64]*endpoint.MR // the posted receives' buffers, by id
	nextID   uint64
}

func newAppPeer(t *testing.T, addr string, port uint16) *appPeer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	h, err := host.Open([]netip.Addr{netip.MustParseAddr(addr)}, host.Options{Port: port, Paths: 4, SourcePorts: 4, NoProgress: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	p := &appPeer{t: t, ctx: ctx, bufs: map[uint64]*endpoint.MR{}}
	if p.pd, err = h.Device().AllocPD(); err != nil {
		t.Fatal(err)
	}
	p.scq, p.rcq = h.Device().CreateCQ(256), h.Device().CreateCQ(256)
	return p
}

// listeningPeer is a peer listening on a free port of addr, and the port.
func listeningPeer(t *testing.T, addr string) (*appPeer, int) {
	t.Helper()
	port := freePort(t, addr)
	p := newAppPeer(t, addr, uint16(port))
	p.listen()
	return p, port
}

// dialingPeer is a peer connected to the command listening on addr and
// port, once it has had time to start.
func dialingPeer(t *testing.T, addr string, port int) *appPeer {
	t.Helper()
	p := newAppPeer(t, "127.0.0.1", 0)
	time.Sleep(200 * time.Millisecond)
	p.connect(addr, uint16(port))
	return p
}

func (p *appPeer) connect(addr string, port uint16) {
	var err error
	p.qp, err = p.pd.Connect(p.ctx, endpoint.Remote{Planes: []netip.Addr{netip.MustParseAddr(addr)}, Port: port}, p.scq, p.rcq, endpoint.QPOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
}

func (p *appPeer) listen() {
	var err error
	if p.lis, err = p.pd.Listen(p.scq, p.rcq, endpoint.QPOptions{}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *appPeer) accept() {
	var err error
	if p.qp, err = p.lis.Accept(p.ctx); err != nil {
		p.t.Fatal(err)
	}
	if err := p.qp.WaitEstablished(p.ctx); err != nil {
		p.t.Fatal(err)
	}
}

// postRecv posts a receive of n bytes on stream, or of no buffer when n is 0.
func (p *appPeer) postRecv(stream uint16, n int) {
	p.nextID++
	if n == 0 {
		if err := p.qp.PostRecv(p.nextID, stream); err != nil {
			p.t.Fatal(err)
		}
		return
	}
	mr, err := p.pd.RegisterMR(make([]byte, n), endpoint.LocalWrite)
	if err != nil {
		p.t.Fatal(err)
	}
	p.bufs[p.nextID] = mr
	if err := p.qp.PostRecv(p.nextID, stream, mr.SGE(0, uint32(n))); err != nil {
		p.t.Fatal(err)
	}
}

// received waits for the next receive completion and returns it with the
// bytes it placed.
func (p *appPeer) received() (endpoint.Completion, []byte) {
	wc := make([]endpoint.Completion, 1)
	if _, err := p.rcq.Wait(p.ctx, wc); err != nil {
		p.t.Fatalf("waiting for a message: %v", err)
	}
	if wc[0].Status != endpoint.StatusOK {
		p.t.Fatalf("a receive completed %v: %v", wc[0].Status, wc[0].Err)
	}
	var b []byte
	if mr := p.bufs[wc[0].ID]; mr != nil {
		b = bytes.Clone(mr.Bytes()[:wc[0].Bytes])
	}
	return wc[0], b
}

// do posts wr and waits for its completion.
func (p *appPeer) do(wr endpoint.SendWR) {
	p.nextID++
	wr.ID = p.nextID
	if err := p.qp.Post(wr); err != nil {
		p.t.Fatal(err)
	}
	wc := make([]endpoint.Completion, 1)
	if _, err := p.scq.Wait(p.ctx, wc); err != nil {
		p.t.Fatalf("waiting for a %v: %v", wr.Op, err)
	}
	if wc[0].Status != endpoint.StatusOK || wc[0].ID != wr.ID {
		p.t.Fatalf("a %v completed %+v", wr.Op, wc[0])
	}
}

// send SENDs b on stream.
func (p *appPeer) send(stream uint16, b []byte) {
	mr, err := p.pd.RegisterMR(bytes.Clone(b), endpoint.LocalWrite)
	if err != nil {
		p.t.Fatal(err)
	}
	p.do(endpoint.SendWR{Op: endpoint.OpSend, Stream: stream, SGL: []endpoint.SGE{mr.SGE(0, uint32(len(b)))}})
}

// ended waits until the connection has ended with a CLOSE NORMAL, either
// side's.
func (p *appPeer) ended() {
	for {
		st, err := p.qp.State()
		if st == endpoint.Closed {
			if !endpoint.ClosedNormally(err) {
				p.t.Fatalf("the connection ended with %v, want a CLOSE NORMAL", err)
			}
			return
		}
		select {
		case <-p.ctx.Done():
			p.t.Fatal("the peer did not end the connection")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// expectJSON checks a control message against the capture's, member for
// member but for keys.
func expectJSON(t *testing.T, got []byte, want appmsg.Message) {
	t.Helper()
	if !appmsg.SameJSON(got, want.Payload, "rkey") {
		t.Fatalf("got %s, the capture has %s", got, want.Payload)
	}
}

var rkeyMember = regexp.MustCompile(`"rkey":[0-9]+`)

// withKey is a control message with its rkey member replaced by key.
func withKey(b []byte, key uint64) []byte {
	return rkeyMember.ReplaceAll(b, []byte(`"rkey":`+strconv.FormatUint(key, 10)))
}

// of returns the capture's messages of one side.
func of(msgs []appmsg.Message, initiator bool) []appmsg.Message {
	var out []appmsg.Message
	for _, m := range msgs {
		if m.Initiator == initiator && m.Type != proto.TypeClose {
			out = append(out, m)
		}
	}
	return out
}

// TestAppsGoldenCaptures plays each golden capture of docs/apps.md, in each
// role, against the mroce command of the other role: what the capture's
// side sent is sent (with the live keys), and what the command sends must
// be what the capture has. Only one command line runs at a time: two race
// inside the flag library.
func TestAppsGoldenCaptures(t *testing.T) {
	addrs := 130
	next := func() string { addrs++; return fmt.Sprintf("127.0.0.%d", addrs) }
	t.Run("send/recv: as the sender", func(t *testing.T) {
		msgs := captured(t, "send")
		addr := next()
		port := freePort(t, addr)
		done := make(chan result, 1)
		go func() {
			done <- runCLI(t, "", "recv", "--listen", addr, "--port", fmt.Sprint(port), "--timeout", "10s")
		}()
		p := dialingPeer(t, addr, port)
		p.postRecv(1, 4096)
		for _, m := range of(msgs, true) {
			p.send(m.Stream, m.Payload)
		}
		_, verdict := p.received()
		expectJSON(t, verdict, of(msgs, false)[0])
		p.qp.Close()
		if r := <-done; r.code != 0 || !strings.Contains(r.stdout, "SHA-256 matches") {
			t.Fatalf("recv: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("send/recv: as the receiver", func(t *testing.T) {
		msgs := captured(t, "send")
		addr := next()
		p, port := listeningPeer(t, addr)
		done := make(chan result, 1)
		go func() {
			done <- runCLI(t, "", "send", "--to", addr, "--port", fmt.Sprint(port), "--chunk-kib", "1", "--timeout", "10s",
				"../../testdata/apps/greeting.txt")
		}()
		p.accept()
		p.postRecv(1, 4096)
		sent := of(msgs, true)
		_, header := p.received()
		expectJSON(t, header, sent[0])
		var h struct{ Chunk int }
		json.Unmarshal(header, &h)
		for range filexfer.DefaultDepth {
			p.postRecv(1, max(h.Chunk, 4096))
		}
		for _, m := range sent[1:] {
			wc, got := p.received()
			if wc.Stream != m.Stream || !bytes.Equal(got, m.Payload) && !appmsg.SameJSON(got, m.Payload) {
				t.Fatalf("stream %d, %d bytes %.80q; the capture has stream %d, %d bytes %.80q", wc.Stream, len(got), got, m.Stream, len(m.Payload), m.Payload)
			}
			p.postRecv(1, max(h.Chunk, 4096))
		}
		p.send(1, of(msgs, false)[0].Payload)
		p.ended()
		if r := <-done; r.code != 0 {
			t.Fatalf("send: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	for _, test := range perftest.Tests {
		t.Run("bench "+test+": as the client", func(t *testing.T) {
			msgs := captured(t, "bench-"+test)
			addr := next()
			port := freePort(t, addr)
			done := make(chan result, 1)
			go func() {
				done <- runCLI(t, "", "bench", test, "--server", "--listen", addr, "--port", fmt.Sprint(port), "--timeout", "10s")
			}()
			p := dialingPeer(t, addr, port)
			sent, answers := of(msgs, true), of(msgs, false)
			var req perftest.Request
			json.Unmarshal(sent[0].Payload, &req)
			local, err := p.qp.RegisterMR(make([]byte, slices.Max(req.Sizes)), endpoint.LocalWrite|endpoint.RemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			p.postRecv(0, 4096)
			p.send(0, withKey(sent[0].Payload, local.RKey()))
			_, resp := p.received()
			expectJSON(t, resp, answers[0])
			var r perftest.Response
			json.Unmarshal(resp, &r)
			pongs := answers[1 : len(answers)-1]
			for _, m := range sent[1 : len(sent)-1] {
				wr := endpoint.SendWR{Stream: m.Stream, SGL: []endpoint.SGE{local.SGE(0, m.Len)}, RKey: r.RKey, Imm: m.Imm}
				switch m.Type {
				case proto.TypeWrite:
					wr.Op = endpoint.OpWrite
				case proto.TypeSend:
					wr.Op = endpoint.OpSend
				case proto.TypeReadReq:
					wr.Op = endpoint.OpRead
				case proto.TypeWriteImm:
					wr.Op = endpoint.OpWriteImm
					p.postRecv(1, 0)
				}
				p.do(wr)
				if m.Type == proto.TypeWriteImm {
					wc, _ := p.received()
					pong := pongs[0]
					pongs = pongs[1:]
					if !wc.HasImm || wc.Imm != pong.Imm || wc.Bytes != pong.Len {
						t.Fatalf("pong %+v; the capture has imm %d, %d bytes", wc, pong.Imm, pong.Len)
					}
				}
			}
			if len(pongs) != 0 {
				t.Fatalf("%d pongs of the capture did not come", len(pongs))
			}
			p.postRecv(0, 4096)
			p.send(0, sent[len(sent)-1].Payload)
			_, bye := p.received()
			expectJSON(t, bye, answers[len(answers)-1])
			p.qp.Close()
			if r := <-done; r.code != 0 || !strings.Contains(r.stdout, "Served "+test) {
				t.Fatalf("bench server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
		t.Run("bench "+test+": as the server", func(t *testing.T) {
			msgs := captured(t, "bench-"+test)
			addr := next()
			p, port := listeningPeer(t, addr)
			sent, answers := of(msgs, true), of(msgs, false)
			var want perftest.Request
			json.Unmarshal(sent[0].Payload, &want)
			args := []string{"bench", test, "--to", addr, "--port", fmt.Sprint(port), "--size", fmt.Sprint(want.Sizes[0]),
				"-n", fmt.Sprint(want.Iters), "--timeout", "10s"}
			if test != perftest.WriteLat {
				args = append(args, "-t", fmt.Sprint(want.Depth))
			}
			done := make(chan result, 1)
			go func() { done <- runCLI(t, "", args...) }()
			p.accept()
			p.postRecv(0, 4096)
			_, reqText := p.received()
			expectJSON(t, reqText, sent[0])
			var req perftest.Request
			json.Unmarshal(reqText, &req)
			size := slices.Max(req.Sizes)
			region, err := p.qp.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite|endpoint.RemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			p.postRecv(0, 4096)
			switch test {
			case perftest.SendBW:
				for range req.Depth {
					p.postRecv(1, size)
				}
			case perftest.WriteLat:
				p.postRecv(1, 0)
			}
			p.send(0, withKey(answers[0].Payload, region.RKey()))
			var ops []appmsg.Message // what the client sent on stream 1 that this side sees
			for _, m := range sent[1 : len(sent)-1] {
				if m.Type == proto.TypeSend || m.Type == proto.TypeWriteImm {
					ops = append(ops, m)
				}
			}
			for {
				wc, b := p.received()
				if wc.Stream == 0 {
					expectJSON(t, b, sent[len(sent)-1])
					break
				}
				if len(ops) == 0 {
					t.Fatalf("a message on stream 1 the capture does not have: %+v", wc)
				}
				m := ops[0]
				ops = ops[1:]
				if wc.Bytes != m.Len || wc.HasImm != (m.Type == proto.TypeWriteImm) || wc.Imm != m.Imm {
					t.Fatalf("on stream 1: %+v; the capture has %s", wc, m.String())
				}
				switch test {
				case perftest.SendBW:
					p.postRecv(1, size)
				case perftest.WriteLat:
					p.postRecv(1, 0)
					p.do(endpoint.SendWR{Op: endpoint.OpWriteImm, Stream: 1, SGL: []endpoint.SGE{region.SGE(0, wc.Bytes)}, RKey: req.RKey, Imm: wc.Imm})
				}
			}
			if len(ops) != 0 {
				t.Fatalf("%d messages of the capture on stream 1 did not come", len(ops))
			}
			p.send(0, withKey(answers[len(answers)-1].Payload, region.RKey()))
			p.ended()
			if r := <-done; r.code != 0 {
				t.Fatalf("bench client: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// mroce decode --apps prints a capture's application messages, and takes
// no other packet source.
func TestDecodeApps(t *testing.T) {
	r := runCLI(t, "", "decode", "--pcap", "../../testdata/apps/send.pcap", "--apps")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 7 || lines[0] != `> SEND s1 msn0 rsn0 48 {"name":"greeting.txt","size":2500,"chunk":1024}` ||
		!strings.HasPrefix(lines[5], `< SEND s1 msn0 rsn0 87 {"ok":true,`) || lines[6] != "> CLOSE NORMAL 0" {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "decode", "--apps", "0011"); r.code != 2 {
		t.Fatalf("--apps without --pcap: exit %d", r.code)
	}
}
