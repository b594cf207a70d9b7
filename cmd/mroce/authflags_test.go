package main

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mroce/mroce/auth"
)

// keygen writes a private key readable by its owner only and prints its
// public key, which --peer-key reads; with --psk it writes a pre-shared
// key. It never overwrites a file, and writes no key to the terminal.
func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "a.key")
	r := runCLI(t, "", "keygen", "--out", key)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	st, err := os.Stat(key)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, mode %v", err, st.Mode())
	}
	text, _ := os.ReadFile(key)
	priv, err := auth.ParsePrivateKey(string(text))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := auth.ParsePublicKey(r.stdout)
	if err != nil || !pub.Equal(priv.PublicKey()) {
		t.Fatalf("printed %q, not the key's public key: %v", r.stdout, err)
	}
	if r := runCLI(t, "", "keygen", "--out", key); r.code != 1 {
		t.Errorf("over an existing file: exit %d", r.code)
	}
	psk := filepath.Join(dir, "p.psk")
	if r := runCLI(t, "", "keygen", "--psk", "--out", psk); r.code != 0 || r.stdout != "" {
		t.Errorf("--psk: exit %d, printed %q", r.code, r.stdout)
	}
	if b, err := readKeyFile(psk); err != nil || len(b) != auth.PSKLen {
		t.Errorf("the pre-shared key: %v", err)
	}
	if r := runCLI(t, "", "keygen"); r.code != 2 {
		t.Errorf("without --out: exit %d", r.code)
	}
}

// The credential flags are checked as every flag is: one method, the
// peer's key with a key of one's own, a known suite, keys that parse.
func TestAuthFlagsAreChecked(t *testing.T) {
	dir := t.TempDir()
	psk, key := filepath.Join(dir, "p.psk"), filepath.Join(dir, "a.key")
	runCLI(t, "", "keygen", "--psk", "--out", psk)
	pub := strings.TrimSpace(runCLI(t, "", "keygen", "--out", key).stdout)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	for _, args := range [][]string{
		{"--psk-file", psk, "--key-file", key, "--peer-key", pub},
		{"--peer-key", pub},
		{"--key-file", key},
		{"--psk-file", psk, "--suite", "des"},
		{"--psk-file", bad},
		{"--key-file", key, "--peer-key", bad},
		{"--psk-file", psk, "--baseline"},
	} {
		r := runCLI(t, "", append([]string{"send", "--to", "127.0.0.1", "--size-mib", "1"}, args...)...)
		if r.code != 2 {
			t.Errorf("send %v: exit %d, want 2: %s", args, r.code, r.stderr)
		}
	}
}

// A receiver warns when it listens beyond loopback without
// authentication, and only then.
func TestWarnOpen(t *testing.T) {
	cred := authOptions{cred: &auth.Credentials{Method: auth.MethodPSK, PSK: make([]byte, auth.PSKLen)}}
	for _, c := range []struct {
		planes []string
		o      authOptions
		warns  bool
	}{
		{[]string{"127.0.0.1", "::1"}, authOptions{}, false},
		{[]string{"127.0.0.1", "192.0.2.7"}, authOptions{}, true},
		{[]string{"192.0.2.7"}, cred, false},
	} {
		var planes []netip.Addr
		for _, p := range c.planes {
			planes = append(planes, netip.MustParseAddr(p))
		}
		var w bytes.Buffer
		warnOpen(&w, planes, c.o)
		if got := strings.Contains(w.String(), "without authentication"); got != c.warns {
			t.Errorf("%v, credentials %v: warned %v", c.planes, c.o.cred != nil, got)
		}
	}
}
