// Package hexfmt reads and writes packets as hex text, the form of the
// hand-written packets in testdata/golden and of the arguments of mroce
// decode.
//
// Bytes are pairs of hex digits. Whitespace separates tokens and may be
// left out between bytes, so "deadbeef" is four bytes. A `#` starts a
// comment that runs to the end of the line. A `0x` or `0X` prefix on a
// group of digits is accepted, and so is `:` between groups, so that bytes
// copied from other tools as "0xde 0xad" or "de:ad:be:ef" parse. Anything
// else is an error that names the line, the column and the token.
package hexfmt

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SyntaxError is a token that is not hex bytes.
type SyntaxError struct {
	Line   int    // 1-based line number in the text
	Column int    // 1-based byte column of the token in its line
	Token  string // the whitespace-delimited token that is wrong
	Reason string // what is wrong with it
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: bad hex token %q: %s", e.Line, e.Column, e.Token, e.Reason)
}

// Parse reads every byte of text. It fails on the first token that is not
// hex bytes, with a *SyntaxError.
func Parse(text string) ([]byte, error) {
	return parseLines(text, 1, nil)
}

// Block is one block of a text between blank lines, as Blocks finds it.
type Block struct {
	Line int    // 1-based line number of the block's first line in the text
	Data []byte // the block's bytes, nil if Err is set
	Err  error  // a *SyntaxError naming the line in the whole text, or nil
}

// Blocks splits text at blank lines, which hold whitespace only, and parses
// each block on its own, so that one bad block does not hide the others. It
// leaves out blocks that hold only comments. Error line numbers count from
// the start of text.
func Blocks(text string) []Block {
	var blocks []Block
	lines := strings.Split(text, "\n")
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		data, err := parseLines(strings.Join(lines[start:end], "\n"), start+1, nil)
		if err != nil {
			blocks = append(blocks, Block{Line: start + 1, Err: err})
		} else if len(data) > 0 {
			blocks = append(blocks, Block{Line: start + 1, Data: data})
		}
		start = -1
	}
	for i, line := range lines {
		if strings.TrimSpace(line) == "" {
			flush(i)
		} else if start < 0 {
			start = i
		}
	}
	flush(len(lines))
	return blocks
}

// parseLines appends the bytes of text to dst. firstLine is the number of
// text's first line, for errors.
func parseLines(text string, firstLine int, dst []byte) ([]byte, error) {
	for i, line := range strings.Split(text, "\n") {
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		var err error
		dst, err = parseLine(line, dst)
		if err != nil {
			err.(*SyntaxError).Line = firstLine + i
			return nil, err
		}
	}
	return dst, nil
}

// parseLine appends the bytes of one comment-free line to dst.
func parseLine(line string, dst []byte) ([]byte, error) {
	pos := 0
	for pos < len(line) {
		r, size := utf8.DecodeRuneInString(line[pos:])
		if unicode.IsSpace(r) {
			pos += size
			continue
		}
		end := pos
		for end < len(line) {
			r, size := utf8.DecodeRuneInString(line[end:])
			if unicode.IsSpace(r) {
				break
			}
			end += size
		}
		var reason string
		dst, reason = parseToken(line[pos:end], dst)
		if reason != "" {
			return nil, &SyntaxError{Column: pos + 1, Token: line[pos:end], Reason: reason}
		}
		pos = end
	}
	return dst, nil
}

// parseToken appends the bytes of one token without whitespace to dst, or
// says why it is not hex bytes.
func parseToken(tok string, dst []byte) ([]byte, string) {
	for group := range strings.SplitSeq(tok, ":") {
		if group == "" {
			continue // "aa:" and "aa::bb" parse, since colons only separate
		}
		digits := group
		if len(digits) >= 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') {
			digits = digits[2:]
			if digits == "" {
				return dst, fmt.Sprintf("%q has no hex digits", group)
			}
		}
		for i := 0; i < len(digits); i++ {
			if _, ok := hexValue(digits[i]); !ok {
				if r, size := utf8.DecodeRuneInString(digits[i:]); r != utf8.RuneError || size > 1 {
					return dst, fmt.Sprintf("non-hex character %q", r)
				}
				return dst, fmt.Sprintf("invalid UTF-8 byte 0x%02x", digits[i])
			}
		}
		if len(digits)%2 != 0 {
			return dst, fmt.Sprintf("odd number of hex digits (%d) in %q", len(digits), group)
		}
		for i := 0; i < len(digits); i += 2 {
			hi, _ := hexValue(digits[i])
			lo, _ := hexValue(digits[i+1])
			dst = append(dst, hi<<4|lo)
		}
	}
	return dst, ""
}

func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Format writes b as hex text that Parse reads back. It writes 16 bytes a
// line with a space between bytes and another after the eighth, so that a
// line reads as two groups of eight, as in hexdump.
func Format(b []byte) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	sb.Grow(len(b)*3 + len(b)/8 + 1)
	for i, c := range b {
		switch {
		case i == 0:
		case i%16 == 0:
			sb.WriteByte('\n')
		case i%8 == 0:
			sb.WriteString("  ")
		default:
			sb.WriteByte(' ')
		}
		sb.WriteByte(digits[c>>4])
		sb.WriteByte(digits[c&15])
	}
	if len(b) > 0 {
		sb.WriteByte('\n')
	}
	return sb.String()
}

// Named reads lines of the form "NAME = HEX", as testdata/auth/vectors.txt
// holds them, into a map by name. Blank lines and lines from # on are
// skipped. A line of another form, or whose value is not hex bytes, is an
// error that names it.
func Named(text string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for i, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, ok := strings.Cut(line, " = ")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("line %d: want NAME = HEX", i+1)
		}
		b, err := parseLines(value, i+1, nil)
		if err != nil {
			return nil, err
		}
		out[strings.TrimSpace(name)] = b
	}
	return out, nil
}
