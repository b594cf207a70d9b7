package main

import (
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// cpuFreqWarning is the warning perftest prints unless -F: a CPU whose
// frequency may drop makes the figures low and uneven. perftest measures
// in CPU cycles and needs the frequency fixed to be right; bench measures
// with the system's monotonic clock, so here it is only a warning that
// the figures may vary. It reads each CPU's governor under fsys (the root
// file system) and returns "" when every one is "performance", or none
// can be read, as in most virtual machines and containers.
func cpuFreqWarning(fsys fs.FS) string {
	files, _ := fs.Glob(fsys, "sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")
	others := map[string]int{}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			continue
		}
		if g := strings.TrimSpace(string(b)); g != "performance" {
			others[g]++
		}
	}
	if len(others) == 0 {
		return ""
	}
	var named []string
	scaling := 0
	for g, n := range others {
		named = append(named, fmt.Sprintf("%q on %d", g, n))
		scaling += n
	}
	sort.Strings(named)
	return fmt.Sprintf("bench: warning: %d of %d CPUs may change their frequency (governor %s, not \"performance\"): figures may be low and vary (-F: no warning)",
		scaling, len(files), strings.Join(named, ", "))
}
