//go:build !amd64 || amd64.v3

package main

// tablesRoundAsMade is false because this build may fuse multiply-adds, as
// arm64 and amd64.v3 and later do. A fused one rounds once where the
// page's build rounded twice.
const tablesRoundAsMade = false
