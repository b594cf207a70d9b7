package hexfmt

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []byte
	}{
		{"empty", "", nil},
		{"only comments", "# a packet\n   # nothing else\n", nil},
		{"spaced bytes", "de ad be ef", []byte{0xde, 0xad, 0xbe, 0xef}},
		{"run of digits", "deadBEEF", []byte{0xde, 0xad, 0xbe, 0xef}},
		{"0x prefixes", "0xde 0Xad 0xbeef", []byte{0xde, 0xad, 0xbe, 0xef}},
		{"colons", "de:ad:be:ef", []byte{0xde, 0xad, 0xbe, 0xef}},
		{"colons and prefixes", "0xde:0xad", []byte{0xde, 0xad}},
		{"stray colons", ":de::ad:", []byte{0xde, 0xad}},
		{"comments", "01 02 # version, type\n03#flags\n# skipped 04\n05", []byte{1, 2, 3, 5}},
		{"tabs and CRLF", "\t01\t02\r\n03 \r\n", []byte{1, 2, 3}},
		{"blank lines", "01\n\n\n02\n", []byte{1, 2}},
		{"comment with bad hex", "01 # zz 0x g\n", []byte{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.text)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.text, err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("Parse(%q) = %x, want %x", tt.text, got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		line   int
		column int
		token  string
		reason string
	}{
		{"odd digits", "01 02\n03 abc 04", 2, 4, "abc", "odd number of hex digits (3)"},
		{"single digit", "1", 1, 1, "1", "odd number of hex digits (1)"},
		{"non-hex", "# header\n\n  0g", 3, 3, "0g", `non-hex character 'g'`},
		{"bare prefix", "01 0x 02", 1, 4, "0x", `"0x" has no hex digits`},
		{"prefix inside", "010x02", 1, 1, "010x02", `non-hex character 'x'`},
		{"odd after prefix", "0x123", 1, 1, "0x123", "odd number of hex digits (3)"},
		{"odd group", "de:a:be", 1, 1, "de:a:be", `odd number of hex digits (1) in "a"`},
		{"punctuation", "de,ad", 1, 1, "de,ad", `non-hex character ','`},
		{"unicode", "01 é1", 1, 4, "é1", `non-hex character 'é'`},
		{"invalid utf8", "01 \xff", 1, 4, "\xff", "invalid UTF-8 byte 0xff"},
		{"after comment line", "# c\n# d\n01\nxyz # bad", 4, 1, "xyz", `non-hex character 'x'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.text)
			if err == nil {
				t.Fatalf("Parse(%q) = %x, want an error", tt.text, got)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is %T, want *SyntaxError", err, err)
			}
			if se.Line != tt.line || se.Column != tt.column || se.Token != tt.token {
				t.Errorf("error at line %d column %d token %q, want line %d column %d token %q",
					se.Line, se.Column, se.Token, tt.line, tt.column, tt.token)
			}
			if !strings.Contains(se.Reason, tt.reason) {
				t.Errorf("reason %q does not contain %q", se.Reason, tt.reason)
			}
			msg := err.Error()
			for _, part := range []string{"line ", strconv.Quote(tt.token), tt.reason} {
				if !strings.Contains(msg, part) {
					t.Errorf("message %q does not contain %q", msg, part)
				}
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	_, err := Parse("01 02\n03 zz")
	want := `line 2, column 4: bad hex token "zz": non-hex character 'z'`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestBlocks(t *testing.T) {
	text := "# file header\n\n" + // a block of comments only is left out
		"01 02 # first\n03\n" +
		"  \t\n" + // whitespace-only line separates
		"# second\n0a 0b\n\n\n" +
		"0c zz\n0d\n\n" + // a bad block fails alone and the others still parse
		"ff\n"
	blocks := Blocks(text)
	if len(blocks) != 4 {
		t.Fatalf("got %d blocks, want 4: %+v", len(blocks), blocks)
	}
	want := []struct {
		line int
		data []byte
	}{{3, []byte{1, 2, 3}}, {6, []byte{0x0a, 0x0b}}, {10, nil}, {13, []byte{0xff}}}
	for i, w := range want {
		b := blocks[i]
		if b.Line != w.line || !bytes.Equal(b.Data, w.data) {
			t.Errorf("block %d = line %d data %x, want line %d data %x", i, b.Line, b.Data, w.line, w.data)
		}
	}
	if blocks[2].Err == nil {
		t.Fatal("block 2: no error")
	}
	var se *SyntaxError
	if !errors.As(blocks[2].Err, &se) || se.Line != 10 || se.Token != "zz" {
		t.Errorf("block 2 error = %v, want line 10 token zz", blocks[2].Err)
	}
	for _, i := range []int{0, 1, 3} {
		if blocks[i].Err != nil {
			t.Errorf("block %d: %v", i, blocks[i].Err)
		}
	}
}

func TestBlocksEmpty(t *testing.T) {
	for _, text := range []string{"", "\n\n", "# only\n# comments\n", "  \n\t\n"} {
		if b := Blocks(text); len(b) != 0 {
			t.Errorf("Blocks(%q) = %+v, want none", text, b)
		}
	}
}

func TestFormat(t *testing.T) {
	if got := Format(nil); got != "" {
		t.Errorf("Format(nil) = %q", got)
	}
	b := make([]byte, 20)
	for i := range b {
		b[i] = byte(i * 13)
	}
	got := Format(b)
	want := "00 0d 1a 27 34 41 4e 5b  68 75 82 8f 9c a9 b6 c3\nd0 dd ea f7\n"
	if got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
	back, err := Parse(got)
	if err != nil || !bytes.Equal(back, b) {
		t.Errorf("Parse(Format(b)) = %x, %v; want %x", back, err, b)
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"de ad be ef",
		"0xde:0xad\n# comment 0xzz\nbeef",
		"01 02\n\n03 04\n",
		"abc",
		"0x",
		"::",
		"de,ad",
		"é1 \xff\r\n",
		"# only a comment",
		"01\t02\r\n\r\n03",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		data, err := Parse(text)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is %T, want *SyntaxError", err, err)
			}
			if se.Line < 1 || se.Column < 1 || se.Token == "" || se.Reason == "" {
				t.Fatalf("incomplete error %+v", se)
			}
		} else {
			back, err := Parse(Format(data))
			if err != nil || !bytes.Equal(back, data) {
				t.Fatalf("Parse(Format(%x)) = %x, %v", data, back, err)
			}
		}
		// Blocks partitions the lines. Together they hold exactly what Parse
		// reads, and one fails exactly when Parse fails, at the same line.
		var joined []byte
		var blockErr error
		for _, b := range Blocks(text) {
			if b.Err != nil {
				if blockErr == nil {
					blockErr = b.Err
				}
				continue
			}
			joined = append(joined, b.Data...)
		}
		if (err == nil) != (blockErr == nil) {
			t.Fatalf("Parse error %v, Blocks error %v", err, blockErr)
		}
		if err != nil {
			if err.Error() != blockErr.Error() {
				t.Fatalf("Parse error %q, first Blocks error %q", err, blockErr)
			}
		} else if !bytes.Equal(joined, data) {
			t.Fatalf("Blocks joined %x, Parse %x", joined, data)
		}
	})
}

func TestNamed(t *testing.T) {
	got, err := Named("# vectors\na = 0102\n\nb c = ff # comment\n")
	if err != nil || len(got) != 2 || string(got["a"]) != "\x01\x02" || string(got["b c"]) != "\xff" {
		t.Fatalf("%v %q", err, got)
	}
	for _, bad := range []string{"a 0102", " = 01", "a = zz"} {
		if _, err := Named(bad); err == nil {
			t.Errorf("%q read", bad)
		}
	}
}
