package auth

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mroce/mroce/proto"
)

// FuzzOpen feeds arbitrary packets to a session. Open must never panic,
// must refuse every packet that was not sealed by the peer (the seeds are
// the vectors' sealed packets, which mutations change), and must return
// only its documented errors.
func FuzzOpen(f *testing.F) {
	v := vectors(f)
	for _, name := range protectedNames {
		f.Add(v["psk.aes128gcm.packet."+name])
	}
	secrets := Secrets{Suite: AES128GCM, Send: v["psk.aes128gcm.secret-a2i"], Recv: v["psk.aes128gcm.secret-i2a"]}
	sealed := map[string]bool{}
	for _, name := range protectedNames {
		sealed[string(v["psk.aes128gcm.packet."+name])] = true
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := NewSession(secrets, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkt := bytes.Clone(b)
		err = s.Open(pkt, 0)
		switch {
		case err == nil && !sealed[string(b)]:
			t.Fatalf("a packet no one sealed opened: %x", b)
		case err != nil && !errors.Is(err, proto.ErrAuthFailed) && !errors.Is(err, proto.ErrTruncated) && !errors.Is(err, ErrReplay):
			t.Fatalf("Open returned %v", err)
		}
	})
}

// FuzzRespond feeds arbitrary CONNECT headers and AuthHellos to an
// acceptor of each method. Respond must never panic, and must accept only
// a hello made with the credentials for the header it came with.
func FuzzRespond(f *testing.F) {
	v := vectors(f)
	f.Add(v["input.connect-handshake"], v["psk.aes128gcm.hello"], false)
	f.Add(v["input.connect-handshake"], v["keys.chacha20poly1305.hello"], true)
	f.Add(v["input.connect-handshake"], v["psk.aes128gcm.hello"][:50], false)
	psk := &Credentials{Method: MethodPSK, PSK: v["input.psk"]}
	sa, _ := newEphemeral(bytes.NewReader(v["input.acceptor-static"]))
	si, _ := newEphemeral(bytes.NewReader(v["input.initiator-static"]))
	keys := &Credentials{Method: MethodKeys, Static: sa}
	keys.Peers = append(keys.Peers, si.PublicKey())
	valid := map[string]bool{}
	for _, k := range []string{"psk.aes128gcm", "psk.chacha20poly1305", "keys.aes128gcm", "keys.chacha20poly1305"} {
		valid[string(v["input.connect-handshake"])+string(v[k+".hello"])] = true
	}
	f.Fuzz(func(t *testing.T, hs, hello []byte, static bool) {
		if len(hs) < 44 || len(hello) < proto.AuthHelloLen {
			return // the engine hands over only what proto's decode let through
		}
		cred := psk
		if static {
			cred = keys
		}
		r, err := Respond(cred, bytes.NewReader(make([]byte, 32)), proto.HandshakeHeader(hs), proto.AuthHello(hello))
		if err == nil && !valid[string(hs[:44])+string(hello[:proto.AuthHelloLen])] {
			t.Fatalf("a hello no one made was accepted: %x %x", hs, hello)
		}
		var refused *RefusedError
		if err != nil && !errors.Is(err, ErrFailed) && !errors.As(err, &refused) {
			t.Fatalf("Respond returned %v", err)
		}
		if err == nil {
			r.Answer(proto.HandshakeHeader(hs))
		}
	})
}
