//go:build !linux

// Command kbench measures mroce beside the kernel's TCP over a testbed of
// Linux network namespaces; elsewhere it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "kbench: needs Linux (network namespaces, veth, tc, nftables)")
	os.Exit(3)
}
