//go:build race

package main

// raceEnabled: the binary the tests build shares the test's compiled
// packages (and their race instrumentation), so only linking is left.
const raceEnabled = true
