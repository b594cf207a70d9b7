package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/proto"
)

// wiresharkCommand writes the Wireshark dissector that make wireshark puts
// in tools/wireshark/mroce.lua. It is hidden because it is a build step.
// The field tables and each packet type's parts come from the spec's
// layout tables in package proto, which spec_test.go checks against
// docs/spec.md, so the dissector cannot drift from the wire format.
// TestWiresharkDissector checks that the committed file is what this
// writes, and runs it in tshark.
func wiresharkCommand() *cli.Command {
	return &cli.Command{
		Name:   "wireshark-lua",
		Usage:  "write the Wireshark dissector (Lua) for the wire format to standard output",
		Hidden: true,
		Action: func(c *cli.Context) error { return writeDissector(c.App.Writer) },
	}
}

// typeParts lists, for every packet type, the parts its header has after
// the common header, as proto.Packet.Sections finds them. The dissector
// adds an ACK's records itself, RecordCount of them.
func typeParts() (map[proto.Type][]string, error) {
	out := map[proto.Type][]string{}
	buf := make([]byte, 256)
	for t := 0; t < 256; t++ {
		typ := proto.Type(t)
		if !typ.Known() {
			continue
		}
		var p proto.Packet
		if err := proto.Build(&p, buf, typ, 0, 0); err != nil {
			return nil, fmt.Errorf("building a %v: %w", typ, err)
		}
		b := append([]byte(nil), p.Seal()...)
		if err := p.Decode(b); err != nil {
			return nil, fmt.Errorf("decoding a %v: %w", typ, err)
		}
		parts := []string{}
		for _, s := range p.Sections() {
			if n := s.Layout.Name; n != "CommonHeader" && n != "Trailer" && n != "AckRecord" && n != "Tag" {
				parts = append(parts, n)
			}
		}
		out[typ] = parts
	}
	return out, nil
}

func writeDissector(w io.Writer) error {
	parts, err := typeParts()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprint(&b, luaHead)
	fmt.Fprintln(&b, "-- The parts of the wire format (docs/spec.md): name, size in bytes, and")
	fmt.Fprintln(&b, "-- every field as {name, byte, bit, width in bits}.")
	fmt.Fprintln(&b, "local PARTS = {")
	for _, l := range proto.Layouts {
		fmt.Fprintf(&b, "  %s = {size = %d, fields = {\n", l.Name, l.Size)
		for _, f := range l.Fields {
			fmt.Fprintf(&b, "    {%q, %d, %d, %d},\n", f.Name, f.Byte, f.Bit, f.Width)
		}
		fmt.Fprintln(&b, "  }},")
	}
	fmt.Fprintln(&b, "}")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "-- The order the parts are written in, for the field definitions.")
	fmt.Fprint(&b, "local PART_ORDER = {")
	for i, l := range proto.Layouts {
		if i > 0 {
			fmt.Fprint(&b, ", ")
		}
		fmt.Fprintf(&b, "%q", l.Name)
	}
	fmt.Fprintln(&b, "}")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "-- Every packet type: its name, and the parts after the common header.")
	fmt.Fprintln(&b, "local TYPES = {")
	for t := 0; t < 256; t++ {
		ps, ok := parts[proto.Type(t)]
		if !ok {
			continue
		}
		quoted := make([]string, len(ps))
		for i, p := range ps {
			quoted[i] = fmt.Sprintf("%q", p)
		}
		fmt.Fprintf(&b, "  [0x%02x] = {name = %q, parts = {%s}},\n", t, proto.Type(t).String(), strings.Join(quoted, ", "))
	}
	fmt.Fprintln(&b, "}")
	fmt.Fprintf(&b, "\nlocal COMMON_LEN, TRAILER_LEN, TAG_LEN, DEFAULT_PORT = %d, %d, %d, %d\n", proto.CommonHeaderLen, proto.TrailerLen, proto.TagLen, proto.DefaultPort)
	fmt.Fprint(&b, luaBody)
	_, err = w.Write(b.Bytes())
	return err
}

const luaHead = `-- mroce.lua: a Wireshark dissector for the mroce wire format, version 0
-- (docs/spec.md). Written by "mroce wireshark-lua" (make wireshark) from the
-- spec's layout tables in package proto: do not edit by hand.
--
-- Use: wireshark -X lua_script:tools/wireshark/mroce.lua capture.pcap
-- (or copy it to Wireshark's plugins folder). It dissects UDP port 4797;
-- Decode As... reaches other ports. Every field is named
-- mroce.<part>.<field> in lower case: mroce.commonheader.type,
-- mroce.ackrecord.bitvector, mroce.trailer.crc, as mroce decode prints them.

`

const luaBody = `
local p_mroce = Proto("mroce", "mroce transport")

-- One ProtoField per field that is not reserved; fields narrower than a
-- byte read their byte through a mask.
local FIELDS = {}
local all = {}
for _, part in ipairs(PART_ORDER) do
  FIELDS[part] = {}
  for i, f in ipairs(PARTS[part].fields) do
    local name, bit, width = f[1], f[3], f[4]
    if name ~= "reserved" then
      local abbrev = "mroce." .. string.lower(part) .. "." .. string.lower(name)
      local pf
      if width > 64 then
        pf = ProtoField.bytes(abbrev, name)
      elseif width < 8 then
        local mask = (2 ^ width - 1) * 2 ^ (8 - bit - width)
        pf = ProtoField.uint8(abbrev, name, base.DEC, nil, mask)
      elseif width == 8 then
        pf = ProtoField.uint8(abbrev, name, base.DEC)
      elseif width == 16 then
        pf = ProtoField.uint16(abbrev, name, base.DEC)
      elseif width == 32 then
        pf = ProtoField.uint32(abbrev, name, base.DEC)
      else
        pf = ProtoField.uint64(abbrev, name, base.DEC)
      end
      FIELDS[part][i] = pf
      table.insert(all, pf)
    end
  end
end
local f_payload = ProtoField.bytes("mroce.payload", "Payload")
local f_encrypted = ProtoField.bytes("mroce.encrypted", "Encrypted: type extensions and payload")
table.insert(all, f_payload)
table.insert(all, f_encrypted)
p_mroce.fields = all

local e_short = ProtoExpert.new("mroce.short", "shorter than its header says", expert.group.MALFORMED, expert.severity.ERROR)
local e_protected = ProtoExpert.new("mroce.protected", "protected (docs/spec.md section 13.4): only the common header is in the clear", expert.group.SECURITY, expert.severity.NOTE)
p_mroce.experts = {e_short, e_protected}

-- bit_set reports whether the bit of value mask is set in v.
local function bit_set(v, mask)
  return math.floor(v / mask) % 2 == 1
end

-- add_part adds part name at offset off of tvb under tree and returns the
-- offset after it, or nil when the packet ends first.
local function add_part(tree, tvb, name, off, title)
  local part = PARTS[name]
  if off + part.size > tvb:len() then
    return nil
  end
  local sub = tree:add(p_mroce, tvb(off, part.size), title or name)
  for i, f in ipairs(part.fields) do
    local pf = FIELDS[name][i]
    if pf then
      local byte, width = f[2], f[4]
      local len = math.max(1, math.floor(width / 8))
      sub:add(pf, tvb(off + byte, len))
    end
  end
  return off + part.size
end

function p_mroce.dissector(tvb, pinfo, tree)
  if tvb:len() < COMMON_LEN + TRAILER_LEN then
    return 0
  end
  local typ = tvb(1, 1):uint()
  local t = TYPES[typ]
  pinfo.cols.protocol = "MROCE"
  pinfo.cols.info = t and t.name or string.format("UNKNOWN(0x%02x)", typ)
  local root = tree:add(p_mroce, tvb(), "mroce, " .. (t and t.name or "unknown type"))
  local off = add_part(root, tvb, "CommonHeader", 0)
  if bit_set(tvb(0, 1):uint(), 0x08) then -- Protected: the rest is encrypted, a tag ends it
    pinfo.cols.info = tostring(pinfo.cols.info) .. " [protected]"
    root:add_proto_expert_info(e_protected)
    if tvb:len() < COMMON_LEN + TAG_LEN then
      root:add_proto_expert_info(e_short)
      return tvb:len()
    end
    if tvb:len() > COMMON_LEN + TAG_LEN then
      root:add(f_encrypted, tvb(COMMON_LEN, tvb:len() - COMMON_LEN - TAG_LEN))
    end
    add_part(root, tvb, "Tag", tvb:len() - TAG_LEN)
    return tvb:len()
  end
  if t then
    for _, name in ipairs(t.parts) do
      local start = off
      off = off and add_part(root, tvb, name, off)
      if off and name == "AckHeader" then
        local n = tvb(start + 4, 1):uint() -- RecordCount
        for i = 0, n - 1 do
          off = off and add_part(root, tvb, "AckRecord", off, "AckRecord #" .. i)
        end
      end
    end
  end
  -- A CONNECT or ACCEPT with AUTH in its Capabilities carries its key
  -- exchange first in its payload (docs/spec.md section 13.3).
  if off and (typ == 0x20 or typ == 0x21) and bit_set(tvb(COMMON_LEN + 28, 4):uint(), 2) then
    off = add_part(root, tvb, typ == 0x20 and "AuthHello" or "AuthAccept", off)
  end
  if not off then
    root:add_proto_expert_info(e_short)
    return tvb:len()
  end
  local hdrlen = math.max(tvb(4, 1):uint() * 4, off) -- HdrLen, in 4-byte words; a key exchange after it
  local payload = tvb:len() - TRAILER_LEN - hdrlen
  if payload > 0 then
    root:add(f_payload, tvb(hdrlen, payload))
  end
  add_part(root, tvb, "Trailer", tvb:len() - TRAILER_LEN)
  return tvb:len()
end

DissectorTable.get("udp.port"):add(DEFAULT_PORT, p_mroce)
`
