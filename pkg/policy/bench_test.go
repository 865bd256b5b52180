package policy

import (
	"testing"
)

func BenchmarkEvaluateKubeletClient(b *testing.B) {
	spec, parsed := build(b, req{cn: "system:node:n1", orgs: nodeOrgs, usages: clientU})
	p := KubeletClientPolicy
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Evaluate(&p, spec, parsed); err != nil {
			b.Fatal(err)
		}
	}
}
