package sim

import (
	"encoding/json"
	"math/bits"
	"time"
)

// Histogram counts non-negative durations in log-linear buckets: exact
// below 128 ns, then 64 buckets per power of two (under 1.6% wide), so
// quantiles are upper bounds within 1.6% while memory stays fixed however
// long the run. Count, Max and Mean are exact.
type Histogram struct {
	counts []uint64
	n      uint64
	sum    float64
	max    time.Duration
}

const histSub = 64 // buckets per power of two

func histBucket(v time.Duration) int {
	u := uint64(max(v, 0))
	if u < 2*histSub {
		return int(u)
	}
	e := bits.Len64(u) - 7 // u>>e is in [64, 128)
	return 2*histSub + (e-1)*histSub + int(u>>e) - histSub
}

// histUpper is the largest value bucket i holds.
func histUpper(i int) time.Duration {
	if i < 2*histSub {
		return time.Duration(i)
	}
	e := (i-2*histSub)/histSub + 1
	m := uint64((i-2*histSub)%histSub + histSub)
	return time.Duration((m+1)<<e - 1)
}

// Add counts v (negative values count as 0).
func (h *Histogram) Add(v time.Duration) {
	v = max(v, 0)
	i := histBucket(v)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	h.sum += float64(v)
	h.max = max(h.max, v)
}

// Count is how many values were added.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest value added, exactly.
func (h *Histogram) Max() time.Duration { return h.max }

// Mean is the exact mean, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns an upper bound of the q-quantile (0 <= q <= 1) within
// the bucket width, never above Max; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histUpper(i), h.max)
		}
	}
	return h.max
}

// Summary is a histogram's figures.
type Summary struct {
	Count uint64        `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summary returns the count, mean, median, 99th percentile and maximum.
func (h *Histogram) Summary() Summary {
	return Summary{Count: h.n, Mean: h.Mean(), P50: h.Quantile(0.5), P99: h.Quantile(0.99), Max: h.max}
}

// MarshalJSON writes the Summary.
func (h *Histogram) MarshalJSON() ([]byte, error) { return json.Marshal(h.Summary()) }

// Counter counts small non-negative integers (attempts, deferrals per job).
type Counter struct {
	counts []uint64
	n      uint64
	sum    uint64
}

// Add counts v (negative as 0).
func (c *Counter) Add(v int) {
	v = max(v, 0)
	if v >= len(c.counts) {
		c.counts = append(c.counts, make([]uint64, v+1-len(c.counts))...)
	}
	c.counts[v]++
	c.n++
	c.sum += uint64(v)
}

// Counts returns how many of each value were added, indexed by value.
func (c *Counter) Counts() []uint64 { return append([]uint64(nil), c.counts...) }

// Mean of the values added, 0 when empty.
func (c *Counter) Mean() float64 {
	if c.n == 0 {
		return 0
	}
	return float64(c.sum) / float64(c.n)
}

// Max value added.
func (c *Counter) Max() int { return max(len(c.counts)-1, 0) }

// MarshalJSON writes the count of each value, its mean and maximum.
func (c *Counter) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Counts []uint64 `json:"counts"`
		Mean   float64  `json:"mean"`
		Max    int      `json:"max"`
	}{c.Counts(), c.Mean(), c.Max()})
}
