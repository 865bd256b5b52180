package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func render(results []result, mem *memoryResult, bursts []burstSet, n, requesters, rounds int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Run of %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Machine: %s.\n\n", machine())
	if n == 0 {
		// A targeted run (no throughput scenarios): say exactly what ran.
		fmt.Fprintf(&b, "Command: `go run ./test/bench %s`.\n", strings.Join(os.Args[1:], " "))
		results = nil
	} else {
		fmt.Fprintf(&b, "Command: `make bench` (%d issuances per scenario in %d interleaved rounds, %d concurrent requesters, ECDSA P-256).\n\n", n, rounds, requesters)
		renderThroughput(&b, results)
	}
	var native *result
	for i := range results {
		if strings.HasPrefix(results[i].Name, "native") {
			native = &results[i]
		}
	}
	var rekeyRSS, kubeRSS float64
	if mem != nil {
		per := func(v float64) float64 { return v * 10000 / float64(mem.Stored) }
		rekeyRSS, kubeRSS = per(mem.Growth[0].RSSMiB), per(mem.Growth[1].RSSMiB)
		fmt.Fprintf(&b, "\nMemory kept for the stored requests (after a forced garbage collection, before and after all rounds; "+
			"%d stored requests each, scaled to 10,000):\n\n", mem.Stored)
		fmt.Fprintln(&b, "| server | RSS growth (MiB) | heap in use growth (MiB) | RSS per 10,000 (MiB) | heap per 10,000 (MiB) |")
		fmt.Fprintln(&b, "|---|---|---|---|---|")
		for i, name := range []string{"rekey-apiserver (certificates.rekey.io)", "kube-apiserver (certificates.k8s.io)"} {
			g := mem.Growth[i]
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f |\n", name, g.RSSMiB, g.HeapMiB, per(g.RSSMiB), per(g.HeapMiB))
		}
	}
	for _, set := range bursts {
		if len(set.results) == 0 {
			continue
		}
		first := set.results[0]
		fmt.Fprintf(&b, "\nBurst (%s: %s), %d nodes at once through kube-apiserver, %d bursts per API, taking turns (every kind in each round, its APIs in alternating order: rekey first, then native first, ...); time to the last certificate, mean and each burst:\n\n",
			set.kind.name, set.kind.description, first.Requested/max(1, len(first.Rounds)), len(first.Rounds))
		fmt.Fprintln(&b, "| API | issued | errors | last certificate after (mean) | each burst | certificates/s | CPU s: kube-apiserver | rekey-apiserver | kube-controller-manager | etcd | server CPU s / 1,000 |")
		fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|")
		for _, r := range set.results {
			cpu := func(name string) string {
				if v, ok := r.CPUByProcess[name]; ok {
					return fmt.Sprintf("%.1f", v)
				}
				return "-"
			}
			total := 0.0
			for _, v := range r.CPUByProcess {
				total += v
			}
			per1000 := 0.0
			if r.Issued > 0 {
				per1000 = total / float64(r.Issued) * 1000
			}
			each := make([]string, len(r.Rounds))
			for i, sec := range r.Rounds {
				each[i] = fmt.Sprintf("%.1f s", sec)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %.0f | %s | %s | %s | %s | %.2f |\n", r.Name, r.Issued, r.Errors, r.perBurst().Round(time.Millisecond), strings.Join(each, ", "), r.Throughput,
				cpu("kube-apiserver"), cpu("rekey-apiserver"), cpu("kube-controller-manager"), cpu("etcd"), per1000)
		}
	}
	if len(results) > 0 || mem != nil || len(bursts) > 0 {
		fmt.Fprint(&b, "\nTargets:\n\n")
	}
	for _, r := range results {
		if r.Issued == 0 || native == nil || native.Issued == 0 {
			continue
		}
		switch {
		case strings.HasPrefix(r.Name, "rekey standalone"):
			check(&b, fmt.Sprintf("direct throughput >= 2x native (%.2fx)", r.Throughput/native.Throughput), r.Throughput >= 2*native.Throughput)
			check(&b, fmt.Sprintf("direct p99 <= 0.6x native's (%s vs %s, %.2fx)", ms(r.P99), ms(native.P99), float64(r.P99)/float64(native.P99)), float64(r.P99) <= 0.6*float64(native.P99))
		case strings.HasPrefix(r.Name, "rekey aggregated"):
			check(&b, fmt.Sprintf("aggregated throughput >= 1.2x native (%.2fx)", r.Throughput/native.Throughput), r.Throughput >= 1.2*native.Throughput)
		}
	}
	if mem != nil {
		check(&b, fmt.Sprintf("rekey-apiserver RSS growth per 10,000 stored CSRs <= kube-apiserver's (%.0f vs %.0f MiB)", rekeyRSS, kubeRSS), rekeyRSS <= kubeRSS)
	}
	for _, set := range bursts {
		if len(set.results) == 0 {
			continue
		}
		label := set.kind.name + " burst"
		if !set.kind.target {
			label += " (reported, not a target)"
		}
		burst := set.results[0]
		check(&b, fmt.Sprintf("%s: every certificate issued (%d/%d), none lost", label, burst.Issued, burst.Requested), burst.Errors == 0 && burst.Issued == burst.Requested)
		if len(set.results) > 1 && set.results[1].Elapsed > 0 {
			native := set.results[1]
			check(&b, fmt.Sprintf("%s: at least 2x faster than kube-controller-manager (%s vs %s per burst, %.2fx)", label, burst.perBurst().Round(time.Millisecond), native.perBurst().Round(time.Millisecond),
				float64(native.Elapsed)/float64(burst.Elapsed)), burst.Errors == 0 && 2*burst.Elapsed <= native.Elapsed)
		}
	}
	return b.String()
}

// renderThroughput is the throughput scenarios' tables.
func renderThroughput(b *strings.Builder, results []result) {
	fmt.Fprintln(b, "| scenario | issued | errors | issuances/s | per round | p50 | p95 | p99 | server CPU s / 1,000 | peak RSS (MiB) |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|---|---|")
	var native *result
	for i := range results {
		r := results[i]
		if strings.HasPrefix(r.Name, "native") {
			native = &results[i]
		}
		per := make([]string, len(r.Rounds))
		for j, t := range r.Rounds {
			per[j] = fmt.Sprintf("%.0f", t)
		}
		fmt.Fprintf(b, "| %s | %d | %d | %.0f | %s | %s | %s | %s | %.2f | %.0f |\n", r.Name, r.Issued, r.Errors, r.Throughput,
			strings.Join(per, ", "), ms(r.P50), ms(r.P95), ms(r.P99), r.CPUPer1000, r.PeakRSSMiB)
	}
	if native != nil {
		fmt.Fprint(b, "\nRatio rekey / native:\n\n")
		fmt.Fprintln(b, "| scenario | throughput | p50 | p99 | CPU per 1,000 |")
		fmt.Fprintln(b, "|---|---|---|---|---|")
		for _, r := range results {
			if strings.HasPrefix(r.Name, "native") {
				continue
			}
			fmt.Fprintf(b, "| %s | %.2fx | %.2fx | %.2fx | %.2fx |\n", r.Name, r.Throughput/native.Throughput,
				float64(r.P50)/float64(native.P50), float64(r.P99)/float64(native.P99), r.CPUPer1000/native.CPUPer1000)
		}
	}
	fmt.Fprint(b, "\nServer CPU seconds per 1,000 issuances, by process (standalone: rekey-apiserver with its embedded etcd):\n\n")
	fmt.Fprintln(b, "| scenario | rekey-apiserver | kube-apiserver | kube-controller-manager | etcd | total |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|")
	for _, r := range results {
		if r.Issued == 0 {
			continue
		}
		cpu := func(name string) string {
			if v, ok := r.CPUByProcess[name]; ok {
				return fmt.Sprintf("%.2f", v/float64(r.Issued)*1000)
			}
			return "-"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %.2f |\n", r.Name, cpu("rekey-apiserver"), cpu("kube-apiserver"), cpu("kube-controller-manager"), cpu("etcd"), r.CPUPer1000)
	}
}

func check(b *strings.Builder, what string, ok bool) {
	mark := "MET"
	if !ok {
		mark = "NOT MET"
	}
	fmt.Fprintf(b, "- %s: %s\n", mark, what)
}
