//go:build race

package tests

const lockRaceEnabled = true
