package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/framework"
)

// gateCA is the CA the trust-gate benchmark rotates; nothing signs with it.
const gateCA = "bench-trust-gate"

// gateResult is a rotation's trust gate with thousands of reporting
// TrustConsumers (issue #29: "measure a rotation's gate with 5,000
// reporting consumers").
type gateResult struct {
	Consumers, Workers int
	// Create and Baseline are the setup: creating the consumers, and each
	// reporting that it holds the current CA (as trust-sync does first).
	Create, Baseline time.Duration
	// StartToWaiting is from the Start to the CA Preparing with every
	// consumer counted as waited for.
	StartToWaiting time.Duration
	// IdleWrites counts the CA's writes in IdleFor while Preparing waited
	// and no consumer reported.
	IdleWrites int
	IdleFor    time.Duration
	// Reports is from the first report of the next CA to the last one's
	// response; ReportErrors counts reports that failed for good.
	Reports      time.Duration
	ReportErrors int
	// LastToPrepared is from the last report's response to the watch
	// showing Prepared; EarlyPrepared says Prepared was seen before the
	// last report (the gate opened too soon).
	LastToPrepared time.Duration
	EarlyPrepared  bool
	// Writes counts the CA's writes (resourceVersion changes on a watch)
	// from the first report to Prepared; Waiting is status.trust.waiting
	// at each of them.
	Writes  int
	Waiting []waitingSample
	// CABytes is the largest CA object (JSON) among those writes: what
	// each watcher of the CA receives per write (trust-sync watches the
	// CAs it names).
	CABytes int
	// CPUByProcess is server CPU from the first report to Prepared.
	CPUByProcess map[string]float64
	// Reason is the TrustPropagated condition's reason at Prepared.
	Reason string
}

type waitingSample struct {
	At      time.Duration
	Waiting int32
	Phase   rotationv1alpha1.RotationPhase
}

// caEvent is one write of the CA as the watch saw it.
type caEvent struct {
	at    time.Time
	phase rotationv1alpha1.RotationPhase
	trust *rotationv1alpha1.TrustStatus
	cond  *metav1.Condition
	size  int
}

// trustGate runs the gate benchmark against the aggregated cluster as the
// admin (who is every consumer's reporter).
func trustGate(ctx context.Context, admin clientset.Interface, pids map[string]int, n, workers int) (*gateResult, error) {
	res := &gateResult{Consumers: n, Workers: workers}
	cas := admin.RotationV1alpha1().CertificateAuthorities()
	tcs := admin.RotationV1alpha1().TrustConsumers()
	_, err := cas.Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: gateCA},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{
			CommonName: "bench trust gate", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Rotation: &rotationv1alpha1.RotationPolicy{TrustPropagation: &metav1.Duration{}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating CertificateAuthority %s: %w", gateCA, err)
	}
	var ca *rotationv1alpha1.CertificateAuthority
	err = framework.EventuallyErr(time.Minute, func(ctx context.Context) error {
		if ca, err = cas.Get(ctx, gateCA, metav1.GetOptions{}); err != nil {
			return err
		}
		if ca.Status.Current == nil {
			return fmt.Errorf("no current CA yet")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("CertificateAuthority %s: %w", gateCA, err)
	}
	current := ca.Status.Current.Fingerprint

	fmt.Fprintf(os.Stderr, "trust gate: %d consumers of %s\n", n, gateCA)
	consumers := make([]*rotationv1alpha1.TrustConsumer, n)
	var setupErrs atomic.Int64
	start := time.Now()
	parallel(n, workers, func(i int) {
		tc, err := tcs.Create(ctx, &rotationv1alpha1.TrustConsumer{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-node-%05d", i)},
			Spec:       rotationv1alpha1.TrustConsumerSpec{CertificateAuthorities: []string{gateCA}},
		}, metav1.CreateOptions{})
		if err != nil {
			setupErrs.Add(1)
			fmt.Fprintf(os.Stderr, "  creating consumer %d: %v\n", i, err)
			return
		}
		consumers[i] = tc
	})
	res.Create = time.Since(start)
	if setupErrs.Load() > 0 {
		return nil, fmt.Errorf("%d of %d consumers not created", setupErrs.Load(), n)
	}
	start = time.Now()
	if errs, _ := report(ctx, admin, consumers, workers, []string{current}); errs > 0 {
		return nil, fmt.Errorf("%d of %d consumers could not report the current CA", errs, n)
	}
	res.Baseline = time.Since(start)
	fmt.Fprintf(os.Stderr, "  created in %s, holding the current CA in %s\n", res.Create.Round(time.Millisecond), res.Baseline.Round(time.Millisecond))

	// Every write of the CA from here on, as a watch sees it.
	if ca, err = cas.Get(ctx, gateCA, metav1.GetOptions{}); err != nil {
		return nil, err
	}
	events, stop, err := watchCA(ctx, admin, gateCA, ca.ResourceVersion)
	if err != nil {
		return nil, err
	}
	defer stop()

	startAt := time.Now()
	if _, err := cas.Rotate(ctx, gateCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("starting the rotation of %s: %w", gateCA, err)
	}
	err = framework.EventuallyErr(time.Minute, func(ctx context.Context) error {
		if ca, err = cas.Get(ctx, gateCA, metav1.GetOptions{}); err != nil {
			return err
		}
		if ca.Status.Phase != rotationv1alpha1.PhasePreparing || ca.Status.Next == nil || ca.Status.Trust == nil ||
			ca.Status.Trust.Consumers != int32(n) || ca.Status.Trust.Waiting != int32(n) {
			return fmt.Errorf("phase %q, trust %+v", ca.Status.Phase, ca.Status.Trust)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("CertificateAuthority %s did not wait for its %d consumers: %w", gateCA, n, err)
	}
	res.StartToWaiting = time.Since(startAt)
	next := ca.Status.Next.Fingerprint

	// A waiting CA with no report coming should not be written: count
	// its writes over a quiet interval.
	res.IdleFor = 5 * time.Second
	idleFrom := time.Now()
	time.Sleep(res.IdleFor)
	idleTo := time.Now()

	cpu0 := map[string]float64{}
	for name, pid := range pids {
		cpu0[name] = cpuSeconds(pid)
	}
	fmt.Fprintf(os.Stderr, "trust gate: %d consumers report holding the next CA (%d workers)\n", n, workers)
	t0 := time.Now()
	var lastSent time.Time
	res.ReportErrors, lastSent = report(ctx, admin, consumers, workers, []string{current, next})
	lastReport := time.Now()
	res.Reports = lastReport.Sub(t0)

	var preparedAt time.Time
	var seen []caEvent
	timeout := time.After(2 * time.Minute)
wait:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, fmt.Errorf("the watch of %s ended", gateCA)
			}
			seen = append(seen, ev)
			if ev.phase == rotationv1alpha1.PhasePrepared {
				preparedAt = ev.at
				if ev.cond != nil {
					res.Reason = ev.cond.Reason
				}
				break wait
			}
		case <-timeout:
			return nil, fmt.Errorf("CertificateAuthority %s did not reach Prepared within 2m of the last report", gateCA)
		}
	}
	res.CPUByProcess = map[string]float64{}
	for name, pid := range pids {
		res.CPUByProcess[name] = cpuSeconds(pid) - cpu0[name]
	}
	res.LastToPrepared = preparedAt.Sub(lastReport)
	// Before the last report was even sent, the gate opened too soon.
	res.EarlyPrepared = preparedAt.Before(lastSent)
	for _, ev := range seen {
		switch {
		case ev.at.After(idleFrom) && ev.at.Before(idleTo):
			res.IdleWrites++
		case !ev.at.Before(t0):
			res.Writes++
			res.CABytes = max(res.CABytes, ev.size)
			s := waitingSample{At: ev.at.Sub(t0), Phase: ev.phase}
			if ev.trust != nil {
				s.Waiting = ev.trust.Waiting
			}
			res.Waiting = append(res.Waiting, s)
		}
	}
	fmt.Fprintf(os.Stderr, "  reports in %s; Prepared %s after the last; %d CA writes meanwhile\n",
		res.Reports.Round(time.Millisecond), res.LastToPrepared.Round(time.Millisecond), res.Writes)
	return res, nil
}

// report has every consumer report holding fingerprints of gateCA, as
// trust-sync does after writing its file, workers at a time; a conflict is
// read again and retried. It returns how many failed for good, and when
// the last report was sent.
func report(ctx context.Context, admin clientset.Interface, consumers []*rotationv1alpha1.TrustConsumer, workers int, fingerprints []string) (int, time.Time) {
	tcs := admin.RotationV1alpha1().TrustConsumers()
	var errs atomic.Int64
	var lastMu sync.Mutex
	var last time.Time
	parallel(len(consumers), workers, func(i int) {
		tc := consumers[i].DeepCopy()
		for attempt := 0; ; attempt++ {
			tc.Status.Holds = []rotationv1alpha1.TrustHeld{{CertificateAuthority: gateCA, Fingerprints: fingerprints}}
			sent := time.Now()
			lastMu.Lock()
			if sent.After(last) {
				last = sent
			}
			lastMu.Unlock()
			out, err := tcs.UpdateStatus(ctx, tc, metav1.UpdateOptions{})
			if err == nil {
				consumers[i] = out
				return
			}
			if apierrors.IsConflict(err) && attempt < 5 {
				if tc, err = tcs.Get(ctx, tc.Name, metav1.GetOptions{}); err == nil {
					continue
				}
			}
			errs.Add(1)
			fmt.Fprintf(os.Stderr, "  report of %s: %v\n", consumers[i].Name, err)
			return
		}
	})
	return int(errs.Load()), last
}

// watchCA sends every write of CA name after rv, with the time it was
// seen.
func watchCA(ctx context.Context, admin clientset.Interface, name, rv string) (<-chan caEvent, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	cas := admin.RotationV1alpha1().CertificateAuthorities()
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		return cas.Watch(ctx, opts)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("watching %s: %w", name, err)
	}
	out := make(chan caEvent, 100000)
	var once sync.Once
	go func() {
		defer close(out)
		for ev := range rw.ResultChan() {
			ca, ok := ev.Object.(*rotationv1alpha1.CertificateAuthority)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			data, _ := json.Marshal(ca)
			out <- caEvent{at: time.Now(), phase: ca.Status.Phase, trust: ca.Status.Trust, size: len(data),
				cond: apimeta.FindStatusCondition(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityTrustPropagated)}
		}
	}()
	return out, func() { once.Do(func() { rw.Stop(); cancel() }) }, nil
}

// renderGate is the gate's section of the report.
func renderGate(r *gateResult) string {
	var b stringsBuilder
	b.f("\nTrust gate with %d TrustConsumers on one CA (issue #29): CA `%s` (spec.rotation.trustPropagation 0s) rotates; every consumer (created as the admin, its reporter) first reports holding the current CA, then, after the Start, reports holding the next one (status updates, %d at a time, through kube-apiserver). No peer: kube-controller-manager has no such feature; absolute figures.\n\n",
		r.Consumers, gateCA, r.Workers)
	b.f("| consumers | reports of the next CA landed in | reports/s | failed reports | last report to Prepared | CA writes, first report to Prepared | CA writes while waiting, no reports (%s) | server CPU s, first report to Prepared | Start to waiting for all | setup: create, first reports |\n", r.IdleFor)
	b.f("|---|---|---|---|---|---|---|---|---|---|\n")
	b.f("| %d | %s | %.0f | %d | %s | %d | %d | %s | %s | %s, %s |\n", r.Consumers, r.Reports.Round(time.Millisecond), float64(r.Consumers)/r.Reports.Seconds(), r.ReportErrors,
		r.LastToPrepared.Round(time.Millisecond), r.Writes, r.IdleWrites, cpuList(r.CPUByProcess), r.StartToWaiting.Round(time.Millisecond), r.Create.Round(time.Millisecond), r.Baseline.Round(time.Millisecond))
	// Per second since the first report: the CA's writes, and
	// status.trust.waiting at the second's last write.
	var perSec []int
	var waiting []string
	for _, s := range r.Waiting {
		i := int(s.At / time.Second)
		for len(perSec) <= i {
			perSec = append(perSec, 0)
			waiting = append(waiting, "-")
		}
		perSec[i]++
		waiting[i] = fmt.Sprintf("%d", s.Waiting)
	}
	b.f("\nEvery write of the CA goes to every watcher of it, and each consumer's `rekey-agent trust-sync` watches the CAs it names: %d writes to %d watchers is %d watch events, about %.0f MiB at %d bytes a CA object (JSON), for one rotation's reports.\n",
		r.Writes, r.Consumers, r.Writes*r.Consumers, float64(r.Writes)*float64(r.Consumers)*float64(r.CABytes)/(1<<20), r.CABytes)
	b.f("\nCA writes per second since the first report: %s; status.trust.waiting after each second: %s. TrustPropagated reason at Prepared: %s.\n",
		perSecond(perSec), strings.Join(waiting, " "), r.Reason)
	b.f("\nTargets:\n\n")
	check(&b.Builder, fmt.Sprintf("trust gate: every report landed (%d failed) and the CA reached Prepared only after the last (%s after)", r.ReportErrors, r.LastToPrepared.Round(time.Millisecond)),
		r.ReportErrors == 0 && !r.EarlyPrepared)
	return b.String()
}
