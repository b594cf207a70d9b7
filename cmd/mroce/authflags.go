package main

import (
	"crypto/ecdh"
	"crypto/rand"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/auth"
)

// authFlags are the authenticated mode's settings (docs/spec.md section
// 13), on every command that opens a host on real sockets.
func authFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "psk-file", EnvVars: []string{"MROCE_PSK_FILE"}, Usage: "authenticate and encrypt every packet with the pre-shared key in this file (mroce keygen --psk writes one); both sides give the same key"},
		&cli.StringFlag{Name: "key-file", EnvVars: []string{"MROCE_KEY_FILE"}, Usage: "authenticate and encrypt every packet with this side's X25519 private key, read from this file (mroce keygen writes one); the peer's public key comes with --peer-key"},
		&cli.StringSliceFlag{Name: "peer-key", EnvVars: []string{"MROCE_PEER_KEY"}, Usage: "with --key-file: the peer's public key, as text (base64 or hex) or a file of keys, one a line; a sender gives the receiver's, a receiver each sender's it admits"},
		&cli.StringFlag{Name: "suite", Value: "aes128gcm", EnvVars: []string{"MROCE_SUITE"}, Usage: "the cipher a sender asks for: aes128gcm or chacha20poly1305 (a receiver takes either)"},
		&cli.StringFlag{Name: "key-log", EnvVars: []string{"MROCE_KEY_LOG"}, Usage: "append each connection's secrets to this file, which mroce decode --key-log reads; whoever holds it can read and forge the traffic: for debugging only"},
	}
}

// authOptions are the checked settings: no credentials means no
// authentication.
type authOptions struct {
	cred   *auth.Credentials
	keyLog io.Writer
}

func parseAuthOptions(c *cli.Context) (authOptions, error) {
	var o authOptions
	name := c.Command.Name
	psk, key, peers := c.String("psk-file"), c.String("key-file"), c.StringSlice("peer-key")
	suite, ok := map[string]auth.Suite{"aes128gcm": auth.AES128GCM, "chacha20poly1305": auth.ChaCha20Poly1305}[c.String("suite")]
	switch {
	case !ok:
		return o, usagef(c, "%s: --suite %q: want aes128gcm or chacha20poly1305", name, c.String("suite"))
	case psk != "" && key != "":
		return o, usagef(c, "%s: --psk-file and --key-file: one method, not both", name)
	case len(peers) > 0 && key == "":
		return o, usagef(c, "%s: --peer-key needs --key-file, this side's own key", name)
	case key != "" && len(peers) == 0:
		return o, usagef(c, "%s: --key-file needs --peer-key, the peer's public key", name)
	}
	switch {
	case psk != "":
		b, err := readKeyFile(psk)
		if err != nil {
			return o, usagef(c, "%s: --psk-file: %v", name, err)
		}
		o.cred = &auth.Credentials{Method: auth.MethodPSK, PSK: b, Suite: suite}
	case key != "":
		b, err := readKeyFile(key)
		if err != nil {
			return o, usagef(c, "%s: --key-file: %v", name, err)
		}
		priv, err := ecdh.X25519().NewPrivateKey(b)
		if err != nil {
			return o, usagef(c, "%s: --key-file: %v", name, err)
		}
		o.cred = &auth.Credentials{Method: auth.MethodKeys, Static: priv, Suite: suite}
		for _, p := range peers {
			keys, err := parsePeerKeys(p)
			if err != nil {
				return o, usagef(c, "%s: --peer-key: %v", name, err)
			}
			o.cred.Peers = append(o.cred.Peers, keys...)
		}
	}
	if path := c.String("key-log"); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return o, fmt.Errorf("%s: --key-log: %w", name, err)
		}
		o.keyLog = f // written as connections start, and closed when the process ends
	}
	return o, nil
}

// readKeyFile reads the 32-byte key a file holds as text.
func readKeyFile(path string) ([]byte, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return auth.ParseKey(string(text))
}

// parsePeerKeys reads a public key given as text, or the keys of a file,
// one a line; blank lines and lines from # on are skipped.
func parsePeerKeys(arg string) ([]*ecdh.PublicKey, error) {
	if k, err := auth.ParsePublicKey(arg); err == nil {
		return []*ecdh.PublicKey{k}, nil
	}
	text, err := os.ReadFile(arg)
	if err != nil {
		return nil, fmt.Errorf("%q is neither a key nor a file of keys: %w", arg, err)
	}
	var out []*ecdh.PublicKey
	for i, line := range strings.Split(string(text), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, err := auth.ParsePublicKey(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", arg, i+1, err)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no key", arg)
	}
	return out, nil
}

// warnOpen tells a receiver that listens beyond loopback without
// authentication what that allows.
func warnOpen(w io.Writer, planes []netip.Addr, o authOptions) {
	if o.cred != nil {
		return
	}
	for _, a := range planes {
		if !a.IsLoopback() {
			fmt.Fprintf(w, "warning: listening on %v without authentication: anyone on the path can read, forge and end the transfer (--psk-file or --key-file, docs/spec.md section 13)\n", a)
			return
		}
	}
}

// keygenCommand defines mroce keygen.
func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:      "keygen",
		Usage:     "make a key for the authenticated mode: an X25519 key pair, or a pre-shared key",
		UsageText: progName + " keygen --out FILE [--psk]",
		Description: "keygen writes a new private key to --out (readable by its owner only) and prints its\n" +
			"public key, which the peer gives as --peer-key. With --psk it writes a pre-shared key,\n" +
			"which both sides give as --psk-file, and prints nothing. Keys are base64 text.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "the file to write the key to; it must not exist"},
			&cli.BoolFlag{Name: "psk", Usage: "make a pre-shared key instead of a key pair"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "keygen: no arguments, only --out and --psk")
			}
			path := c.String("out")
			if path == "" {
				return usagef(c, "keygen: --out FILE is needed: a key is written to a file, never to the terminal")
			}
			var secret, public []byte
			if c.Bool("psk") {
				secret = make([]byte, auth.PSKLen)
				if _, err := io.ReadFull(rand.Reader, secret); err != nil {
					return err
				}
			} else {
				k, err := auth.NewPrivateKey(rand.Reader)
				if err != nil {
					return err
				}
				secret, public = k.Bytes(), k.PublicKey().Bytes()
			}
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("keygen: %w", err)
			}
			if _, err := fmt.Fprintln(f, auth.FormatKey(secret)); err != nil {
				f.Close()
				return fmt.Errorf("keygen: %w", err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("keygen: %w", err)
			}
			if public != nil {
				fmt.Fprintln(c.App.Writer, auth.FormatKey(public))
			}
			return nil
		},
	}
}
