package proto

import "testing"

// FuzzDecode feeds arbitrary bytes to the decoder. The trailer is recomputed
// so mutations get past the CRC and reach field parsing; the raw input is
// also tried as is. Decode must never panic, and whatever it accepts must be
// internally consistent and survive a rebuild through Build and the setters.
func FuzzDecode(f *testing.F) {
	for _, g := range loadGolden(f) {
		f.Add(g.wire)
		// The packet as a placeholder puts its padding in two bytes, then its header.
		var p Packet
		if p.Decode(g.wire) == nil && p.Type() != TypeAck {
			hlen, _ := HeaderLen(p.Type(), 0)
			pad := len(g.wire) - hlen
			f.Add(append([]byte{byte(pad >> 8), byte(pad)}, g.wire[:hlen]...))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		_ = p.Decode(b)
		_ = p.DecodeNoCRC(b)
		if len(b) >= 2 { // the first two bytes are a placeholder's padding, and the rest its header
			checkPlaceholder(t, b[2:], int(b[0])<<8|int(b[1]))
		}
		b = reseal(append([]byte(nil), b...))
		if err := p.Decode(b); err != nil {
			if _, ok := err.(Error); !ok {
				t.Fatalf("Decode returned %T, not a proto.Error", err)
			}
			return
		}
		records := 0
		if p.Type() == TypeAck {
			records = int(p.Ack().RecordCount())
		}
		hlen, err := HeaderLen(p.Type(), records)
		if err != nil || hlen+len(p.Payload)+TrailerLen != len(b) {
			t.Fatalf("accepted packet: header %d + payload %d + trailer != %d (%v)", hlen, len(p.Payload), len(b), err)
		}
		if off, n, ok := p.MsgBounds(); ok && uint64(off)+uint64(len(p.Payload)) > uint64(n) {
			t.Fatalf("accepted payload beyond its message")
		}
		var q Packet
		if err := Build(&q, make([]byte, len(b)), p.Type(), records, len(p.Payload)); err != nil {
			t.Fatalf("Build of an accepted packet: %v", err)
		}
		copyFields(t, &p, &q)
		copy(q.Payload, p.Payload)
		var r Packet
		if err := r.Decode(q.Seal()); err != nil {
			t.Fatalf("rebuilt packet does not decode: %v", err)
		}
		from, to := p.Sections(), r.Sections()
		for i, s := range from {
			if s.Layout.Name == "Trailer" {
				continue // the CRC differs wherever a reserved bit was set
			}
			for _, f := range s.Layout.Fields {
				if f.Reserved() || f.Width > 64 {
					continue
				}
				if a, b := f.Uint(s.Bytes), f.Uint(to[i].Bytes); a != b {
					t.Fatalf("%s.%s: %#x rebuilt as %#x", s.Layout.Name, f.Name, a, b)
				}
			}
		}
	})
}

// checkPlaceholder decodes header with pad bytes of padding and checks what
// an accepted placeholder promises.
func checkPlaceholder(t *testing.T, header []byte, pad int) {
	var p Packet
	if err := p.DecodePlaceholder(header, pad); err != nil {
		if _, ok := err.(Error); !ok {
			t.Fatalf("DecodePlaceholder returned %T, not a proto.Error", err)
		}
		return
	}
	hlen, err := HeaderLen(p.Type(), 0)
	if err != nil || len(p.Bytes()) != len(header) || hlen != len(header) || len(p.Payload)+TrailerLen != pad || p.Pad() != pad {
		t.Fatalf("accepted placeholder: header %d of %d, payload %d, pad %d (%v)", hlen, len(header), len(p.Payload), pad, err)
	}
	if off, n, ok := p.MsgBounds(); ok && uint64(off)+uint64(len(p.Payload)) > uint64(n) {
		t.Fatalf("accepted placeholder payload beyond its message")
	}
}
