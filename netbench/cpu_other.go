//go:build !unix

package netbench

import "time"

// cpuTime is not measured on this system, so CPU per GB reads 0.
func cpuTime() time.Duration { return 0 }
