package history

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// maxDetails bounds the violations String prints per invariant: a
// systematic failure makes thousands, and the first few say what it is.
const maxDetails = 10

// String prints the report compactly: operations by kind and outcome, the
// count of unpublished signatures, whether the record history was
// complete, then the violations by invariant (the first few of each in
// full).
func (r Report) String() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "operation\t")
	for _, o := range Outcomes {
		fmt.Fprintf(tw, "%s\t", o)
	}
	fmt.Fprint(tw, "total\t\n")
	kinds := append([]Kind(nil), Kinds...)
	// Kinds the report holds beyond the known ones, in name order.
	var extra []string
	for k := range r.OpsByKind {
		if !slices.Contains(kinds, k) {
			extra = append(extra, string(k))
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		kinds = append(kinds, Kind(k))
	}
	totals := map[Outcome]int{}
	all := 0
	for _, k := range kinds {
		byOutcome := r.OpsByKind[k]
		if len(byOutcome) == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t", k)
		sum := 0
		for _, o := range Outcomes {
			fmt.Fprintf(tw, "%d\t", byOutcome[o])
			sum += byOutcome[o]
			totals[o] += byOutcome[o]
		}
		all += sum
		fmt.Fprintf(tw, "%d\t\n", sum)
	}
	fmt.Fprint(tw, "all\t")
	for _, o := range Outcomes {
		fmt.Fprintf(tw, "%d\t", totals[o])
	}
	fmt.Fprintf(tw, "%d\t\n", all)
	_ = tw.Flush() // a strings.Builder does not fail

	fmt.Fprintf(&b, "unpublished signatures (records of certificates no client saw and no request holds): %d\n", r.UnpublishedSignatures)
	if r.RecordsComplete {
		fmt.Fprint(&b, "record history: complete (every issuance record written over the run was seen; every certificate was required to have one)\n")
	} else {
		fmt.Fprintf(&b, "record history: INCOMPLETE (the records watch missed events): certificates of retired keys and expired ones were not required to have a record; %d let pass without one\n", r.RecordsUnchecked)
	}
	byInv := map[string][]Violation{}
	for _, v := range r.Violations {
		byInv[v.Invariant] = append(byInv[v.Invariant], v)
	}
	fmt.Fprintf(&b, "violations: %d\n", len(r.Violations))
	invs := append([]string(nil), Invariants...)
	var other []string
	for inv := range byInv {
		if !slices.Contains(invs, inv) {
			other = append(other, inv)
		}
	}
	sort.Strings(other)
	invs = append(invs, other...)
	for _, inv := range invs {
		vs := byInv[inv]
		if len(vs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s: %d\n", inv, len(vs))
		for _, v := range firstN(vs, maxDetails) {
			fmt.Fprintf(&b, "    - %s\n", v.Detail)
		}
		if len(vs) > maxDetails {
			fmt.Fprintf(&b, "    - ... and %d more\n", len(vs)-maxDetails)
		}
	}
	return b.String()
}
