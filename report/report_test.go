package report

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func table() *Table {
	t := &Table{Title: "loss", Columns: []string{"loss", "mroce", "note"}, Notes: []string{"a note"}}
	t.Add(0.01, 0.996, "ok")
	t.Add(0.1, math.NaN(), nil)
	return t
}

// Text aligns the columns, says "never" for NaN and "-" for none, and
// prints the title and the notes.
func TestText(t *testing.T) {
	var b bytes.Buffer
	if err := table().Text(&b); err != nil {
		t.Fatal(err)
	}
	want := "loss\n   loss  mroce  note\n  0.010  0.996    ok\n  0.100  never     -\na note\n"
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}

// CSV keeps full precision, and JSON turns NaN into null.
func TestCSVAndJSON(t *testing.T) {
	var b bytes.Buffer
	if err := table().CSV(&b); err != nil {
		t.Fatal(err)
	}
	if b.String() != "loss,mroce,note\n0.01,0.996,ok\n0.1,never,-\n" {
		t.Fatalf("CSV %q", b.String())
	}
	b.Reset()
	if err := WriteJSON(&b, "loss", []*Table{table()}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Scenario string
		Tables   []struct {
			Rows [][]any
		}
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Scenario != "loss" || doc.Tables[0].Rows[1][1] != nil || doc.Tables[0].Rows[0][1] != 0.996 {
		t.Fatalf("%+v", doc)
	}
}

// A plot is written as SVG or PNG, and refused for other files.
func TestPlotSave(t *testing.T) {
	p := &Plot{Title: "t", XLabel: "x", YLabel: "y", Series: []Series{{Name: "a", X: []float64{0, 1, 2}, Y: []float64{1, math.NaN(), 3}}, {Name: "b", X: []float64{0, 2}, Y: []float64{2, 2}, Points: true}}}
	dir := t.TempDir()
	for _, name := range []string{"p.svg", "p.png"} {
		path := filepath.Join(dir, name)
		if err := p.Save(path); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) < 100 {
			t.Fatalf("%s: %d bytes, %v", name, len(b), err)
		}
	}
	if svg, _ := os.ReadFile(filepath.Join(dir, "p.svg")); !bytes.Contains(svg, []byte("<svg")) {
		t.Fatal("not SVG")
	}
	if png, _ := os.ReadFile(filepath.Join(dir, "p.png")); !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatal("not PNG")
	}
	if err := p.Save(filepath.Join(dir, "p.gif")); err == nil {
		t.Fatal("a .gif was accepted")
	}
	// A second panel below draws both Y labels and makes a taller image.
	one, _ := os.ReadFile(filepath.Join(dir, "p.png"))
	p.Below = &Plot{YLabel: "queue KiB", Series: []Series{{Name: "q", X: []float64{0, 1, 2}, Y: []float64{5, 9, 2}}}}
	for _, name := range []string{"two.svg", "two.png"} {
		if err := p.Save(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if svg, _ := os.ReadFile(filepath.Join(dir, "two.svg")); !bytes.Contains(svg, []byte("queue KiB")) || !bytes.Contains(svg, []byte(">y<")) {
		t.Fatal("the SVG lacks a panel's Y label")
	}
	two, _ := os.ReadFile(filepath.Join(dir, "two.png"))
	height := func(png []byte) uint32 { return binary.BigEndian.Uint32(png[20:24]) } // from the IHDR chunk
	if height(two) <= height(one) {
		t.Fatalf("two panels %d pixels high, one %d", height(two), height(one))
	}
	// A third panel, below the second, is drawn too.
	p.Below.Below = &Plot{YLabel: "rate Gb/s", Series: []Series{{Name: "r", X: []float64{0, 2}, Y: []float64{1, 3}}}}
	for _, name := range []string{"three.svg", "three.png"} {
		if err := p.Save(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if svg, _ := os.ReadFile(filepath.Join(dir, "three.svg")); !bytes.Contains(svg, []byte("queue KiB")) || !bytes.Contains(svg, []byte("rate Gb/s")) {
		t.Fatal("the SVG lacks a panel's Y label")
	}
	if three, _ := os.ReadFile(filepath.Join(dir, "three.png")); height(three) <= height(two) {
		t.Fatalf("three panels %d pixels high, two %d", height(three), height(two))
	}
}
