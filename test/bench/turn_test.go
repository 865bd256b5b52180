package main

import "testing"

// TestTurnRunsEveryOrder: with three scenarios, six rounds run all six
// orders, each scenario exactly once per round.
func TestTurnRunsEveryOrder(t *testing.T) {
	seen := map[[3]int]bool{}
	for r := 0; r < 6; r++ {
		var order [3]int
		used := map[int]bool{}
		for i := range order {
			order[i] = turn(r, i, 3)
			if used[order[i]] {
				t.Fatalf("round %d runs scenario %d twice: %v", r, order[i], order)
			}
			used[order[i]] = true
		}
		seen[order] = true
	}
	if len(seen) != 6 {
		t.Fatalf("six rounds ran %d different orders, want 6: %v", len(seen), seen)
	}
	if turn(0, 0, 1) != 0 || turn(1, 0, 1) != 0 {
		t.Fatal("one scenario must always go")
	}
}
