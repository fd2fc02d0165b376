package bench

import (
	"slices"
	"testing"
)

// Each odd round runs the paths in the reverse order of the round before, so every pair of
// paths runs in both orders (no build compared with another always follows it), and over 2n
// rounds every path goes first.
func TestPathOrder(t *testing.T) {
	for n := 2; n <= 5; n++ {
		paths := make([]int, n)
		for i := range paths {
			paths[i] = i
		}
		firsts := map[int]bool{}
		for r := 0; r < 2*n; r++ {
			a := pathOrder(paths, r)
			if s := slices.Sorted(slices.Values(a)); !slices.Equal(s, paths) {
				t.Fatalf("%d paths, round %d: %v is not every path once", n, r, a)
			}
			firsts[a[0]] = true
			if r%2 == 1 {
				continue
			}
			b := pathOrder(paths, r+1)
			for i := 0; i < n; i++ {
				for j := i + 1; j < n; j++ {
					before := func(o []int) bool { return slices.Index(o, i) < slices.Index(o, j) }
					if before(a) == before(b) {
						t.Fatalf("%d paths, rounds %d and %d (%v, %v): %d and %d in the same order", n, r, r+1, a, b, i, j)
					}
				}
			}
		}
		if len(firsts) != n {
			t.Fatalf("%d paths: over %d rounds only %v went first", n, 2*n, firsts)
		}
	}
}
