//go:build amd64 && !amd64.v3

package main

// tablesRoundAsMade: this build rounds as the one that made
// docs/results.md (amd64 without fused multiply-adds), so the page's
// tables are its own to the last digit (TestLargeResultsDocTablesReproduce).
const tablesRoundAsMade = true
