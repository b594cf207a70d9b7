package main

import (
	"strings"
	"testing"
	"testing/fstest"
)

// The warning names every governor that is not "performance" and how
// many CPUs run it, and is empty when every CPU runs "performance" or no
// governor can be read.
func TestCPUFreqWarning(t *testing.T) {
	governor := func(cpu, g string) (string, *fstest.MapFile) {
		return "sys/devices/system/cpu/" + cpu + "/cpufreq/scaling_governor", &fstest.MapFile{Data: []byte(g + "\n")}
	}
	fsys := func(govs ...string) fstest.MapFS {
		m := fstest.MapFS{"sys/devices/system/cpu/cpuidle/x": &fstest.MapFile{}}
		for i, g := range govs {
			k, v := governor("cpu"+string(rune('0'+i)), g)
			m[k] = v
		}
		return m
	}
	if w := cpuFreqWarning(fsys()); w != "" {
		t.Errorf("no governors: %q", w)
	}
	if w := cpuFreqWarning(fsys("performance", "performance")); w != "" {
		t.Errorf("all performance: %q", w)
	}
	w := cpuFreqWarning(fsys("performance", "powersave", "powersave", "schedutil"))
	for _, want := range []string{"3 of 4 CPUs", `governor "powersave" on 2, "schedutil" on 1,`, "-F"} {
		if !strings.Contains(w, want) {
			t.Errorf("no %q in %q", want, w)
		}
	}
	if strings.Contains(w, "\n") {
		t.Errorf("more than a line: %q", w)
	}
}
