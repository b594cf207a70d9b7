package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// resultsDoc is the page of every table `mroce sim` makes, each below the
// command that made it.
const resultsDoc = "../../docs/results.md"

// docCommand is a `mroce sim` command of docs/results.md and the lines of
// the section it stands in.
type docCommand struct {
	line    int      // where it is, from 1
	args    []string // after "mroce"
	section map[string]bool
}

// docCommands finds the commands of the results page: the lines of its
// code blocks that start with "mroce sim", a trailing comment dropped.
// Each comes with the lines of its section (its "## " heading to the
// next), their four-space indentation removed: where its tables are.
func docCommands(t *testing.T, text string) []docCommand {
	t.Helper()
	var cmds []docCommand
	var pending []int // commands of the section being read
	section := map[string]bool{}
	lines := strings.Split(text, "\n")
	closeSection := func() {
		for _, i := range pending {
			cmds[i].section = section
		}
		pending, section = nil, map[string]bool{}
	}
	for n, line := range lines {
		if strings.HasPrefix(line, "## ") {
			closeSection()
		}
		inner, ok := strings.CutPrefix(line, "    ")
		if !ok {
			continue
		}
		section[inner] = true
		cmd, ok := strings.CutPrefix(inner, "mroce sim ")
		if !ok {
			continue
		}
		cmd, _, _ = strings.Cut(cmd, "#")
		pending = append(pending, len(cmds))
		cmds = append(cmds, docCommand{line: n + 1, args: append([]string{"sim"}, strings.Fields(cmd)...)})
	}
	closeSection()
	if len(cmds) == 0 {
		t.Fatalf("%s: no mroce sim command", resultsDoc)
	}
	return cmds
}

// resultLines is what a run printed of its results: every line but the
// simulator's speed tables (wall time, which varies), the wall time and
// where the plot went.
func resultLines(out string) []string {
	var keep []string
	speed := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "Simulator speed"):
			speed = true
		case strings.TrimSpace(line) == "":
			speed = false
		case speed, strings.HasPrefix(line, "plot: "), strings.HasSuffix(line, " of wall time)"):
		default:
			keep = append(keep, line)
		}
	}
	return keep
}

// Every table in docs/results.md is what the command above it prints
// today, to the last digit: the page is the simulator's output, not a
// copy of an older build's. Each command runs as written (its plot to a
// temporary file, its runs side by side: the tables are the same for any
// --jobs and --workers); every line of its results must be a line of its
// section, and its plot the page's, byte for byte. A change that moves a result fails here until the page is
// made again with it.
func TestLargeResultsDocTablesReproduce(t *testing.T) {
	if testing.Short() {
		t.Skip("every scenario of docs/results.md at full size: run without -short")
	}
	if runtime.GOARCH != "amd64" {
		// Elsewhere the compiler may fuse a multiply and an add, which
		// rounds once instead of twice: the last digits of a table move.
		t.Skipf("the page's tables were made on amd64, this is %s", runtime.GOARCH)
	}
	text, err := os.ReadFile(resultsDoc)
	if err != nil {
		t.Fatal(err)
	}
	plots := t.TempDir()
	for _, c := range docCommands(t, string(text)) {
		args := append([]string{}, c.args...)
		var plot, committed string // where this run's plot goes, and the page's
		for i := range args {
			if i > 0 && args[i-1] == "--plot" {
				committed = filepath.Join("../..", args[i])
				plot = filepath.Join(plots, filepath.Base(args[i]))
				args[i] = plot
			}
		}
		if scenario := args[1]; scenario != "planefail" && scenario != "flows" {
			args = append(args, "--jobs", "0") // planefail and flows are one run each
		}
		r := runCLI(t, "", args...)
		if r.code != 0 {
			t.Errorf("%s:%d: mroce %s: exit %d: %s", resultsDoc, c.line, strings.Join(c.args, " "), r.code, r.stderr)
			continue
		}
		got := resultLines(r.stdout)
		if len(got) < 3 {
			t.Errorf("%s:%d: mroce %s printed no table:\n%s", resultsDoc, c.line, strings.Join(c.args, " "), r.stdout)
			continue
		}
		for _, line := range got {
			if !c.section[line] {
				t.Errorf("%s:%d: mroce %s prints a line its section does not have:\n%s",
					resultsDoc, c.line, strings.Join(c.args, " "), line)
			}
		}
		if plot != "" {
			made, err1 := os.ReadFile(plot)
			kept, err2 := os.ReadFile(committed)
			if err1 != nil || err2 != nil || !bytes.Equal(made, kept) {
				t.Errorf("%s:%d: the plot mroce %s makes is not %s (%v, %v)",
					resultsDoc, c.line, strings.Join(c.args, " "), committed, err1, err2)
			}
		}
	}
}

// The page's commands are found where they are, each with its section's
// lines and no one else's, and a run's speed tables, wall time and plot
// are left out of what it must match.
func TestResultsDocParsing(t *testing.T) {
	doc := strings.Join([]string{
		"# Results",
		"## One",
		"    mroce sim loss --plot docs/results/loss.svg   # a comment",
		"    mroce sim loss --burst",
		"",
		"    table one",
		"text, not a table",
		"## Two",
		"    mroce sim incast",
		"    table two",
	}, "\n")
	cmds := docCommands(t, doc)
	if len(cmds) != 3 {
		t.Fatalf("%d commands, want 3: %+v", len(cmds), cmds)
	}
	if got := strings.Join(cmds[0].args, " "); got != "sim loss --plot docs/results/loss.svg" || cmds[0].line != 3 {
		t.Errorf("first command %q at line %d", got, cmds[0].line)
	}
	if !cmds[0].section["table one"] || !cmds[1].section["table one"] || cmds[0].section["table two"] {
		t.Errorf("section one's lines: %v", cmds[0].section)
	}
	if !cmds[2].section["table two"] || cmds[2].section["table one"] || cmds[2].section["text, not a table"] {
		t.Errorf("section two's lines: %v", cmds[2].section)
	}

	out := strings.Join([]string{
		"Title",
		"  a  b",
		"  1  2",
		"",
		"Simulator speed (wall time on this machine)",
		"  wall s",
		"  1.234",
		"",
		"(12ms of wall time)",
		"plot: /tmp/p.svg",
	}, "\n")
	if got := strings.Join(resultLines(out), "|"); got != "Title|  a  b|  1  2" {
		t.Errorf("result lines %q", got)
	}
}
