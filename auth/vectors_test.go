package auth

import (
	"bytes"
	"crypto/ecdh"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mroce/mroce/internal/hexfmt"
	"github.com/mroce/mroce/proto"
)

// vectors reads testdata/auth/vectors.txt, which testdata/auth/vectors.py
// computes apart from this package.
func vectors(t testing.TB) map[string][]byte {
	t.Helper()
	text, err := os.ReadFile("../testdata/auth/vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	v, err := hexfmt.Named(string(text))
	if err != nil {
		t.Fatalf("testdata/auth/vectors.txt: %v", err)
	}
	return v
}

// goldenPacket reads a packet of testdata/golden.
func goldenPacket(t testing.TB, name string) []byte {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("../testdata/golden", name+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hexfmt.Parse(string(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

func x25519Key(t *testing.T, b []byte) *ecdh.PrivateKey {
	k, err := ecdh.X25519().NewPrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The handshake of both methods and both suites gives, from the stated
// inputs, the AuthHello, AuthAccept, secrets and phase keys that the
// independent computation gives.
func TestHandshakeMatchesTheVectors(t *testing.T) {
	v := vectors(t)
	hsC, hsA := proto.HandshakeHeader(v["input.connect-handshake"]), proto.HandshakeHeader(v["input.accept-handshake"])
	si, sa := x25519Key(t, v["input.initiator-static"]), x25519Key(t, v["input.acceptor-static"])
	for _, method := range []Method{MethodPSK, MethodKeys} {
		for _, suite := range []Suite{AES128GCM, ChaCha20Poly1305} {
			prefix := map[Method]string{MethodPSK: "psk", MethodKeys: "keys"}[method] + "." +
				map[Suite]string{AES128GCM: "aes128gcm", ChaCha20Poly1305: "chacha20poly1305"}[suite] + "."
			initiator := &Credentials{Method: method, Suite: suite, PSK: v["input.psk"]}
			acceptor := &Credentials{Method: method, PSK: v["input.psk"]}
			if method == MethodKeys {
				initiator.PSK, acceptor.PSK = nil, nil
				initiator.Static, initiator.Peers = si, []*ecdh.PublicKey{sa.PublicKey()}
				acceptor.Static, acceptor.Peers = sa, []*ecdh.PublicKey{si.PublicKey()}
			}
			in, err := Initiate(initiator, bytes.NewReader(v["input.initiator-ephemeral"]), hsC)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(in.Hello(), v[prefix+"hello"]) {
				t.Errorf("%shello:\n got  %x\n want %x", prefix, in.Hello(), v[prefix+"hello"])
			}
			r, err := Respond(acceptor, bytes.NewReader(v["input.acceptor-ephemeral"]), hsC, proto.AuthHello(in.Hello()))
			if err != nil {
				t.Fatalf("%s: the acceptor refused the hello: %v", prefix, err)
			}
			acc, as := r.Answer(hsA)
			if !bytes.Equal(acc, v[prefix+"accept"]) {
				t.Errorf("%saccept:\n got  %x\n want %x", prefix, acc, v[prefix+"accept"])
			}
			is, err := in.Finish(hsA, proto.AuthAccept(acc))
			if err != nil {
				t.Fatalf("%s: the initiator refused the accept: %v", prefix, err)
			}
			if !bytes.Equal(is.Send, v[prefix+"secret-i2a"]) || !bytes.Equal(is.Recv, v[prefix+"secret-a2i"]) ||
				!bytes.Equal(as.Send, is.Recv) || !bytes.Equal(as.Recv, is.Send) || is.Suite != suite || as.Suite != suite {
				t.Errorf("%ssecrets: initiator %x / %x, acceptor %x / %x", prefix, is.Send, is.Recv, as.Send, as.Recv)
			}
			if got := NextSecret(is.Send); !bytes.Equal(got, v[prefix+"secret-i2a-phase1"]) {
				t.Errorf("%sphase 1 secret %x", prefix, got)
			}
			for phase, secret := range [][]byte{is.Send, NextSecret(is.Send)} {
				key := expandLabel(secret, "key", nil, suite.keyLen())
				iv := expandLabel(secret, "iv", nil, nonceLen)
				p := prefix + "key-i2a-phase" + string(rune('0'+phase))
				if !bytes.Equal(key, v[p]) || !bytes.Equal(iv, v[prefix+"iv-i2a-phase"+string(rune('0'+phase))]) {
					t.Errorf("%s: key %x iv %x", p, key, iv)
				}
			}
		}
	}
}

// protectedNames are the golden packets of the types that are ever
// protected, in the order the vectors number their control packets.
var protectedNames = []string{"01-write", "02-write-imm", "03-send", "04-read-req", "05-read-resp",
	"06-ack", "07-nack", "08-cnp", "11-close", "12-probe", "13-probe-reply"}

// A session seals each golden packet, as its sender would in this order,
// into the bytes the independent computation gives, and the peer's session
// opens those bytes back into the packet: the same fields and payload.
func TestProtectedPacketsMatchTheVectors(t *testing.T) {
	v := vectors(t)
	for _, suite := range []Suite{AES128GCM, ChaCha20Poly1305} {
		prefix := "psk." + map[Suite]string{AES128GCM: "aes128gcm", ChaCha20Poly1305: "chacha20poly1305"}[suite] + "."
		secrets := Secrets{Suite: suite, Send: v[prefix+"secret-i2a"], Recv: v[prefix+"secret-a2i"]}
		sender, err := NewSession(secrets, 0)
		if err != nil {
			t.Fatal(err)
		}
		receiver, _ := NewSession(Secrets{Suite: suite, Send: secrets.Recv, Recv: secrets.Send}, 0)
		for _, name := range protectedNames {
			plain := goldenPacket(t, name)
			var p proto.Packet
			if err := p.Decode(plain); err != nil {
				t.Fatal(err)
			}
			records := 0
			if p.Type() == proto.TypeAck {
				records = int(p.Ack().RecordCount())
			}
			var q proto.Packet
			if err := proto.BuildProtected(&q, make([]byte, len(plain)+proto.TagLen), p.Type(), records, len(p.Payload)); err != nil {
				t.Fatal(err)
			}
			copy(q.Bytes()[1:], plain[1:len(plain)-proto.TrailerLen]) // all but the byte with Protected
			if err := sender.Seal(q.Bytes(), 0); err != nil {
				t.Fatal(err)
			}
			want := v[prefix+"packet."+name]
			if !bytes.Equal(q.Bytes(), want) {
				t.Errorf("%s%s:\n got  %x\n want %x", prefix, name, q.Bytes(), want)
				continue
			}
			opened := bytes.Clone(want)
			if err := receiver.Open(opened, 0); err != nil {
				t.Fatalf("%s%s does not open: %v", prefix, name, err)
			}
			var r proto.Packet
			if err := r.DecodeOpened(opened); err != nil {
				t.Fatalf("%s%s opened does not decode: %v", prefix, name, err)
			}
			if !bytes.Equal(r.Ext(), p.Ext()) || !bytes.Equal(r.Payload, p.Payload) || r.Common.Timestamp() != p.Common.Timestamp() {
				t.Errorf("%s%s opened into other fields", prefix, name)
			}
		}
		// A data packet of phase 1, sealed by that phase's keys.
		k, _ := NewKeys(suite, NextSecret(secrets.Send))
		want := v[prefix+"packet.01-write.phase1"]
		opened := bytes.Clone(want)
		if proto.CommonHeader(opened).KeyPhase() != 1 || k.Open(opened) != nil {
			t.Errorf("%s: the phase-1 packet does not open under phase 1's keys", prefix)
		}
	}
}

// The vectors are what testdata/auth/vectors.py prints now. CI installs
// the Python cryptography package and sets MROCE_REQUIRE_PYCRYPTO, so
// there this never skips.
func TestVectorsAreTheScriptsOutput(t *testing.T) {
	cmd := exec.Command("python3", "../testdata/auth/vectors.py")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if os.Getenv("MROCE_REQUIRE_PYCRYPTO") == "" {
			t.Skipf("python3 with the cryptography package is not here: %v %s", err, stderr.String())
		}
		t.Fatalf("testdata/auth/vectors.py: %v\n%s", err, stderr.String())
	}
	want, err := os.ReadFile("../testdata/auth/vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, want) {
		t.Fatal("testdata/auth/vectors.txt is not what vectors.py prints: run python3 testdata/auth/vectors.py > testdata/auth/vectors.txt")
	}
}

// The golden CONNECT and ACCEPT of the authenticated mode carry the
// vectors' handshake headers and key exchange, so a decoder that reads
// them reads what the schedule was computed from.
func TestGoldenHandshakePacketsAreTheVectors(t *testing.T) {
	v := vectors(t)
	for _, c := range []struct {
		name, hs, exchange string
	}{{"16-connect-auth", "input.connect-handshake", "psk.aes128gcm.hello"}, {"17-accept-auth", "input.accept-handshake", "psk.aes128gcm.accept"}} {
		var p proto.Packet
		if err := p.Decode(goldenPacket(t, c.name)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var exchange []byte
		if h, ok := p.AuthHello(); ok {
			exchange = h
		} else if a, ok := p.AuthAccept(); ok {
			exchange = a
		}
		if !bytes.Equal(p.Handshake(), v[c.hs]) || !bytes.Equal(exchange, v[c.exchange]) {
			t.Errorf("%s: header %x, key exchange %x; not the vectors'", c.name, []byte(p.Handshake()), exchange)
		}
	}
}

// What the acceptor sends, under its own direction's secret, with both
// methods and both suites: the initiator's session opens the vectors'
// packets into the golden ones, and a session of the other direction does
// not.
func TestAcceptorPacketsMatchTheVectors(t *testing.T) {
	v := vectors(t)
	for _, prefix := range []string{"psk.aes128gcm.", "psk.chacha20poly1305.", "keys.aes128gcm.", "keys.chacha20poly1305."} {
		suite := AES128GCM
		if strings.Contains(prefix, "chacha") {
			suite = ChaCha20Poly1305
		}
		initiator, _ := NewSession(Secrets{Suite: suite, Send: v[prefix+"secret-i2a"], Recv: v[prefix+"secret-a2i"]}, 0)
		mirror, _ := NewSession(Secrets{Suite: suite, Send: v[prefix+"secret-a2i"], Recv: v[prefix+"secret-i2a"]}, 0)
		for _, name := range []string{"05-read-resp", "06-ack"} {
			sealed := v[prefix+"packet-a2i."+name]
			if mirror.Open(bytes.Clone(sealed), 0) == nil {
				t.Errorf("%s%s opened under the initiator's own direction", prefix, name)
			}
			opened := bytes.Clone(sealed)
			if err := initiator.Open(opened, 0); err != nil {
				t.Fatalf("%s%s: %v", prefix, name, err)
			}
			var got, want proto.Packet
			if err := got.DecodeOpened(opened); err != nil {
				t.Fatal(err)
			}
			if err := want.Decode(goldenPacket(t, name)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Ext(), want.Ext()) || !bytes.Equal(got.Payload, want.Payload) {
				t.Errorf("%s%s opened into other fields", prefix, name)
			}
		}
	}
}
