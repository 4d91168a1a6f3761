//go:build race

package testutil

// Race is whether the test binary has the race detector: a test that
// builds a program to run (BuildProgram) builds it the same way, so the
// detector checks the processes too.
const Race = true
