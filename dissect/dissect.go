// Package dissect explains mroce packets as a Wireshark dissector does.
// It prints a decoded packet field by field, each value with what it
// means where docs/spec.md sections 4, 5, 7 and 8 give it a meaning. It
// explains a packet that failed to decode by the check of section 9 it
// failed and the values that failed it. It walks the spec's layout tables
// through proto.Packet.Sections and proto.FieldLayout.Uint, so what it
// prints follows the spec. The command mroce decode prints what it
// writes.
package dissect

import (
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/proto"
)

// payloadShown is how many payload bytes are printed.
const payloadShown = 32

// Summary is the title line of a decoded packet, with its type, class and
// the sizes of its parts.
func Summary(p *proto.Packet) string {
	class := "control"
	if p.Type().IsData() {
		class = "data"
	}
	total, trailer, what := len(p.Bytes()), proto.TrailerLen, "trailer"
	if p.Common.Protected() {
		trailer, what = proto.TagLen, "tag"
	}
	return fmt.Sprintf("%v (%s), %d bytes = header %d + payload %d + %s %d",
		p.Type(), class, total, total-len(p.Payload)-trailer, len(p.Payload), what, trailer)
}

// Fields writes every part of p, one line per field, the payload before the
// trailer. A reserved field is shown only when it is not 0, as the spec
// asks receivers to ignore it. crcChecked says whether Decode checked the
// CRC; when it did not, the trailer is compared with the CRC32C here.
func Fields(w io.Writer, p *proto.Packet, crcChecked bool) {
	off := 0
	for _, s := range p.Sections() {
		if s.Layout.Name == "Trailer" || s.Layout.Name == "Tag" {
			printPayload(w, p, off)
			off = len(p.Bytes()) - len(s.Bytes)
		}
		title := s.Layout.Name
		if s.Layout.Name == "AckRecord" {
			title = fmt.Sprintf("AckRecord #%d", s.Index)
		}
		fmt.Fprintf(w, "  %s, bytes %d-%d\n", title, off, off+len(s.Bytes)-1)
		for _, f := range s.Layout.Fields {
			if f.Width > 64 {
				printWideField(w, s, f)
				continue
			}
			v := f.Uint(s.Bytes)
			var meaning string
			if f.Reserved() {
				if v == 0 {
					continue // sent as 0, so there is nothing to show
				}
				meaning = fmt.Sprintf("[!] nonzero reserved field (%s): must be sent as 0, ignored on receipt", position(f))
			} else {
				meaning = fieldMeaning(p, s, f, v, crcChecked)
			}
			printField(w, f.Name, fmt.Sprint(v), hexValue(v, f.Width), meaning)
		}
		off += len(s.Bytes)
	}
}

func printField(w io.Writer, name, dec, hexv, meaning string) {
	line := fmt.Sprintf("    %-15s %20s  %-18s  %s", name, dec, hexv, meaning)
	fmt.Fprintln(w, strings.TrimRight(line, " "))
}

// hexValue writes v with as many hex digits as a field of width bits has.
func hexValue(v uint64, width int) string {
	return fmt.Sprintf("0x%0*x", (width+3)/4, v)
}

// position says where a field is in its part, for reserved fields.
func position(f proto.FieldLayout) string {
	switch {
	case f.Width == 1:
		return fmt.Sprintf("byte %d, bit %d", f.Byte, f.Bit)
	case f.Width < 8:
		return fmt.Sprintf("byte %d, bits %d-%d", f.Byte, f.Bit, f.Bit+f.Width-1)
	case f.Width == 8:
		return fmt.Sprintf("byte %d", f.Byte)
	}
	return fmt.Sprintf("bytes %d-%d", f.Byte, f.Byte+f.Width/8-1)
}

// printWideField prints a field wider than 64 bits: the AckRecord
// Bitvector, or the RetryHeader Token.
func printWideField(w io.Writer, s proto.Section, f proto.FieldLayout) {
	raw := s.Bytes[f.Byte : f.Byte+f.Width/8]
	fmt.Fprintf(w, "    %-15s %20s  %s\n", f.Name, fmt.Sprintf("(%d bits)", f.Width), hex.EncodeToString(raw))
	switch {
	case s.Layout.Name == "AckRecord" && f.Name == "Bitvector":
		fmt.Fprintf(w, "    %-15s %20s  %s\n", "", "", bitvectorSummary(proto.AckRecord(s.Bytes)))
	case s.Layout.Name == "RetryHeader" && f.Name == "Token":
		fmt.Fprintf(w, "    %-15s %20s  %s\n", "", "", "opaque: the initiator returns it as its CONNECT's payload (spec section 8.1)")
	}
}

// maxRangesShown bounds the list of missing PSN ranges of a bitvector.
const maxRangesShown = 16

// bitvectorSummary lists the PSNs below HighestPSN that an AckRecord
// reports missing, as ranges in ascending serial order modulo 2^32. A
// clear bit k says PSN HighestPSN-1-k was not received.
func bitvectorSummary(r proto.AckRecord) string {
	high := r.HighestPSN()
	type psnRange struct{ lo, hi uint32 } // lo, lo+1 and on to hi, in serial order
	var ranges []psnRange
	missing := 0
	// Oldest first. Bit 255 is PSN high-256, and bit 0 is PSN high-1.
	for k := proto.BitvectorBits - 1; k >= 0; k-- {
		if r.Received(k) {
			continue
		}
		missing++
		psn := high - 1 - uint32(k)
		if n := len(ranges); n > 0 && ranges[n-1].hi+1 == psn {
			ranges[n-1].hi = psn
		} else {
			ranges = append(ranges, psnRange{psn, psn})
		}
	}
	if missing == 0 {
		return fmt.Sprintf("all %d PSNs below HighestPSN received (%d-%d)",
			proto.BitvectorBits, high-proto.BitvectorBits, high-1)
	}
	parts := make([]string, 0, min(len(ranges), maxRangesShown)+1)
	for i, rg := range ranges {
		if i == maxRangesShown {
			parts = append(parts, fmt.Sprintf("and %d more ranges", len(ranges)-maxRangesShown))
			break
		}
		switch {
		case rg.lo == rg.hi:
			parts = append(parts, fmt.Sprint(rg.lo))
		case rg.lo > rg.hi:
			parts = append(parts, fmt.Sprintf("%d-%d (wraps)", rg.lo, rg.hi))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", rg.lo, rg.hi))
		}
	}
	return fmt.Sprintf("missing %d of the %d PSNs below HighestPSN %d: %s",
		missing, proto.BitvectorBits, high, strings.Join(parts, ", "))
}

// printPayload prints the payload's length and its first bytes: what
// follows the key exchange of a CONNECT or ACCEPT with AUTH, which Fields
// prints as a part.
func printPayload(w io.Writer, p *proto.Packet, off int) {
	payload := p.Payload
	if h, ok := p.AuthHello(); ok {
		payload = payload[len(h):]
	}
	if _, ok := p.AuthAccept(); ok {
		payload = nil
	}
	n := len(payload)
	if n == 0 {
		fmt.Fprintln(w, "  Payload: none")
		return
	}
	what := ""
	if msgOff, msgLen, ok := p.MsgBounds(); ok {
		what = fmt.Sprintf(": message bytes %d-%d of %d", msgOff, uint64(msgOff)+uint64(n)-1, msgLen)
	} else if p.Type() == proto.TypeProbe {
		what = ": padding, ignored"
	} else if _, ok := p.Token(); ok {
		what = ": the token of a RETRY, returned unchanged (spec section 8.1)"
	}
	fmt.Fprintf(w, "  Payload, bytes %d-%d: %d bytes%s\n", off, off+n-1, n, what)
	shown := payload[:min(n, payloadShown)]
	more := ""
	if n > payloadShown {
		more = fmt.Sprintf(" ... (first %d of %d bytes)", payloadShown, n)
	}
	fmt.Fprintf(w, "    %s%s\n", spacedHex(shown), more)
}

func spacedHex(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String()
}

// fieldMeaning says what value v of field f of section s means, where the
// spec gives it one, and "" otherwise. It is one switch over the spec's
// field names, a case per field, and reads best whole.
func fieldMeaning(p *proto.Packet, s proto.Section, f proto.FieldLayout, v uint64, crcChecked bool) string {
	part := s.Layout.Name
	switch f.Name {
	case "Version":
		return fmt.Sprintf("wire format version %d", v)
	case "Type":
		t := proto.Type(v)
		if t.IsData() {
			return t.String() + ", data"
		}
		return t.String() + ", control"
	case "Flags":
		fl := proto.Flags(v)
		m := fl.String()
		if fl&proto.FlagsReserved != 0 {
			m += " [!] reserved flag bits set: must be sent as 0, ignored on receipt"
		}
		return m
	case "HdrLen":
		return fmt.Sprintf("%d words = %d bytes", v, v*4)
	case "Epoch":
		return fmt.Sprintf("path epoch %d (mod 4)", v)
	case "Protected":
		if v == 1 {
			return "protected: encrypted after this header, a tag ends it (spec section 13.4)"
		}
		return "not protected: a CRC32C ends it"
	case "KeyPhase":
		if p.Common.Protected() {
			return fmt.Sprintf("key phase %d (mod 4, spec section 13.5)", v)
		}
		return ""
	case "Suite":
		return auth.Suite(v).String()
	case "Method":
		return auth.Method(v).String()
	case "Backlog":
		if v == 0xFFFFFFFF {
			return fmt.Sprintf("saturated: %d bytes or more unsent", proto.DecodeBacklog(uint32(v)))
		}
		return fmt.Sprintf("%d x %d = %s unsent", v, proto.BacklogUnit, bytesText(proto.DecodeBacklog(uint32(v))))
	case "Timestamp", "EchoTimestamp", "ServiceTime":
		return nsText(v)
	case "RateHint":
		switch v {
		case proto.RateStop:
			return "0 = stop sending new data"
		case proto.RateNoLimit:
			return "all ones = no limit"
		}
		return rateText(v)
	case "InboundCapacity":
		if v == proto.CapacityUnknown {
			return "all ones = unknown"
		}
		return rateText(v)
	case "RecordCount":
		return fmt.Sprintf("%d AckRecords", v)
	case "Code":
		if part == "NackHeader" {
			return nackText(proto.NackCode(v))
		}
	case "Reason":
		if part == "CloseHeader" {
			r := proto.CloseReason(v)
			if strings.HasPrefix(r.String(), "UNKNOWN") {
				return r.String() + ": unknown reason, treated as NORMAL"
			}
			return r.String()
		}
	case "Detail":
		if part == "CloseHeader" {
			return closeDetail(p.Close().Reason(), v)
		}
	case "Mode":
		m := proto.Mode(v)
		if strings.HasPrefix(m.String(), "UNKNOWN") {
			return m.String() + " [!] not a mode of version 0"
		}
		return m.String()
	case "Capabilities":
		c := proto.Capabilities(v)
		m := c.String()
		if c&^(proto.CapAtomics|proto.CapAuth|proto.CapCredits|proto.CapRecut) != 0 {
			m += " [!] reserved capability bits set: must be sent as 0, ignored"
		}
		return m
	case "MaxPacket", "MsgLen", "MsgOffset":
		return fmt.Sprintf("%d bytes", v)
	case "RemoteOffset":
		if p.Type().IsAtomic() && v%8 != 0 {
			return fmt.Sprintf("%d bytes [!] not a multiple of 8: refused with BOUNDS (spec section 5.12)", v)
		}
		return fmt.Sprintf("%d bytes", v)
	case "Operand":
		if p.Type() == proto.TypeFetchAdd {
			return "added to the target"
		}
		return "written if the target holds Compare"
	case "Compare":
		if p.Type() == proto.TypeFetchAdd {
			return "ignored by FETCH_ADD"
		}
		return "compared with the target"
	case "Original":
		return "the target before the operation"
	case "RetryAfter":
		return fmt.Sprintf("%d µs", v)
	case "ReplyPort":
		return fmt.Sprintf("UDP port %d", v)
	case "DSNWindow":
		return fmt.Sprintf("%d DSNs", v)
	case "CRC":
		if part == "Trailer" {
			return crcText(p, uint32(v), crcChecked)
		}
	}
	return ""
}

func nackText(c proto.NackCode) string {
	name := c.String()
	switch {
	case strings.HasPrefix(name, "UNKNOWN"):
		return name + ": reserved code, treated as fatal"
	case c.Fatal():
		return name + ", fatal"
	}
	return name + ", retryable"
}

// closeDetail explains a CLOSE Detail, which depends on the Reason.
func closeDetail(r proto.CloseReason, v uint64) string {
	switch r {
	case proto.CloseRefused:
		if v != 0 {
			return fmt.Sprintf("no connection with id 0x%08x", v)
		}
	case proto.CloseVersion:
		return fmt.Sprintf("highest supported version %d", v)
	case proto.CloseApplication:
		return fmt.Sprintf("application code %d", v)
	case proto.CloseFatal:
		if v > 0xFF {
			return "NACK code out of range"
		}
		return "NACK code " + nackText(proto.NackCode(v))
	case proto.CloseParams:
		hs, _ := proto.LayoutOf("HandshakeHeader")
		for _, f := range hs.Fields {
			end := f.Byte + max(f.Width/8, 1)
			if !f.Reserved() && uint64(f.Byte) <= v && v < uint64(end) {
				return fmt.Sprintf("byte %d of HandshakeHeader: %s refused", v, f.Name)
			}
		}
		return fmt.Sprintf("byte %d of HandshakeHeader: no field there", v)
	}
	return ""
}

func crcText(p *proto.Packet, trailer uint32, checked bool) string {
	raw := p.Bytes()
	computed := proto.Checksum(raw[:len(raw)-proto.TrailerLen])
	switch {
	case checked:
		return "CRC32C ok"
	case computed == trailer:
		return "not checked (--no-crc); it matches the CRC32C of the packet"
	}
	return fmt.Sprintf("not checked (--no-crc); [!] the CRC32C of the packet is 0x%08x", computed)
}

func nsText(v uint64) string {
	if v < 1000 {
		return fmt.Sprintf("%d ns", v)
	}
	return fmt.Sprintf("%d ns = %v", v, time.Duration(v))
}

func rateText(v uint64) string {
	gbps := strconv.FormatFloat(float64(v)*8/1e9, 'f', -1, 64)
	return fmt.Sprintf("%d bytes/s = %s Gb/s", v, gbps)
}

// bytesText writes a byte count, with a binary unit when it is large.
func bytesText(n uint64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	v := float64(n) / 1024
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%d bytes (%s %s)", n, strconv.FormatFloat(v, 'f', -1, 64), units[i])
}

// ExplainError says which check of proto.Packet.Decode b failed, with the
// values that failed it, and names the drop cause as spec section 9 does
// (bad-crc, bad-version and so on), which receivers count under. err is
// what Decode returned. It must not panic on any input, so it reads only
// bytes that are there.
func ExplainError(b []byte, err error) string {
	msg := explain(b, err)
	if e, ok := err.(proto.Error); ok {
		return msg + " [" + e.Name() + ", spec section 9]"
	}
	return msg
}

// explain is ExplainError's sentence, without the cause's name.
func explain(b []byte, err error) string {
	n := len(b)
	byteAt := func(i int) int {
		if i < n {
			return int(b[i])
		}
		return 0
	}
	typ := proto.Type(byteAt(1))
	switch err {
	case proto.ErrTruncated:
		if n < proto.MinPacketLen {
			return fmt.Sprintf("truncated: %d bytes, need at least %d", n, proto.MinPacketLen)
		}
		records := 0
		if typ == proto.TypeAck {
			ackMin := proto.CommonHeaderLen + proto.AckHeaderLen + proto.TrailerLen
			if n < ackMin {
				return fmt.Sprintf("truncated: %d bytes, an ACK needs at least %d (common header, ACK header, trailer)", n, ackMin)
			}
			records = byteAt(proto.CommonHeaderLen + 4)
		}
		if hlen, herr := proto.HeaderLen(typ, records); herr == nil {
			what := typ.String()
			if typ == proto.TypeAck {
				what = fmt.Sprintf("ACK with %d records", records)
			}
			return fmt.Sprintf("truncated: %d bytes, type %s needs at least %d (header %d + trailer %d)",
				n, what, hlen+proto.TrailerLen, hlen, proto.TrailerLen)
		}
		return fmt.Sprintf("truncated: %d bytes", n)
	case proto.ErrBadCRC:
		if n >= proto.TrailerLen {
			trailer := uint32(b[n-4])<<24 | uint32(b[n-3])<<16 | uint32(b[n-2])<<8 | uint32(b[n-1])
			return fmt.Sprintf("bad CRC: trailer 0x%08x, computed 0x%08x (CRC32C of bytes 0-%d)",
				trailer, proto.Checksum(b[:n-4]), n-5)
		}
	case proto.ErrVersion:
		return fmt.Sprintf("unsupported version %d (this tool decodes version %d)", byteAt(0)>>4, proto.Version)
	case proto.ErrUnknownType:
		if use := proto.SetAside(typ); use != "" {
			return fmt.Sprintf("unknown type 0x%02x (reserved for %s, not defined in version %d)", uint8(typ), use, proto.Version)
		}
		return fmt.Sprintf("unknown type 0x%02x (not defined in version %d)", uint8(typ), proto.Version)
	case proto.ErrRecordCount:
		return fmt.Sprintf("bad ACK record count: RecordCount %d, at most %d",
			byteAt(proto.CommonHeaderLen+4), proto.MaxAckRecords)
	case proto.ErrHeaderLength:
		words := byteAt(4)
		records := 0
		what := typ.String()
		if typ == proto.TypeAck {
			records = byteAt(proto.CommonHeaderLen + 4)
			what = fmt.Sprintf("ACK with %d records", records)
		}
		if hlen, herr := proto.HeaderLen(typ, records); herr == nil {
			return fmt.Sprintf("header length: HdrLen %d words = %d bytes, type %s needs %d", words, words*4, what, hlen)
		}
		return fmt.Sprintf("header length: HdrLen %d words = %d bytes", words, words*4)
	case proto.ErrPayload:
		return payloadError(b, typ)
	}
	return strings.TrimPrefix(err.Error(), "proto: ")
}

// payloadError explains ErrPayload, a payload on a type that has none or
// message data beyond MsgLen.
func payloadError(b []byte, typ proto.Type) string {
	records := 0
	if typ == proto.TypeAck && len(b) > proto.CommonHeaderLen+4 {
		records = int(b[proto.CommonHeaderLen+4])
	}
	hlen, err := proto.HeaderLen(typ, records)
	if err != nil || len(b) < hlen+proto.TrailerLen {
		return "payload not allowed"
	}
	payload := len(b) - hlen - proto.TrailerLen
	var part string
	switch typ {
	case proto.TypeWrite, proto.TypeWriteImm:
		part = "WriteHeader"
	case proto.TypeSend:
		part = "SendHeader"
	case proto.TypeReadResp:
		part = "ReadRespHeader"
	case proto.TypeConnect, proto.TypeAccept:
		if proto.HandshakeHeader(b[proto.CommonHeaderLen:hlen]).Capabilities()&proto.CapAuth != 0 {
			want := fmt.Sprintf("its %d-byte AuthHello, then a %d-byte token or nothing", proto.AuthHelloLen, proto.TokenLen)
			if typ == proto.TypeAccept {
				want = fmt.Sprintf("its %d-byte AuthAccept", proto.AuthAcceptLen)
			}
			return fmt.Sprintf("payload not allowed: a %v with AUTH carries %s (spec section 13.3), but %d bytes lie between header and trailer", typ, want, payload)
		}
		if typ == proto.TypeAccept {
			return fmt.Sprintf("payload not allowed: type ACCEPT carries none, but %d bytes lie between header and trailer", payload)
		}
		return fmt.Sprintf("payload not allowed: a CONNECT carries none or a %d-byte token, but %d bytes lie between header and trailer",
			proto.TokenLen, payload)
	default:
		return fmt.Sprintf("payload not allowed: type %v carries none, but %d bytes lie between header and trailer", typ, payload)
	}
	l, ok := proto.LayoutOf(part)
	ext := b[proto.CommonHeaderLen:hlen]
	if !ok || len(ext) < l.Size {
		return "payload not allowed"
	}
	var off, length uint64
	for _, f := range l.Fields {
		switch f.Name {
		case "MsgOffset":
			off = f.Uint(ext)
		case "MsgLen":
			length = f.Uint(ext)
		}
	}
	return fmt.Sprintf("payload not allowed: MsgOffset %d + payload %d bytes = %d, beyond MsgLen %d",
		off, payload, off+uint64(payload), length)
}

// Sealed writes what can be read of a protected packet without its keys:
// the common header, field by field, then how many bytes are encrypted
// and the tag (spec section 13.4).
func Sealed(w io.Writer, b []byte) {
	if len(b) < proto.MinProtectedLen {
		fmt.Fprintf(w, "  truncated: %d bytes, a protected packet is at least %d\n", len(b), proto.MinProtectedLen)
		return
	}
	common, _ := proto.LayoutOf("CommonHeader")
	var p proto.Packet // for the meanings, which read the type and flags
	p.Common = proto.CommonHeader(b[:proto.CommonHeaderLen])
	s := proto.Section{Layout: common, Bytes: b[:proto.CommonHeaderLen]}
	fmt.Fprintf(w, "  CommonHeader, bytes 0-%d\n", proto.CommonHeaderLen-1)
	for _, f := range common.Fields {
		v := f.Uint(s.Bytes)
		if f.Reserved() {
			if v != 0 {
				printField(w, f.Name, fmt.Sprint(v), hexValue(v, f.Width), "[!] nonzero reserved field")
			}
			continue
		}
		meaning := ""
		switch f.Name {
		case "PSN":
			if !p.Type().IsData() {
				meaning = "control sequence number (spec section 13.4)"
			}
		case "Version", "Type", "Flags", "HdrLen", "Epoch", "Protected", "KeyPhase", "Timestamp", "Backlog":
			meaning = fieldMeaning(&p, s, f, v, false)
		}
		printField(w, f.Name, fmt.Sprint(v), hexValue(v, f.Width), meaning)
	}
	n := len(b) - proto.CommonHeaderLen - proto.TagLen
	if n > 0 {
		fmt.Fprintf(w, "  Encrypted, bytes %d-%d: %d bytes of type extensions and payload\n", proto.CommonHeaderLen, proto.CommonHeaderLen+n-1, n)
	}
	fmt.Fprintf(w, "  Tag, bytes %d-%d\n    %s\n", len(b)-proto.TagLen, len(b)-1, spacedHex(b[len(b)-proto.TagLen:]))
}
