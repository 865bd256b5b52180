package main

import (
	"strings"
	"testing"
)

// TestReadWorkloads: every value -revocation-workload documents builds a
// workload, and any other is refused naming the flag.
func TestReadWorkloads(t *testing.T) {
	for _, name := range revocationWorkloads {
		w, err := newReadWorkload(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if w.name != name || w.describe == "" || w.setup == nil || w.read == nil {
			t.Fatalf("%s: incomplete workload %+v", name, w)
		}
	}
	if _, err := newReadWorkload("watch"); err == nil || !strings.Contains(err.Error(), "-revocation-workload") {
		t.Fatalf("unknown workload: got %v, want an error naming -revocation-workload", err)
	}
	// The mixed workload's LIST expects the same number of pods on each node.
	if revMixedPods%revMixedNodes != 0 {
		t.Fatalf("%d pods do not spread evenly over %d Nodes", revMixedPods, revMixedNodes)
	}
}
