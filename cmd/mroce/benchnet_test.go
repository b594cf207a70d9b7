package main

import (
	"regexp"
	"strings"
	"testing"
)

// bench-net runs all three transfers on loopback and prints their rows and
// the ratios. The figures themselves depend on the machine and are not
// asserted.
func TestBenchNet(t *testing.T) {
	r := runCLI(t, "", "bench-net", "--size-mib", "4", "--paths", "4")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, row := range []string{"mroce, 1 connection", "raw UDP, same driver", "Go TCP"} {
		if !regexp.MustCompile(regexp.QuoteMeta(row) + `\s+\d+\.\d\d\s+\d+\.\d\d s`).MatchString(r.stdout) {
			t.Errorf("no row %q with Gb/s and CPU:\n%s", row, r.stdout)
		}
	}
	if !regexp.MustCompile(`mroce / TCP: \d+\.\d\dx\s+mroce / raw UDP: \d+\.\d\dx`).MatchString(r.stdout) {
		t.Errorf("no ratios:\n%s", r.stdout)
	}
}

func TestBenchNetRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"bench-net", "--size-mib", "0"}, {"bench-net", "--paths", "65"}} {
		r := runCLI(t, "", args...)
		if r.code != 2 || !strings.Contains(r.stderr, "bench-net: --") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}
