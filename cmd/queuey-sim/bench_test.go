package main

import (
	"io"
	"testing"
)

// BenchmarkDefaultRun runs the command as `queuey-sim` with no arguments
// does: the default scenario (one virtual hour) at every default
// granularity, up to four runs per core at once, with main's GC setting.
// Its figure is the default run's wall time:
//
//	go test -run '^$' -bench DefaultRun -benchtime 1x ./cmd/queuey-sim/
//
// Set GOGC (GOGC=100 for Go's default) to measure without tuneGC.
func BenchmarkDefaultRun(b *testing.B) {
	tuneGC()
	for b.Loop() {
		if code := run(nil, io.Discard, io.Discard); code != exitOK {
			b.Fatalf("exit status %d", code)
		}
	}
}
