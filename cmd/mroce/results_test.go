package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// resultsDoc is the page of every table `mroce sim` makes, each in the
// section of the command that made it.
const resultsDoc = "../../docs/results.md"

// updateResults remakes the page's tables and plots from what their
// commands print and draw now, where a change moves them. make results
// sets it.
var updateResults = flag.Bool("update", false, "rewrite the tables and plots of docs/results.md from what their commands make")

// docSection is one "## " section of the results page. It holds the
// section's code blocks as paragraphs, which are runs of lines indented
// four spaces between blank or unindented lines, with the indentation
// removed. It also holds the `mroce sim` commands among their lines.
type docSection struct {
	title      string
	paragraphs []docParagraph
	commands   []docCommand
}

type docParagraph struct {
	line  int // where it starts, from 1
	lines []string
}

type docCommand struct {
	line int      // where it is, from 1
	args []string // after "mroce", a trailing comment dropped
}

// speedTitle reports whether a line is the title of a simulator speed
// table, whose wall times no run repeats.
func speedTitle(line string) bool { return strings.HasPrefix(line, "Simulator speed") }

// speedTable reports whether a paragraph is a simulator speed table.
func (p docParagraph) speedTable() bool { return speedTitle(p.lines[0]) }

// takesJobs reports whether a scenario of mroce sim has several runs,
// which --jobs runs side by side.
func takesJobs(scenario string) bool {
	for _, sc := range simCommand().Subcommands {
		if sc.Name == scenario {
			return slices.Contains(sc.Flags, cli.Flag(jobsFlag))
		}
	}
	return false
}

// commandLines counts a paragraph's lines that are commands, not output.
func (p docParagraph) commandLines() int {
	n := 0
	for _, l := range p.lines {
		if strings.HasPrefix(l, "mroce ") {
			n++
		}
	}
	return n
}

// isCommands reports whether a paragraph is commands, not output.
func (p docParagraph) isCommands() bool { return p.commandLines() > 0 }

// docSections reads the results page into its sections.
func docSections(text string) []docSection {
	var sections []docSection
	cur := &docSection{}
	var para *docParagraph
	endParagraph := func() {
		if para != nil {
			cur.paragraphs = append(cur.paragraphs, *para)
			para = nil
		}
	}
	for n, line := range strings.Split(text, "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok {
			endParagraph()
			sections = append(sections, *cur)
			cur = &docSection{title: title}
			continue
		}
		inner, ok := strings.CutPrefix(line, "    ")
		if !ok {
			endParagraph()
			continue
		}
		if para == nil {
			para = &docParagraph{line: n + 1}
		}
		para.lines = append(para.lines, inner)
		if cmd, ok := strings.CutPrefix(inner, "mroce sim "); ok {
			cmd, _, _ = strings.Cut(cmd, "#")
			args := []string{"sim"}
			for _, a := range strings.Fields(cmd) {
				if a == `""` {
					a = "" // as a shell passes it
				}
				args = append(args, a)
			}
			cur.commands = append(cur.commands, docCommand{line: n + 1, args: args})
		}
	}
	endParagraph()
	return append(sections, *cur)
}

// resultParagraphs is what a run printed of its results, as paragraphs
// between blank lines. It leaves out the simulator speed tables, the wall
// time and where the plot went.
func resultParagraphs(out string) [][]string {
	var paras [][]string
	var cur []string
	for _, line := range append(strings.Split(out, "\n"), "") {
		switch {
		case strings.HasPrefix(line, "plot: "), strings.HasPrefix(line, "(") && strings.HasSuffix(line, " of wall time)"):
		case strings.TrimSpace(line) == "":
			if len(cur) > 0 && !speedTitle(cur[0]) {
				paras = append(paras, cur)
			}
			cur = nil
		default:
			cur = append(cur, line)
		}
	}
	return paras
}

// Every table in docs/results.md is what the command above it prints
// today, to the last digit, and every plot it shows is what that command
// draws, byte for byte. The page is the simulator's output, not a copy of
// an older build's. Each `mroce sim` command of a code block runs with its
// plot going to a temporary file and with --jobs 0, its runs side by side,
// since a table is the same for any --jobs and --workers. Every paragraph
// of its output must be a paragraph of its section's code blocks, row for
// row. Every paragraph there must come from one of the section's commands,
// except the commands themselves and the speed tables, so a table the page
// keeps and no command prints fails too. What the prose says of other
// runs, in commands inline in the text or other seeds, is not run here.
//
// With -update, which make results sets, a table that differs is rewritten
// from what its command prints, found by its title line, and a plot from
// what it draws. The prose around them is for the author to read again.
func TestLargeResultsDocTablesReproduce(t *testing.T) {
	if testing.Short() {
		t.Skip("every scenario of docs/results.md at full size: run without -short")
	}
	if !tablesRoundAsMade {
		// The page was made by an amd64 build that fuses no multiply and
		// add of its own. Where the compiler fuses them, as on arm64 and
		// amd64.v3, they round once, not twice, and a table's last digits
		// may move.
		t.Skip("this build may fuse multiply-adds: the page's last digits may differ")
	}
	text, err := os.ReadFile(resultsDoc)
	if err != nil {
		t.Fatal(err)
	}
	plots := t.TempDir()
	ran := 0
	var edits []docEdit // the tables -update rewrites
	for _, sec := range docSections(string(text)) {
		if len(sec.commands) == 0 {
			continue
		}
		printed := make([]bool, len(sec.paragraphs))
		for _, p := range sec.paragraphs {
			if n := p.commandLines(); n > 0 && n < len(p.lines) {
				// -update would rewrite the command with the table.
				t.Errorf("%s:%d: commands and output in one paragraph: a blank line between them", resultsDoc, p.line)
			}
		}
		for _, c := range sec.commands {
			ran++
			name := "mroce " + strings.Join(c.args, " ")
			if len(c.args) < 2 {
				t.Errorf("%s:%d: %s: no scenario", resultsDoc, c.line, name)
				continue
			}
			args := append([]string{}, c.args...)
			if !slices.Contains(args, "--plot") {
				// Not the scenario's default file, here. It goes before any
				// FILE argument, after which flags are not read.
				args = slices.Insert(args, 2, "--plot", "")
			}
			var plot, committed string // where this run's plot goes, and the page's
			for i := range args {
				if i > 0 && args[i-1] == "--plot" && args[i] != "" {
					committed = filepath.Join("../..", args[i])
					plot = filepath.Join(plots, filepath.Base(args[i]))
					args[i] = plot
				} else if inRepo := filepath.Join("../..", args[i]); strings.Contains(args[i], "/") && fileExists(inRepo) {
					args[i] = inRepo // an input named from the repository's root, as a traffic file
				}
			}
			if takesJobs(args[1]) {
				args = slices.Insert(args, 2, "--jobs", "0") // before any FILE, as --plot
			}
			r := runCLI(t, "", args...)
			if r.code != 0 {
				t.Errorf("%s:%d: %s: exit %d: %s", resultsDoc, c.line, name, r.code, r.stderr)
				continue
			}
			out := resultParagraphs(r.stdout)
			if len(out) == 0 {
				t.Errorf("%s:%d: %s printed no table:\n%s", resultsDoc, c.line, name, r.stdout)
			}
			for _, para := range out {
				i := matching(sec.paragraphs, printed, para)
				if i < 0 && *updateResults {
					if i = retitled(sec.paragraphs, printed, para[0]); i >= 0 {
						edits = append(edits, docEdit{sec.paragraphs[i], para})
					}
				}
				if i < 0 {
					t.Errorf("%s:%d: %s prints a table the section %q does not show as it is:\n%s",
						resultsDoc, c.line, name, sec.title, strings.Join(para, "\n"))
					continue
				}
				printed[i] = true
			}
			if plot != "" {
				made, err1 := os.ReadFile(plot)
				kept, err2 := os.ReadFile(committed)
				if err1 == nil && *updateResults && !bytes.Equal(made, kept) {
					kept, err2 = made, os.WriteFile(committed, made, 0o644)
					t.Logf("%s: drawn again", committed)
				}
				if err1 != nil || err2 != nil || !bytes.Equal(made, kept) {
					t.Errorf("%s:%d: the plot %s draws is not %s (%v, %v)", resultsDoc, c.line, name, committed, err1, err2)
				}
			}
		}
		for i, p := range sec.paragraphs {
			if !printed[i] && !p.isCommands() && !p.speedTable() {
				t.Errorf("%s:%d: a table of the section %q that none of its commands printed:\n%s",
					resultsDoc, p.line, sec.title, strings.Join(p.lines, "\n"))
			}
		}
	}
	if ran == 0 {
		t.Fatalf("%s: no mroce sim command", resultsDoc)
	}
	if len(edits) > 0 {
		if err := os.WriteFile(resultsDoc, []byte(applyEdits(string(text), edits)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d tables rewritten", resultsDoc, len(edits))
	}
}

// matching is the table of ps that is para, line for line, or -1. It is
// the first not yet printed, else the first, since a page may show one
// table twice.
func matching(ps []docParagraph, printed []bool, para []string) int {
	first := -1
	for i, p := range ps {
		if slices.Equal(p.lines, para) {
			if !printed[i] {
				return i
			}
			if first < 0 {
				first = i
			}
		}
	}
	return first
}

// retitled is the first table of ps not yet printed whose title line is
// title, which a table with that title replaces, or -1.
func retitled(ps []docParagraph, printed []bool, title string) int {
	for i, p := range ps {
		if !printed[i] && !p.isCommands() && !p.speedTable() && p.lines[0] == title {
			return i
		}
	}
	return -1
}

// docEdit is a table of the page and what its command prints now.
type docEdit struct {
	old docParagraph
	new []string
}

// applyEdits rewrites the page's tables, indented as code, from the last
// up, because each edit's line numbers are the page's as read.
func applyEdits(text string, edits []docEdit) string {
	lines := strings.Split(text, "\n")
	slices.SortFunc(edits, func(a, b docEdit) int { return b.old.line - a.old.line })
	for _, e := range edits {
		at := e.old.line - 1
		indented := make([]string, len(e.new))
		for i, l := range e.new {
			indented[i] = "    " + l
		}
		lines = slices.Replace(lines, at, at+len(e.old.lines), indented...)
	}
	return strings.Join(lines, "\n")
}

// The page's sections, code blocks and commands are found where they are,
// and a run's speed tables, wall time and plot are left out of what it
// must match.
func TestResultsDocParsing(t *testing.T) {
	doc := strings.Join([]string{
		"# Results",
		"## One",
		"    mroce sim loss --plot docs/results/loss.svg   # a comment",
		"    mroce sim loss --burst --plot \"\"",
		"",
		"    table one",
		"    row",
		"text, not a table",
		"    table two",
		"## Two",
		"    Simulator speed",
		"    1.234",
	}, "\n")
	secs := docSections(doc)
	if len(secs) != 3 || secs[1].title != "One" || secs[2].title != "Two" {
		t.Fatalf("sections %+v", secs)
	}
	one := secs[1]
	if len(one.commands) != 2 || one.commands[0].line != 3 ||
		strings.Join(one.commands[0].args, " ") != "sim loss --plot docs/results/loss.svg" ||
		!slices.Equal(one.commands[1].args, []string{"sim", "loss", "--burst", "--plot", ""}) {
		t.Errorf("commands %+v", one.commands)
	}
	if len(one.paragraphs) != 3 || !one.paragraphs[0].isCommands() ||
		!slices.Equal(one.paragraphs[1].lines, []string{"table one", "row"}) || one.paragraphs[1].line != 6 ||
		!slices.Equal(one.paragraphs[2].lines, []string{"table two"}) {
		t.Errorf("paragraphs %+v", one.paragraphs)
	}
	if len(secs[2].paragraphs) != 1 || !secs[2].paragraphs[0].speedTable() {
		t.Errorf("speed table %+v", secs[2].paragraphs)
	}

	twice := []docParagraph{{1, []string{"t", "1"}}, {4, []string{"t", "1"}}}
	if i := matching(twice, []bool{true, false}, []string{"t", "1"}); i != 1 {
		t.Errorf("a table shown twice: the second copy matched as %d", i)
	}
	if i := matching(twice, []bool{false, false}, []string{"t", "2"}); i != -1 {
		t.Errorf("no such table, matched as %d", i)
	}

	edited := applyEdits(doc, []docEdit{
		{one.paragraphs[1], []string{"table one", "row", "another row"}},
		{one.paragraphs[2], []string{"table 2"}},
	})
	if want := strings.Replace(strings.Replace(doc, "    row\n", "    row\n    another row\n", 1), "    table two", "    table 2", 1); edited != want {
		t.Errorf("edited page:\n%s\nwant:\n%s", edited, want)
	}

	if !takesJobs("loss") || takesJobs("planefail") || !takesJobs("flows") || takesJobs("no such") {
		t.Errorf("--jobs: loss %v, planefail %v, flows %v", takesJobs("loss"), takesJobs("planefail"), takesJobs("flows"))
	}

	out := strings.Join([]string{
		"Title",
		"  a  b",
		"  1  2",
		"(12ms of wall time)",
		"",
		"Simulator speed (wall time on this machine)",
		"  wall s",
		"  1.234",
		"",
		"Second",
		"  3",
		"plot: /tmp/p.svg",
	}, "\n")
	got := resultParagraphs(out)
	if len(got) != 2 || !slices.Equal(got[0], []string{"Title", "  a  b", "  1  2"}) || !slices.Equal(got[1], []string{"Second", "  3"}) {
		t.Errorf("result paragraphs %q", got)
	}
}

// fileExists reports whether path names a regular file.
func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
