package main

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/proto"
)

// keyLog holds the secrets of a key log (docs/spec.md section 13.7) by the
// DstConnID their packets carry, and the keys of each phase reached.
type keyLog struct {
	conns map[uint32]*loggedConn
}

// loggedConn is one direction of a logged connection.
type loggedConn struct {
	suite   auth.Suite
	secrets [][]byte     // by phase, derived as far as needed
	keys    []*auth.Keys // by phase, made when first needed
	last    uint64       // the phase of the last packet opened
}

// keyLogSearch is how many phases past the last one opened the decoder
// tries, for a capture that missed a few moves.
const keyLogSearch = 64

// parseKeyLog reads MROCE_SECRET lines; blank lines and lines starting
// with # are skipped, and lines of other labels are left for other tools.
func parseKeyLog(text string) (*keyLog, error) {
	k := &keyLog{conns: map[uint32]*loggedConn{}}
	for i, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || f[0] != "MROCE_SECRET" {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: want MROCE_SECRET <DstConnID> <Suite> <Secret>", i+1)
		}
		id, err1 := strconv.ParseUint(f[1], 16, 32)
		suite, err2 := strconv.ParseUint(f[2], 10, 8)
		secret, err3 := hex.DecodeString(f[3])
		if err1 != nil || err2 != nil || err3 != nil || len(f[1]) != 8 || len(secret) != 32 || !auth.Suite(suite).Known() {
			return nil, fmt.Errorf("line %d: %q is not a connection id (8 hex digits), a known suite and a 32-byte secret (64 hex digits)", i+1, line)
		}
		k.conns[uint32(id)] = &loggedConn{suite: auth.Suite(suite), secrets: [][]byte{secret}}
	}
	if len(k.conns) == 0 {
		return nil, fmt.Errorf("no MROCE_SECRET lines")
	}
	return k, nil
}

// open opens a protected packet into a copy with its connection's keys,
// trying the phases that agree with its KeyPhase from the one before the
// last opened on. It returns the opened packet and its phase.
func (k *keyLog) open(b []byte) ([]byte, uint64, error) {
	c := k.conns[proto.CommonHeader(b).DstConnID()]
	if c == nil {
		return nil, 0, fmt.Errorf("no secret in the key log for connection %08x", proto.CommonHeader(b).DstConnID())
	}
	first := max(c.last, 1) - 1
	phase := first + (uint64(proto.CommonHeader(b).KeyPhase())-first)&3
	out := make([]byte, len(b))
	for ; phase <= c.last+keyLogSearch; phase += 4 {
		keys, err := c.keysOf(phase)
		if err != nil {
			return nil, 0, err
		}
		if keys.OpenTo(out, b) == nil {
			copy(out[len(out)-proto.TagLen:], b[len(b)-proto.TagLen:]) // shown as it was sent
			c.last = max(c.last, phase)
			return out, phase, nil
		}
	}
	return nil, 0, proto.ErrAuthFailed
}

// keysOf returns the keys of a phase, deriving its secret and those
// before it as needed.
func (c *loggedConn) keysOf(phase uint64) (*auth.Keys, error) {
	for uint64(len(c.secrets)) <= phase {
		c.secrets = append(c.secrets, auth.NextSecret(c.secrets[len(c.secrets)-1]))
	}
	for uint64(len(c.keys)) <= phase {
		c.keys = append(c.keys, nil)
	}
	if c.keys[phase] == nil {
		keys, err := auth.NewKeys(c.suite, c.secrets[phase])
		if err != nil {
			return nil, err
		}
		c.keys[phase] = keys
	}
	return c.keys[phase], nil
}
