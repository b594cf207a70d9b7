//go:build amd64 && !amd64.v3

package main

// tablesRoundAsMade is true because the compiler fuses no multiply and add
// in this build, as in the one that made docs/results.md. The page's
// tables are then its own to the last digit, which
// TestLargeResultsDocTablesReproduce checks. math.Exp picks a path with FMA
// at run time where the processor has it, as the page's build did, but its
// results decide little here because each is compared with a random draw.
const tablesRoundAsMade = true
