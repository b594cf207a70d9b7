package layering

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

const (
	module = "github.com/mroce/mroce/"
	doc    = "../../docs/architecture.md"
)

// layers reads the layer table of docs/architecture.md, between the
// markers <!-- layers --> and <!-- /layers -->: one row a layer, the
// highest first, its packages in backquotes in the second column. It
// returns each package's rank, the lowest layer 0.
func layers(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte("<!-- layers -->"))
	table, _, ok2 := bytes.Cut(rest, []byte("<!-- /layers -->"))
	if !ok || !ok2 {
		t.Fatalf("%s has no layer table between <!-- layers --> and <!-- /layers -->", doc)
	}
	pkgs := regexp.MustCompile("`([a-z0-9/]+)`")
	var rows [][]string
	for _, line := range strings.Split(string(table), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || strings.HasPrefix(strings.TrimSpace(cols[1]), "---") || strings.TrimSpace(cols[1]) == "Layer" {
			continue
		}
		var row []string
		for _, m := range pkgs.FindAllStringSubmatch(cols[2], -1) {
			row = append(row, m[1])
		}
		rows = append(rows, row)
	}
	rank := map[string]int{}
	for i, row := range rows {
		for _, p := range row {
			if _, dup := rank[p]; dup {
				t.Errorf("%s is in two layers", p)
			}
			rank[p] = len(rows) - 1 - i
		}
	}
	return rank
}

// imports lists every package of the module with the module's packages it
// imports (not its tests'), from go list.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "github.com/mroce/mroce/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		p := strings.TrimPrefix(f[0], module)
		graph[p] = nil
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				graph[p] = append(graph[p], strings.TrimPrefix(imp, module))
			}
		}
	}
	return graph
}

// Every package is in one layer of the drawing, and imports only packages
// of the layers below its own.
func TestImportsPointDown(t *testing.T) {
	rank := layers(t)
	graph := imports(t)
	for p, deps := range graph {
		r, ok := rank[p]
		if !ok {
			t.Errorf("%s is in no layer of %s", p, doc)
			continue
		}
		for _, d := range deps {
			if rd, ok := rank[d]; ok && rd >= r {
				t.Errorf("%s (layer %d) imports %s (layer %d): not below it", p, r, d, rd)
			}
		}
	}
	for p := range rank {
		if _, ok := graph[p]; !ok {
			t.Errorf("%s names %s, which is not a package of the module", doc, p)
		}
	}
}
