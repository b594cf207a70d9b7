-- mroce.lua: a Wireshark dissector for the mroce wire format, version 0
-- (docs/spec.md). Written by "mroce wireshark-lua" (make wireshark) from the
-- spec's layout tables in package proto: do not edit by hand.
--
-- Use: wireshark -X lua_script:tools/wireshark/mroce.lua capture.pcap
-- (or copy it to Wireshark's plugins folder). It dissects UDP port 4797;
-- Decode As... reaches other ports. Every field is named
-- mroce.<part>.<field> in lower case: mroce.commonheader.type,
-- mroce.ackrecord.bitvector, mroce.trailer.crc, as mroce decode prints them.

-- The parts of the wire format (docs/spec.md): name, size in bytes, and
-- every field as {name, byte, bit, width in bits}.
local PARTS = {
  CommonHeader = {size = 28, fields = {
    {"Version", 0, 0, 4},
    {"Protected", 0, 4, 1},
    {"reserved", 0, 5, 3},
    {"Type", 1, 0, 8},
    {"Flags", 2, 0, 16},
    {"HdrLen", 4, 0, 8},
    {"PathID", 5, 0, 8},
    {"Epoch", 6, 0, 2},
    {"KeyPhase", 6, 2, 2},
    {"reserved", 6, 4, 4},
    {"reserved", 7, 0, 8},
    {"DstConnID", 8, 0, 32},
    {"PSN", 12, 0, 32},
    {"DSN", 16, 0, 32},
    {"Timestamp", 20, 0, 32},
    {"Backlog", 24, 0, 32},
  }},
  WriteHeader = {size = 32, fields = {
    {"RKey", 0, 0, 64},
    {"RemoteOffset", 8, 0, 64},
    {"MsgLen", 16, 0, 32},
    {"MsgOffset", 20, 0, 32},
    {"Stream", 24, 0, 16},
    {"reserved", 26, 0, 16},
    {"MSN", 28, 0, 32},
  }},
  ImmHeader = {size = 8, fields = {
    {"RSN", 0, 0, 32},
    {"Immediate", 4, 0, 32},
  }},
  SendHeader = {size = 20, fields = {
    {"Stream", 0, 0, 16},
    {"reserved", 2, 0, 16},
    {"MSN", 4, 0, 32},
    {"RSN", 8, 0, 32},
    {"MsgLen", 12, 0, 32},
    {"MsgOffset", 16, 0, 32},
  }},
  ReadReqHeader = {size = 32, fields = {
    {"Stream", 0, 0, 16},
    {"reserved", 2, 0, 16},
    {"MSN", 4, 0, 32},
    {"RKey", 8, 0, 64},
    {"RemoteOffset", 16, 0, 64},
    {"MsgLen", 24, 0, 32},
    {"ReadTag", 28, 0, 32},
  }},
  ReadRespHeader = {size = 12, fields = {
    {"ReadTag", 0, 0, 32},
    {"MsgOffset", 4, 0, 32},
    {"MsgLen", 8, 0, 32},
  }},
  AckHeader = {size = 16, fields = {
    {"CumDSN", 0, 0, 32},
    {"RecordCount", 4, 0, 8},
    {"CreditStream", 5, 0, 8},
    {"CreditLimit", 6, 0, 16},
    {"RateHint", 8, 0, 64},
  }},
  AckRecord = {size = 52, fields = {
    {"PathID", 0, 0, 8},
    {"Epoch", 1, 0, 2},
    {"reserved", 1, 2, 6},
    {"reserved", 2, 0, 16},
    {"HighestPSN", 4, 0, 32},
    {"CECount", 8, 0, 32},
    {"EchoTimestamp", 12, 0, 32},
    {"ServiceTime", 16, 0, 32},
    {"Bitvector", 20, 0, 256},
  }},
  NackHeader = {size = 20, fields = {
    {"Code", 0, 0, 8},
    {"PathID", 1, 0, 8},
    {"Epoch", 2, 0, 2},
    {"reserved", 2, 2, 6},
    {"reserved", 3, 0, 8},
    {"PSN", 4, 0, 32},
    {"DSN", 8, 0, 32},
    {"Stream", 12, 0, 16},
    {"RetryAfter", 14, 0, 16},
    {"MSN", 16, 0, 32},
  }},
  HandshakeHeader = {size = 44, fields = {
    {"SrcConnID", 0, 0, 32},
    {"InitialPSN", 4, 0, 32},
    {"InitialDSN", 8, 0, 32},
    {"DSNWindow", 12, 0, 32},
    {"MaxPacket", 16, 0, 16},
    {"Paths", 18, 0, 16},
    {"Streams", 20, 0, 16},
    {"ReplyPort", 22, 0, 16},
    {"MaxReadsOut", 24, 0, 16},
    {"MaxReadsIn", 26, 0, 16},
    {"Capabilities", 28, 0, 32},
    {"InboundCapacity", 32, 0, 64},
    {"Mode", 40, 0, 8},
    {"reserved", 41, 0, 8},
    {"reserved", 42, 0, 16},
  }},
  RetryHeader = {size = 16, fields = {
    {"Token", 0, 0, 128},
  }},
  CloseHeader = {size = 8, fields = {
    {"Reason", 0, 0, 16},
    {"reserved", 2, 0, 16},
    {"Detail", 4, 0, 32},
  }},
  ProbeHeader = {size = 4, fields = {
    {"ProbeID", 0, 0, 32},
  }},
  ProbeReplyHeader = {size = 12, fields = {
    {"ProbeID", 0, 0, 32},
    {"EchoTimestamp", 4, 0, 32},
    {"ServiceTime", 8, 0, 32},
  }},
  Trailer = {size = 4, fields = {
    {"CRC", 0, 0, 32},
  }},
  AtomicHeader = {size = 44, fields = {
    {"Stream", 0, 0, 16},
    {"reserved", 2, 0, 16},
    {"MSN", 4, 0, 32},
    {"RKey", 8, 0, 64},
    {"RemoteOffset", 16, 0, 64},
    {"Operand", 24, 0, 64},
    {"Compare", 32, 0, 64},
    {"AtomicTag", 40, 0, 32},
  }},
  AtomicRespHeader = {size = 12, fields = {
    {"AtomicTag", 0, 0, 32},
    {"Original", 4, 0, 64},
  }},
  AuthHello = {size = 100, fields = {
    {"Suite", 0, 0, 8},
    {"Method", 1, 0, 8},
    {"reserved", 2, 0, 16},
    {"Ephemeral", 4, 0, 256},
    {"Static", 36, 0, 384},
    {"Confirm", 84, 0, 128},
  }},
  AuthAccept = {size = 48, fields = {
    {"Ephemeral", 0, 0, 256},
    {"Confirm", 32, 0, 128},
  }},
  Tag = {size = 16, fields = {
    {"Tag", 0, 0, 128},
  }},
}

-- The order the parts are written in, for the field definitions.
local PART_ORDER = {"CommonHeader", "WriteHeader", "ImmHeader", "SendHeader", "ReadReqHeader", "ReadRespHeader", "AckHeader", "AckRecord", "NackHeader", "HandshakeHeader", "RetryHeader", "CloseHeader", "ProbeHeader", "ProbeReplyHeader", "Trailer", "AtomicHeader", "AtomicRespHeader", "AuthHello", "AuthAccept", "Tag"}

-- Every packet type: its name, and the parts after the common header.
local TYPES = {
  [0x01] = {name = "WRITE", parts = {"WriteHeader"}},
  [0x02] = {name = "WRITE_IMM", parts = {"WriteHeader", "ImmHeader"}},
  [0x03] = {name = "SEND", parts = {"SendHeader"}},
  [0x05] = {name = "READ_REQ", parts = {"ReadReqHeader"}},
  [0x06] = {name = "READ_RESP", parts = {"ReadRespHeader"}},
  [0x07] = {name = "FETCH_ADD", parts = {"AtomicHeader"}},
  [0x08] = {name = "CMP_SWAP", parts = {"AtomicHeader"}},
  [0x09] = {name = "ATOMIC_RESP", parts = {"AtomicRespHeader"}},
  [0x10] = {name = "ACK", parts = {"AckHeader"}},
  [0x11] = {name = "NACK", parts = {"NackHeader"}},
  [0x12] = {name = "CNP", parts = {}},
  [0x20] = {name = "CONNECT", parts = {"HandshakeHeader"}},
  [0x21] = {name = "ACCEPT", parts = {"HandshakeHeader"}},
  [0x22] = {name = "CLOSE", parts = {"CloseHeader"}},
  [0x23] = {name = "PROBE", parts = {"ProbeHeader"}},
  [0x24] = {name = "PROBE_REPLY", parts = {"ProbeReplyHeader"}},
  [0x25] = {name = "RETRY", parts = {"RetryHeader"}},
}

local COMMON_LEN, TRAILER_LEN, TAG_LEN, DEFAULT_PORT = 28, 4, 16, 4797

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
