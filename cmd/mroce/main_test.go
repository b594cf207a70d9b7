package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/internal/hexfmt"
	"github.com/mroce/mroce/proto"
)

// The tests run the tool in-process through run, which builds the cli App,
// with stdin, stdout and stderr captured.

// goldenDir holds the hand-written golden packets, one per file.
const goldenDir = "../../testdata/golden"

type result struct {
	stdout, stderr string
	code           int
}

func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"mroce"}, args...), strings.NewReader(stdin), &out, &errOut)
	return result{out.String(), errOut.String(), code}
}

// goldenPacket is one golden file, read and decoded.
type goldenPacket struct {
	name  string // file name
	text  string // the hex text
	bytes []byte
}

// goldenPackets reads every testdata/golden/*.hex in name order. There must
// be some, since the tests below are about them.
func goldenPackets(t *testing.T) []goldenPacket {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.hex"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no golden packets in %s", goldenDir)
	}
	var gs []goldenPacket
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := hexfmt.Parse(string(text))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		gs = append(gs, goldenPacket{filepath.Base(f), string(text), b})
	}
	return gs
}

// build lays out a packet of type typ, lets set fill in its fields and
// payload, and returns it sealed.
func build(t *testing.T, typ proto.Type, records, payloadLen int, set func(p *proto.Packet)) []byte {
	t.Helper()
	var p proto.Packet
	buf := make([]byte, proto.MaxPacketLen)
	if err := proto.Build(&p, buf, typ, records, payloadLen); err != nil {
		t.Fatalf("Build %v: %v", typ, err)
	}
	if set != nil {
		set(&p)
	}
	return bytes.Clone(p.Seal())
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {}, {"help"}} {
		r := runCLI(t, "", args...)
		if r.code != 0 {
			t.Fatalf("mroce %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		for _, want := range []string{"demo", "decode", "version", "USAGE"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("mroce %v: help does not mention %q:\n%s", args, want, r.stdout)
			}
		}
		for _, hidden := range []string{"golden-pcap"} {
			if strings.Contains(r.stdout, hidden) {
				t.Errorf("mroce %v: help lists %q:\n%s", args, hidden, r.stdout)
			}
		}
	}
	r := runCLI(t, "", "decode", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "--pcap") || !strings.Contains(r.stdout, "--no-crc") ||
		!strings.Contains(r.stdout, "(default: 4797)") {
		t.Errorf("decode --help: exit %d\n%s", r.code, r.stdout)
	}
}

func TestVersion(t *testing.T) {
	r := runCLI(t, "", "version")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"mroce ", runtime.Version(), "wire format version: 0", "module: "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("version output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"help", "frobnicate"}, "No help topic"},
		{[]string{"decode", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"decode", "--port", "x", "--pcap", "f"}, "invalid value"},
		{[]string{"decode", "--pcap", filepath.Join(dir, "missing.pcap")}, "no such file"},
		{[]string{"decode", "--pcap", "f.pcap", "00"}, "not both"},
		{[]string{"decode", "--port", "5", "00"}, "--port applies only with --pcap"},
		{[]string{"decode", "--port", "0", "--pcap", "f.pcap"}, "not a UDP port"},
		{[]string{"decode", "--port", "65536", "--pcap", "f.pcap"}, "not a UDP port"},
		{[]string{"version", "extra"}, "no arguments"},
		{[]string{"golden-pcap", dir}, "needs two arguments"},
		{[]string{"golden-pcap", filepath.Join(dir, "nodir"), filepath.Join(dir, "out.pcap")}, "no such file"},
	}
	for _, tt := range tests {
		r := runCLI(t, "", tt.args...)
		if r.code != 2 {
			t.Errorf("mroce %v: exit %d, want 2 (stderr %q)", tt.args, r.code, r.stderr)
		}
		if !strings.HasPrefix(r.stderr, "mroce: ") || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("mroce %v: stderr %q, want %q after the program name", tt.args, r.stderr, tt.want)
		}
	}
	// Empty standard input has nothing to decode.
	r := runCLI(t, "# only a comment\n\n", "decode")
	if r.code != 2 || !strings.Contains(r.stderr, "no packets") {
		t.Errorf("decode of empty input: exit %d, stderr %q", r.code, r.stderr)
	}
}

// Flags after a command's arguments are read as flags, with their values;
// a program's own flags after netem exec's host stay the program's, and
// so does everything after "--".
func TestFlagsAfterArguments(t *testing.T) {
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	for _, c := range []struct{ in, want string }{
		{"send FILE --to 10.0.0.1", "send --to 10.0.0.1 FILE"},
		{"send FILE --json --to=10.0.0.1 --paths 4", "send --json --to=10.0.0.1 --paths 4 FILE"},
		{"sim flows t.txt --plot x.svg", "sim flows --plot x.svg t.txt"},
		{"netem exec h0 ping -c 1", "netem exec h0 ping -c 1"},
		{"netem exec h0 -- prog --name x", "netem exec h0 -- prog --name x"},
		{"decode --pcap f --apps", "decode --pcap f --apps"},
		{"decode 0011 --no-crc", "decode --no-crc 0011"},
		{"bench write_bw --to 1.2.3.4 -n 5", "bench write_bw --to 1.2.3.4 -n 5"},
	} {
		got := strings.Join(hoistFlags(app, append([]string{"mroce"}, strings.Fields(c.in)...))[1:], " ")
		if got != c.want {
			t.Errorf("%s: read as %s, want %s", c.in, got, c.want)
		}
	}
	// A packet with a bad CRC decodes when --no-crc follows it.
	pkt := goldenPackets(t)[0].bytes
	bad := fmt.Sprintf("%x", append(pkt[:len(pkt)-1:len(pkt)-1], pkt[len(pkt)-1]^1))
	if r := runCLI(t, "", "decode", bad, "--no-crc"); r.code != 0 {
		t.Fatalf("decode HEX --no-crc: exit %d: %s", r.code, r.stderr)
	}
}

// A word that is no subcommand of a command of subcommands is refused in
// one line on standard error, naming the ones there are, with status 2;
// --version prints what mroce version prints.
func TestUnknownSubcommandsAndVersion(t *testing.T) {
	for _, cmd := range []string{"bench", "sim", "netem", "conformance"} {
		r := runCLI(t, "", cmd, "teleport")
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, cmd+`: unknown command "teleport" (want one of `) {
			t.Errorf("%s teleport: exit %d, stdout %q, stderr %q", cmd, r.code, r.stdout, r.stderr)
		}
	}
	v, flag := runCLI(t, "", "version"), runCLI(t, "", "--version")
	if v.code != 0 || flag.code != 0 || v.stdout != flag.stdout || !strings.Contains(flag.stdout, "wire format version: 0") {
		t.Fatalf("version %q, --version %q", v.stdout, flag.stdout)
	}
}

// mroce completion writes bash's script, and refuses a shell it has none
// for. (The man page and fish's script are checked against the binary in
// TestLargeManAndCompletion: urfave/cli's help command is one value for
// every app of a process, and after a help the documentation of a second
// app in the same process does not end.)
func TestCompletionScripts(t *testing.T) {
	if r := runCLI(t, "", "completion", "bash"); r.code != 0 || !strings.Contains(r.stdout, "complete -o bashdefault -o default -F _mroce mroce") {
		t.Errorf("completion bash: exit %d, %q", r.code, r.stdout)
	}
	if r := runCLI(t, "", "completion", "tcsh"); r.code != 2 {
		t.Errorf("completion tcsh: exit %d, want 2", r.code)
	}
}

// The man page and fish's script come from the command definitions, and
// bash completion, run in bash against the binary, offers a command's
// subcommands and the flags that begin with what was typed. (The flag
// library writes completions to the process's own standard output, so
// this runs the binary.)
func TestLargeManAndCompletion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: with the large tests")
	}
	bin := buildBinary(t)
	man, err := exec.Command(bin, "man").Output()
	if err != nil || !strings.Contains(string(man), ".TH mroce 1") || !strings.Contains(string(man), "send") {
		t.Fatalf("man: %v, %.200q", err, man)
	}
	fish, err := exec.Command(bin, "completion", "fish").Output()
	if err != nil || !strings.Contains(string(fish), "complete -c mroce") {
		t.Fatalf("completion fish: %v, %.200q", err, fish)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for _, c := range []struct{ words, want string }{
		{"si", "sim"},
		{"sim per", "permutation"},
		{"send --local-p", "--local-port"},
	} {
		script := fmt.Sprintf(`source <(%[1]s completion bash); COMP_WORDS=(%[1]s %[2]s); COMP_CWORD=%[3]d; _mroce; echo "${COMPREPLY[@]}"`,
			bin, c.words, len(strings.Fields(c.words)))
		out, err := exec.Command(bash, "-c", script).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("completing %q: %q (%v), want %q", c.words, out, err, c.want)
		}
	}
}

// Every command's --help shows examples, and every flag an example gives
// is one of the command's.
func TestEveryCommandHasAnExample(t *testing.T) {
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			name := strings.TrimSpace(path + " " + c.Name)
			if len(c.Subcommands) > 0 {
				walk(name, c.Subcommands)
				continue
			}
			if !strings.Contains(c.Description, "Example") {
				t.Errorf("mroce %s --help shows no example", name)
			}
			for _, ex := range examples[name] {
				words := strings.Fields(ex)
				for len(words) > 0 && strings.Contains(words[0], "=") {
					words = words[1:] // the environment the command reads
				}
				if !strings.HasPrefix(strings.Join(words, " "), "mroce "+name) {
					t.Errorf("%s: the example %q is not of the command", name, ex)
					continue
				}
				for _, w := range words[1+len(strings.Fields(name)):] {
					if w == "--" {
						break
					}
					if !strings.HasPrefix(w, "-") {
						continue
					}
					flag, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
					found := false
					for _, f := range c.Flags {
						found = found || slices.Contains(f.Names(), flag)
					}
					if !found {
						t.Errorf("%s: the example %q gives --%s, which the command does not have", name, ex, flag)
					}
				}
			}
		}
	}
	walk("", app.Commands)
}
