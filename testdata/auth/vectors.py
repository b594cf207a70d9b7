#!/usr/bin/env python3
"""Golden vectors of mroce's authenticated mode (docs/spec.md section 13).

An independent computation: it follows the spec's text with the Python
`cryptography` package and the standard library, and shares no code with
package auth. Run it from anywhere; it prints vectors.txt, which
auth/vectors_test.go checks the Go implementation against, and which
`go test ./auth` checks this script still prints when MROCE_REQUIRE_PYCRYPTO
is set (as CI sets it) or the package is installed.

Stated inputs: every key below is SHA-256 of an ASCII label; the handshake
headers are those of testdata/golden/09-connect.hex and 10-accept.hex with
AUTH (0x00000002) set in Capabilities; the protected packets are the
golden packets of the types that are ever protected.
"""
import hashlib
import hmac
import os
import sys

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "golden")


def read_hex(name):
    out = bytearray()
    with open(os.path.join(GOLDEN, name)) as f:
        for line in f:
            line = line.split("#", 1)[0]
            out += bytes.fromhex("".join(line.split()))
    return bytes(out)


def label_key(label):
    return hashlib.sha256(("mroce vector " + label).encode()).digest()


# Section 13.1.
def expand_label(secret, label, context, length):
    full = b"mroce " + label.encode()
    info = length.to_bytes(2, "big") + bytes([len(full)]) + full + bytes([len(context)]) + context
    return HKDFExpand(algorithm=hashes.SHA256(), length=length, info=info).derive(secret)


def mix(ck, ikm):
    return hmac.new(ck, ikm, hashlib.sha256).digest()  # HKDF-Extract(salt=ck, ikm)


def confirm(ck, label, th):
    return hmac.new(expand_label(ck, label, b"", 32), th, hashlib.sha256).digest()[:16]


def sha(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


CK0 = hashlib.sha256(b"mroce auth v0").digest()
KEY_LEN = {1: 16, 2: 32}


def aead(suite, key):
    return AESGCM(key) if suite == 1 else ChaCha20Poly1305(key)


def priv(label):
    return X25519PrivateKey.from_private_bytes(label_key(label))


def pub(k):
    return k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def dh(k, public):
    return k.exchange(X25519PublicKey.from_public_bytes(public))


def with_auth(hs):
    caps = int.from_bytes(hs[28:32], "big") | 2
    return hs[:28] + caps.to_bytes(4, "big") + hs[32:]


# Section 13.3.
def handshake(method, suite, hs_c, hs_a):
    psk = label_key("psk")
    e_i, e_a = priv("initiator ephemeral"), priv("acceptor ephemeral")
    s_i, s_a = priv("initiator static"), priv("acceptor static")
    E_i, E_a, S_i, S_a = pub(e_i), pub(e_a), pub(s_i), pub(s_a)
    head = bytes([suite, method, 0, 0]) + E_i
    if method == 1:
        ck1 = mix(CK0, psk)
        static = bytes(48)
    else:
        cke = mix(CK0, dh(e_i, S_a))
        th_e = sha(hs_c, head)
        key = expand_label(cke, "static", th_e, KEY_LEN[suite])
        static = aead(suite, key).encrypt(bytes(12), S_i, th_e)
        ck1 = mix(cke, dh(s_i, S_a))
        # The acceptor's side of the same steps.
        assert mix(mix(CK0, dh(s_a, E_i)), dh(s_a, S_i)) == ck1
    th_c = sha(hs_c, head + static)
    confirm_c = confirm(ck1, "connect", th_c)
    hello = head + static + confirm_c
    ck2 = mix(ck1, dh(e_a, E_i))
    if method == 2:
        ck2 = mix(ck2, dh(e_a, S_i))
        assert ck2 == mix(mix(ck1, dh(e_i, E_a)), dh(s_i, E_a))
    th_a = sha(th_c, confirm_c, hs_a, E_a)
    accept = E_a + confirm(ck2, "accept", th_a)
    ia = expand_label(ck2, "i2a", th_a, 32)
    ai = expand_label(ck2, "a2i", th_a, 32)
    return hello, accept, ia, ai


# Sections 13.4 and 13.5.
def phase_keys(suite, secret):
    return expand_label(secret, "key", b"", KEY_LEN[suite]), expand_label(secret, "iv", b"", 12)


def next_secret(secret):
    return expand_label(secret, "ku", b"", 32)


def protect(suite, secret, phase, packet, control_seq):
    """Seals an unprotected golden packet (CRC stripped) as the spec says."""
    body = bytearray(packet[:-4])
    body[0] |= 0x08  # Protected
    body[6] = (body[6] & 0xCF) | (phase << 4)  # KeyPhase
    data = body[1] < 0x10
    if not data:
        body[12:16] = control_seq.to_bytes(4, "big")
    n = bytearray(12)
    if data:
        n[5] = body[5]
    else:
        n[4] = 1
    n[8:12] = body[12:16]
    key, iv = phase_keys(suite, secret)
    nonce = bytes(a ^ b for a, b in zip(iv, n))
    header = bytes(body[:28])
    return header + aead(suite, key).encrypt(nonce, bytes(body[28:]), header)


PROTECTED = ["01-write.hex", "02-write-imm.hex", "03-send.hex", "04-read-req.hex",
             "05-read-resp.hex", "06-ack.hex", "07-nack.hex", "08-cnp.hex",
             "11-close.hex", "12-probe.hex", "13-probe-reply.hex"]


def main(out):
    hs_c = with_auth(read_hex("09-connect.hex")[28:72])
    hs_a = with_auth(read_hex("10-accept.hex")[28:72])
    w = lambda k, v: out.write("%s = %s\n" % (k, v.hex()))
    out.write("# Written by testdata/auth/vectors.py: do not edit by hand.\n")
    w("input.psk", label_key("psk"))
    for who in ["initiator ephemeral", "acceptor ephemeral", "initiator static", "acceptor static"]:
        w("input." + who.replace(" ", "-"), label_key(who))
    w("input.connect-handshake", hs_c)
    w("input.accept-handshake", hs_a)
    for method, mname in [(1, "psk"), (2, "keys")]:
        for suite, sname in [(1, "aes128gcm"), (2, "chacha20poly1305")]:
            hello, accept, ia, ai = handshake(method, suite, hs_c, hs_a)
            p = "%s.%s." % (mname, sname)
            w(p + "hello", hello)
            w(p + "accept", accept)
            w(p + "secret-i2a", ia)
            w(p + "secret-a2i", ai)
            s1 = next_secret(ia)
            w(p + "secret-i2a-phase1", s1)
            for phase, secret in [(0, ia), (1, s1)]:
                key, iv = phase_keys(suite, secret)
                w(p + "key-i2a-phase%d" % phase, key)
                w(p + "iv-i2a-phase%d" % phase, iv)
            if method == 1:
                seq = 0
                for name in PROTECTED:
                    packet = read_hex(name)
                    w(p + "packet." + name[:-4], protect(suite, ia, 0, packet, seq))
                    if packet[1] >= 0x10:
                        seq += 1
                w(p + "packet.01-write.phase1", protect(suite, s1, 1, read_hex("01-write.hex"), 0))
            # What the acceptor sends, under the other direction's secret:
            # a READ response and an ACK, its first control packet.
            w(p + "packet-a2i.05-read-resp", protect(suite, ai, 0, read_hex("05-read-resp.hex"), 0))
            w(p + "packet-a2i.06-ack", protect(suite, ai, 0, read_hex("06-ack.hex"), 0))


if __name__ == "__main__":
    main(sys.stdout)
