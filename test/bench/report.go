package main

import (
	"fmt"
	"strings"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func render(results []result, burst *result, n, requesters int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Run of %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Machine: %s.\n\n", machine())
	fmt.Fprintf(&b, "Command: `make bench` (%d issuances per scenario, %d concurrent requesters, ECDSA P-256).\n\n", n, requesters)
	fmt.Fprintln(&b, "| scenario | issued | errors | issuances/s | p50 | p95 | p99 | server CPU s / 1,000 | peak RSS (MiB) | RSS growth (MiB) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|")
	var native *result
	for i := range results {
		r := results[i]
		if strings.HasPrefix(r.Name, "native") {
			native = &results[i]
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %s | %s | %s | %.2f | %.0f | %.0f |\n", r.Name, r.Issued, r.Errors, r.Throughput, ms(r.P50), ms(r.P95), ms(r.P99), r.CPUPer1000, r.PeakRSSMiB, r.RSSGrowth)
	}
	if native != nil {
		fmt.Fprint(&b, "\nRatio rekey / native:\n\n")
		fmt.Fprintln(&b, "| scenario | throughput | p50 | p99 | CPU per 1,000 | RSS growth |")
		fmt.Fprintln(&b, "|---|---|---|---|---|---|")
		for _, r := range results {
			if &r == native || strings.HasPrefix(r.Name, "native") {
				continue
			}
			fmt.Fprintf(&b, "| %s | %.2fx | %.2fx | %.2fx | %.2fx | %s |\n", r.Name, r.Throughput/native.Throughput,
				float64(r.P50)/float64(native.P50), float64(r.P99)/float64(native.P99), r.CPUPer1000/native.CPUPer1000, ratio(r.RSSGrowth, native.RSSGrowth))
		}
	}
	if burst != nil {
		fmt.Fprintf(&b, "\nBootstrap burst: %s: %d issued, %d errors, last certificate after %s (%.0f/s).\n", burst.Name, burst.Issued, burst.Errors, burst.Elapsed.Round(time.Millisecond), burst.Throughput)
	}
	fmt.Fprint(&b, "\nTargets:\n\n")
	for _, r := range results {
		switch {
		case strings.HasPrefix(r.Name, "rekey standalone") && native != nil:
			check(&b, fmt.Sprintf("direct throughput >= 3x native (%.2fx)", r.Throughput/native.Throughput), r.Throughput >= 3*native.Throughput)
			check(&b, fmt.Sprintf("direct p99 < 250 ms (%s)", ms(r.P99)), r.P99 < 250*time.Millisecond)
		case strings.HasPrefix(r.Name, "rekey aggregated") && native != nil:
			check(&b, fmt.Sprintf("aggregated throughput >= 1.5x native (%.2fx)", r.Throughput/native.Throughput), r.Throughput >= 1.5*native.Throughput)
			check(&b, fmt.Sprintf("rekey-apiserver RSS growth for %d stored CSRs <= kube-apiserver's (%.0f vs %.0f MiB)", r.Issued, r.RSSGrowth, native.RSSGrowth), r.RSSGrowth <= native.RSSGrowth)
		}
	}
	if burst != nil {
		check(&b, fmt.Sprintf("burst: every certificate issued (%d/%d), none lost", burst.Issued, burst.Issued+burst.Errors+0), burst.Errors == 0 && burst.Issued > 0)
		check(&b, fmt.Sprintf("burst: last certificate in under 20 s (%s)", burst.Elapsed.Round(time.Millisecond)), burst.Elapsed < 20*time.Second && burst.Errors == 0)
	}
	return b.String()
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func check(b *strings.Builder, what string, ok bool) {
	mark := "MET"
	if !ok {
		mark = "NOT MET"
	}
	fmt.Fprintf(b, "- %s: %s\n", mark, what)
}
