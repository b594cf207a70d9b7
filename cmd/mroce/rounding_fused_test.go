//go:build !amd64 || amd64.v3

package main

// tablesRoundAsMade: this build may fuse multiply-adds (arm64, amd64.v3
// and later), which round once where the page's build rounded twice.
const tablesRoundAsMade = false
