package sim

import (
	"testing"

	"pgregory.net/rapid"
)

// TestJobTableMatchesAMap drives a jobTable and a map with the same adds
// and removals, job numbers increasing with gaps, including jobs that
// outlive the window, and compares every lookup.
func TestJobTableMatchesAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tab jobTable
		model := map[uint64]*job{}
		next := uint64(rapid.IntRange(1, 5).Draw(t, "first"))
		for step := range rapid.IntRange(0, 3000).Draw(t, "steps") {
			_ = step
			switch {
			case rapid.IntRange(0, 9).Draw(t, "op") < 6:
				next += uint64(rapid.IntRange(0, 2).Draw(t, "gap"))
				j := &job{n: next}
				tab.put(next, j)
				model[next] = j
				next++
			case len(model) > 0:
				// Remove the oldest live job mostly, any job sometimes.
				var n uint64
				if rapid.Bool().Draw(t, "oldest") {
					n = next
					for k := range model {
						n = min(n, k)
					}
				} else {
					n = uint64(rapid.IntRange(0, int(next)).Draw(t, "any"))
				}
				tab.remove(n)
				delete(model, n)
			}
			if tab.len() != len(model) {
				t.Fatalf("len %d, want %d", tab.len(), len(model))
			}
		}
		for n := uint64(0); n <= next+2; n++ {
			if got, want := tab.get(n), model[n]; got != want {
				t.Fatalf("get(%d) = %p, want %p", n, got, want)
			}
		}
		seen := 0
		tab.each(func(n uint64, j *job) {
			seen++
			if model[n] != j {
				t.Fatalf("each gives %d -> %p, want %p", n, j, model[n])
			}
		})
		if seen != len(model) {
			t.Fatalf("each gives %d jobs, want %d", seen, len(model))
		}
	})
}

// TestJobTableWindowIsBounded keeps one job alive while many later ones
// come and go: it moves to the map and the window stays within its bound.
func TestJobTableWindowIsBounded(t *testing.T) {
	var tab jobTable
	first := &job{n: 1}
	tab.put(1, first)
	for n := uint64(2); n < 3*maxJobWindow; n++ {
		tab.put(n, &job{n: n})
		tab.remove(n)
		if len(tab.slots) > maxJobWindow || cap(tab.buf) > 4*maxJobWindow {
			t.Fatalf("at job %d the window holds %d slots in storage of %d", n, len(tab.slots), cap(tab.buf))
		}
	}
	if tab.get(1) != first || tab.len() != 1 {
		t.Fatalf("the old job is lost: get(1) = %p, len %d", tab.get(1), tab.len())
	}
}

func TestJobNumber(t *testing.T) {
	for id, want := range map[string]uint64{
		"j1": 1, "j1234567890": 1234567890, "j9999999999999999999": 9999999999999999999,
		"": 0, "j": 0, "x12": 0, "j12a": 0, "j-1": 0, "j+1": 0, "m12": 0, "j99999999999999999999": 0,
	} {
		if got := jobNumber(id); got != want {
			t.Errorf("jobNumber(%q) = %d, want %d", id, got, want)
		}
	}
}
