package sim

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// sizing is the sizing workload: a queue receiving 100 jobs a
// second, 30% of runs failing retryably (exponential backoff with full
// jitter, 5-minute cap), 5% answered with a 30-second Retry-After, four
// workers at prefetch 10, handlers taking 250 ms on average (the workers
// run at about 95% of capacity, so backlogs form).
func sizing(d time.Duration) Scenario {
	return Scenario{
		Name: "sizing", Duration: Duration(d),
		Queues: []Queue{{
			Workers: 4, Prefetch: 10,
			Retry:    Retry{Base: Duration(time.Second), Cap: Duration(5 * time.Minute)},
			Arrivals: []Arrival{{Process: ArrivalPoisson, Rate: 100}},
			Outcome: Outcome{
				Retryable: 0.30, RateLimited: 0.05,
				RetryAfter: Dist{Dist: DistConstant, Value: Duration(30 * time.Second)},
				Handler:    Dist{Dist: DistExponential, Mean: Duration(250 * time.Millisecond)},
			},
		}},
	}
}

// benchmarkSizing runs the sizing workload for d of virtual time per
// iteration and reports virtual seconds per wall second, trace events per
// second, and the live heap (after a collection) at each quarter of the
// run, which stays flat when memory does not grow with virtual time.
func benchmarkSizing(b *testing.B, d time.Duration) {
	s := sizing(d)
	var events uint64
	var heaps [4]float64
	for b.Loop() {
		quarter := 0
		res, err := Run(context.Background(), s, Options{Progress: func(done, total time.Duration) {
			for quarter < 4 && done >= total*time.Duration(quarter+1)/4 {
				b.StopTimer()
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				heaps[quarter] = float64(m.HeapAlloc) / (1 << 20)
				b.StartTimer()
				quarter++
			}
		}})
		if err != nil {
			b.Fatal(err)
		}
		if res.ViolationCount != 0 {
			b.Fatalf("%d violations: %v", res.ViolationCount, res.Violations)
		}
		events += res.Events
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)*d.Seconds()/secs, "virtual-s/s")
	b.ReportMetric(float64(events)/secs, "events/s")
	b.ReportMetric(heaps[0], "heap-MB-at-25%")
	b.ReportMetric(heaps[3], "heap-MB-at-100%")
}

// BenchmarkSizingHour: one virtual hour of the sizing workload.
func BenchmarkSizingHour(b *testing.B) { benchmarkSizing(b, time.Hour) }

// BenchmarkSizingDay: the performance target, 24 virtual hours.
//
//	go test -run '^$' -bench SizingDay -benchtime 1x ./sim/
func BenchmarkSizingDay(b *testing.B) { benchmarkSizing(b, 24*time.Hour) }
