package sim

import (
	"testing"
	"time"
)

func TestHistogramBucketsCoverEveryValueInOrder(t *testing.T) {
	prev := -1
	for _, v := range []time.Duration{0, 1, 127, 128, 129, 255, 256, 1000, time.Millisecond, time.Second, time.Hour, 1 << 62} {
		i := histBucket(v)
		if i < prev {
			t.Fatalf("bucket of %d is %d, before %d", v, i, prev)
		}
		if up := histUpper(i); up < v || (v >= 128 && float64(up-v) > float64(v)/60) {
			t.Fatalf("value %d: bucket %d upper %d", v, i, up)
		}
		if i > 0 && histUpper(i-1) >= v {
			t.Fatalf("value %d also fits bucket %d (upper %d)", v, i-1, histUpper(i-1))
		}
		prev = i
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Millisecond)
	}
	if h.Count() != 1000 || h.Max() != time.Second {
		t.Fatalf("count %d max %s", h.Count(), h.Max())
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, time.Second}} {
		got := h.Quantile(c.q)
		if got < c.want || float64(got-c.want) > 0.016*float64(c.want) {
			t.Errorf("Quantile(%v) = %s, want %s within 1.6%%", c.q, got, c.want)
		}
	}
	if m := h.Mean(); m != 500500*time.Microsecond {
		t.Errorf("mean %s", m)
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram is not zero")
	}
}
