-- mroce.lua: a Wireshark dissector for the mroce wire format, version 0
-- (docs/spec.md). Written by "mroce wireshark-lua" (make wireshark) from the
-- spec's layout tables in package proto: do not edit by hand.
--
-- Use: wireshark -X lua_script:tools/wireshark/mroce.lua capture.pcap
-- (or copy it to Wireshark's plugins folder). It dissects UDP port 4797,
-- and any other UDP datagram that is a version-0 packet by its type, its
-- header length and its CRC (a heuristic dissector), so that both
-- directions of a conversation show, whatever ports they use. Every
-- field is named
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

-- Every packet type: its name, its header's length in bytes (an ACK's
-- without records), whether it is data, and the parts after the common
-- header.
local TYPES = {
  [0x01] = {name = "WRITE", hdrlen = 60, data = true, parts = {"WriteHeader"}},
  [0x02] = {name = "WRITE_IMM", hdrlen = 68, data = true, parts = {"WriteHeader", "ImmHeader"}},
  [0x03] = {name = "SEND", hdrlen = 48, data = true, parts = {"SendHeader"}},
  [0x05] = {name = "READ_REQ", hdrlen = 60, data = true, parts = {"ReadReqHeader"}},
  [0x06] = {name = "READ_RESP", hdrlen = 40, data = true, parts = {"ReadRespHeader"}},
  [0x07] = {name = "FETCH_ADD", hdrlen = 72, data = true, parts = {"AtomicHeader"}},
  [0x08] = {name = "CMP_SWAP", hdrlen = 72, data = true, parts = {"AtomicHeader"}},
  [0x09] = {name = "ATOMIC_RESP", hdrlen = 40, data = true, parts = {"AtomicRespHeader"}},
  [0x10] = {name = "ACK", hdrlen = 44, data = false, parts = {"AckHeader"}},
  [0x11] = {name = "NACK", hdrlen = 48, data = false, parts = {"NackHeader"}},
  [0x12] = {name = "CNP", hdrlen = 28, data = false, parts = {}},
  [0x20] = {name = "CONNECT", hdrlen = 72, data = false, parts = {"HandshakeHeader"}},
  [0x21] = {name = "ACCEPT", hdrlen = 72, data = false, parts = {"HandshakeHeader"}},
  [0x22] = {name = "CLOSE", hdrlen = 36, data = false, parts = {"CloseHeader"}},
  [0x23] = {name = "PROBE", hdrlen = 32, data = false, parts = {"ProbeHeader"}},
  [0x24] = {name = "PROBE_REPLY", hdrlen = 40, data = false, parts = {"ProbeReplyHeader"}},
  [0x25] = {name = "RETRY", hdrlen = 44, data = false, parts = {"RetryHeader"}},
}

-- The names of coded values, for the fields that carry them.
local VALS = {
  ["CommonHeader.Type"] = {[1] = "WRITE", [2] = "WRITE_IMM", [3] = "SEND", [5] = "READ_REQ", [6] = "READ_RESP", [7] = "FETCH_ADD", [8] = "CMP_SWAP", [9] = "ATOMIC_RESP", [16] = "ACK", [17] = "NACK", [18] = "CNP", [32] = "CONNECT", [33] = "ACCEPT", [34] = "CLOSE", [35] = "PROBE", [36] = "PROBE_REPLY", [37] = "RETRY", },
  ["NackHeader.Code"] = {[1] = "BAD_KEY", [2] = "ACCESS", [3] = "BOUNDS", [4] = "RNR", [5] = "BAD_STREAM", [6] = "READ_LIMIT", [7] = "BAD_TAG", [8] = "UNSUPPORTED", [9] = "SEQ_ERR", [10] = "RESOURCE", },
  ["CloseHeader.Reason"] = {[0] = "NORMAL", [1] = "REFUSED", [2] = "VERSION", [3] = "PARAMS", [4] = "FATAL", [5] = "TIMEOUT", [6] = "RESOURCE", [7] = "CLOSED", [8] = "APPLICATION", },
}

local COMMON_LEN, TRAILER_LEN, TAG_LEN, DEFAULT_PORT = 28, 4, 16, 4797
local ACK_RECORD_LEN, MAX_ACK_RECORDS, BITVECTOR_BYTES = 52, 18, 32

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
        pf = ProtoField.uint8(abbrev, name, base.DEC, VALS[part .. "." .. name])
      elseif width == 16 then
        pf = ProtoField.uint16(abbrev, name, base.DEC, VALS[part .. "." .. name])
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

local f_crc_status = ProtoField.string("mroce.crc_status", "CRC status")
local f_holes = ProtoField.uint32("mroce.ackrecord.holes", "PSNs reported lost", base.DEC)
table.insert(all, f_crc_status)
table.insert(all, f_holes)
p_mroce.fields = all

local e_short = ProtoExpert.new("mroce.short", "shorter than its header says", expert.group.MALFORMED, expert.severity.ERROR)
local e_protected = ProtoExpert.new("mroce.protected", "protected (docs/spec.md section 13.4): only the common header is in the clear", expert.group.SECURITY, expert.severity.NOTE)
local e_bad_crc = ProtoExpert.new("mroce.bad_crc", "bad CRC32C: a receiver drops it (docs/spec.md section 9 step 2)", expert.group.CHECKSUM, expert.severity.ERROR)
local e_nack = ProtoExpert.new("mroce.nack", "a packet refused (docs/spec.md section 7)", expert.group.RESPONSE_CODE, expert.severity.WARN)
local e_holes = ProtoExpert.new("mroce.holes", "PSNs reported lost: their bits are clear below a PSN received (docs/spec.md section 5.5)", expert.group.SEQUENCE, expert.severity.NOTE)
p_mroce.experts = {e_short, e_protected, e_bad_crc, e_nack, e_holes}

-- CRC32C (Castagnoli, reflected 0x82F63B78), as the trailer holds it. Lua
-- 5.2's bit32 does the bit operations where Wireshark has it; elsewhere
-- they are done with arithmetic, slowly.
local bxor, rshift, band = nil, nil, nil
if bit32 then
  bxor, rshift, band = bit32.bxor, bit32.rshift, bit32.band
else
  bxor = function(a, b)
    local r, p = 0, 1
    while a > 0 or b > 0 do
      if a % 2 ~= b % 2 then r = r + p end
      a, b, p = math.floor(a / 2), math.floor(b / 2), p * 2
    end
    return r
  end
  rshift = function(a, n) return math.floor(a / 2 ^ n) end
  band = function(a, m) return a % (m + 1) end -- for masks 2^k - 1 only
end
local CRC_TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if c % 2 == 1 then c = bxor(rshift(c, 1), 0x82F63B78) else c = rshift(c, 1) end
  end
  CRC_TABLE[i] = c
end
local function crc32c(tvb, len)
  local c = 0xFFFFFFFF
  local bytes = tvb:bytes(0, len)
  for i = 0, len - 1 do
    c = bxor(CRC_TABLE[band(bxor(c, bytes:get_index(i)), 0xFF)], rshift(c, 8))
  end
  return bxor(c, 0xFFFFFFFF)
end

-- header_len is the length the header of the packet in tvb must have by
-- its type, or nil for an unknown type or an ACK with too many records.
local function header_len(tvb)
  local t = TYPES[tvb(1, 1):uint()]
  if not t then return nil end
  if t.name == "ACK" then
    if tvb:len() < COMMON_LEN + 8 then return nil end
    local n = tvb(COMMON_LEN + 4, 1):uint()
    if n > MAX_ACK_RECORDS then return nil end
    return t.hdrlen + n * ACK_RECORD_LEN
  end
  return t.hdrlen
end

-- holes counts the clear bits of an ACK record's bitvector below its last
-- set one: PSNs below one received that did not arrive. The clear bits
-- since the last set one count once another set bit follows them.
local function holes(tvb, off)
  local clear, pending = 0, 0
  for k = 0, BITVECTOR_BYTES * 8 - 1 do
    local byte = tvb(off + math.floor(k / 8), 1):uint()
    if math.floor(byte / 2 ^ (7 - k % 8)) % 2 == 1 then
      clear, pending = clear + pending, 0
    else
      pending = pending + 1
    end
  end
  return clear
end

-- heuristic_crc is the CRC the heuristic computed of the datagram it
-- hands the dissector, which takes it rather than compute it again.
local heuristic_crc = nil

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
  local info = t.name
  if t.data then
    info = string.format("%s path %d PSN %d DSN %d", t.name, tvb(5, 1):uint(), tvb(12, 4):uint(), tvb(16, 4):uint())
  elseif t.name == "ACK" then
    local n, lost = tvb(COMMON_LEN + 4, 1):uint(), 0
    for i = 0, n - 1 do
      local rec = COMMON_LEN + 16 + i * ACK_RECORD_LEN
      local h = holes(tvb, rec + 20)
      lost = lost + h
      if h > 0 then
        root:add(f_holes, tvb(rec + 20, BITVECTOR_BYTES), h)
      end
    end
    info = string.format("ACK CumDSN %d, %d records", tvb(COMMON_LEN, 4):uint(), n)
    if lost > 0 then
      info = info .. string.format(", %d PSNs lost", lost)
      root:add_proto_expert_info(e_holes)
    end
  elseif t.name == "NACK" then
    local code = tvb(COMMON_LEN, 1):uint()
    info = string.format("NACK %s path %d PSN %d DSN %d", VALS["NackHeader.Code"][code] or "unknown code",
      tvb(COMMON_LEN + 1, 1):uint(), tvb(COMMON_LEN + 4, 4):uint(), tvb(COMMON_LEN + 8, 4):uint())
    root:add_proto_expert_info(e_nack)
  elseif t.name == "PROBE" or t.name == "PROBE_REPLY" then
    info = string.format("%s path %d", t.name, tvb(5, 1):uint())
  elseif t.name == "CLOSE" then
    local reason = tvb(COMMON_LEN, 2):uint()
    info = string.format("CLOSE %s detail %d", VALS["CloseHeader.Reason"][reason] or "unknown reason", tvb(COMMON_LEN + 4, 4):uint())
  end
  local n = tvb:len() - TRAILER_LEN
  local computed = heuristic_crc or crc32c(tvb, n)
  heuristic_crc = nil
  if computed == tvb(n, 4):uint() then
    root:add(f_crc_status, tvb(n, 4), "good")
  else
    root:add(f_crc_status, tvb(n, 4), string.format("bad: computed 0x%08x", computed))
    root:add_proto_expert_info(e_bad_crc)
    info = info .. " [bad CRC]"
  end
  pinfo.cols.info = info
  return tvb:len()
end

-- heuristic takes a UDP datagram on any port that is a version-0 packet:
-- a known type, the header length the type has, room for the header and
-- the trailer, and, unless protected, a good CRC.
local function heuristic(tvb, pinfo, tree)
  if tvb:len() < COMMON_LEN + TRAILER_LEN or tvb(0, 1):uint() >= 0x10 + 0x08 or tvb(0, 1):uint() % 8 ~= 0 then
    return false -- another version, or reserved bits set
  end
  local hlen = header_len(tvb)
  if not hlen or tvb(4, 1):uint() * 4 ~= hlen then
    return false
  end
  local crc = nil
  if bit_set(tvb(0, 1):uint(), 0x08) then
    if tvb:len() < COMMON_LEN + TAG_LEN then return false end
  else
    if tvb:len() < hlen + TRAILER_LEN then return false end
    crc = crc32c(tvb, tvb:len() - TRAILER_LEN)
    if crc ~= tvb(tvb:len() - TRAILER_LEN, 4):uint() then return false end
  end
  heuristic_crc = crc -- the dissector need not compute it again
  p_mroce.dissector(tvb, pinfo, tree)
  return true
end

DissectorTable.get("udp.port"):add(DEFAULT_PORT, p_mroce)
p_mroce:register_heuristic("udp", heuristic)
