//go:build amd64 && !amd64.v3

package main

// tablesRoundAsMade: the compiler fuses no multiply and add in this build,
// as in the one that made docs/results.md, so the page's tables are its
// own to the last digit (TestLargeResultsDocTablesReproduce). (math.Exp
// picks a path with FMA at run time where the processor has it, as the
// page's did; its results decide little here: each is compared with a
// random draw.)
const tablesRoundAsMade = true
