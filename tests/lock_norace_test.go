//go:build !race

package tests

const lockRaceEnabled = false
