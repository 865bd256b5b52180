// Package fault runs rekey as it runs at scale, three replicas on a
// three-member etcd, under a mixed load while faults are injected, and
// checks the recorded history and the final state (package history) for
// anything lost, signed twice or signed by a retired key.
//
// Standalone replicas, not replicas behind a kube-apiserver: the faults
// under test are etcd's and rekey's, and a front kube-apiserver would add
// a hop with failure modes of its own and a third of the run's CPU on two
// cores. Without a host cluster there are no RotatingCredentials to
// rotate; that part of the load is left out.
package fault

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	mathrand "math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/grpclog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/test/fault/history"
	"rekey.io/rekey/test/framework"
)

func TestMain(m *testing.M) {
	// The suite's own etcd client reconnects after every etcd fault; gRPC
	// would log each failed dial of it, thousands of lines per run.
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	code := m.Run()
	framework.RemoveBinaries()
	os.Exit(code)
}

// Environment of a run: REKEY_FAULT_DURATION (default 4m: what make test
// runs), REKEY_FAULT_SEED (default: the clock; printed either way, so a
// failed run can be replayed), REKEY_FAULT_REPORT (a file the figures are
// written to, as Markdown), REKEY_FAULT_RATE (request lifetimes started per
// second across the workers; default 0, as fast as the replicas answer:
// a long run paces its load so that what it stores fits the members'
// disks and the final read).
const (
	envDuration = "REKEY_FAULT_DURATION"
	envSeed     = "REKEY_FAULT_SEED"
	envReport   = "REKEY_FAULT_REPORT"
	envRate     = "REKEY_FAULT_RATE"
	// envKinds limits a run to some fault kinds (comma-separated names,
	// as the figures print them): to look at one fault closely.
	envKinds = "REKEY_FAULT_KINDS"
	// envHistory names a file the run's operations and faults are
	// written to, as JSON, for a closer look than the figures give.
	envHistory = "REKEY_FAULT_HISTORY"
	// workers run request lifetimes concurrently.
	workers = 6
)

func TestFaultsUnderLoad(t *testing.T) {
	duration := 4 * time.Minute
	if v := os.Getenv(envDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", envDuration, v, err)
		}
		duration = d
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
		seed = s
	}
	var limiter *rate.Limiter
	if v := os.Getenv(envRate); v != "" && v != "0" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 {
			t.Fatalf("%s=%q: want a number of lifetimes per second", envRate, v)
		}
		limiter = rate.NewLimiter(rate.Limit(r), 1)
	}
	t.Logf("seed %d; replay with %s=%d %s=%s make test-fault", seed, envSeed, seed, envDuration, duration)
	fmt.Printf("fault suite: seed %d, duration %s\n", seed, duration)

	// Each member's disk is a tmpfs (memory, as much as it holds): small
	// enough that the disk-full fault fills it in a moment, large enough
	// for what the run stores. etcd keeps two or three 64 MB WAL segments
	// beside its backend, which an unpaced load grows by about 45 MB a
	// minute (no compaction in a short run, and bbolt never shrinks): 256
	// MiB filled all three members 3.5 minutes into a 4-minute run.
	disk := int64(1<<30) + int64(duration/time.Minute)*(64<<20)
	etcd := framework.StartEtcdCluster(t, framework.EtcdClusterOptions{Members: 3, DiskBytes: disk})
	rs := startReplicas(t, 3, etcd)
	// Every record written from now on, before the first is: the checker
	// asks every certificate for its record, even once a rotation pruned
	// it.
	records, err := watchRecords(rs.etcd)
	if err != nil {
		t.Fatal(err)
	}
	setUp(t, rs)

	h := history.New()
	l := &load{rs: rs, h: h, limiter: limiter}
	kinds, leftOut := faultKinds(etcd)
	if leftOut != "" {
		t.Logf("%s", leftOut)
		fmt.Printf("fault suite: %s\n", leftOut)
	}
	if v := os.Getenv(envKinds); v != "" {
		var only []faultKind
		for _, k := range kinds {
			if slices.Contains(strings.Split(v, ","), string(k)) {
				only = append(only, k)
			}
		}
		if len(only) == 0 {
			t.Fatalf("%s=%q names none of %v", envKinds, v, kinds)
		}
		kinds = only
	}
	in := &injector{t: t, etcd: etcd, rs: rs, kinds: kinds}
	master := mathrand.New(mathrand.NewSource(seed))

	began := time.Now()
	// The first fifth (at least 30 s) runs without faults: the
	// throughput the faults are measured against, in the same run.
	baseline := max(duration/5, 30*time.Second)
	loadCtx, stopLoad := context.WithTimeout(context.Background(), duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		rng := mathrand.New(mathrand.NewSource(master.Int63()))
		wg.Add(1)
		go func() { defer wg.Done(); l.worker(loadCtx, w, rng) }()
	}
	rotRNG, obsRNG, faultRNG := mathrand.New(mathrand.NewSource(master.Int63())), mathrand.New(mathrand.NewSource(master.Int63())), mathrand.New(mathrand.NewSource(master.Int63()))
	wg.Add(1)
	go func() { defer wg.Done(); l.rotator(loadCtx, rotRNG) }()
	// The CA observer outlives the load: it sees the last rotation's end.
	var observer sync.WaitGroup
	obsCtx, stopObserving := context.WithCancel(context.Background())
	defer stopObserving()
	observer.Add(1)
	go func() { defer observer.Done(); l.observeCAs(obsCtx, obsRNG) }()

	pace(loadCtx, baseline)
	faultsFrom := time.Now()
	faultErr := in.run(loadCtx, faultRNG)
	stopLoad()
	loadEnded := time.Now()
	if faultErr != nil {
		t.Errorf("seed %d: %v", seed, faultErr)
	}
	// The rotator and workers finish the call they are in.
	waitOrFail(t, &wg, 9*opTimeout)

	if err := in.whole(); err != nil {
		t.Fatalf("seed %d: the cluster is not whole after the run: %v", seed, err)
	}
	final := settleAndSnapshot(t, rs, l)
	stopObserving()
	observer.Wait()
	var why string
	final.RecordsEverWritten, final.RecordsComplete, why = records.finish(rs.etcd)
	if !final.RecordsComplete {
		t.Logf("the watch on the issuance records missed some (%s): records a rotation pruned are not asked for", why)
	}
	report := history.Check(h.Ops(), l.observations(), final)
	faults := in.injected()
	fig := figures(seed, duration, began, faultsFrom, loadEnded, h.Ops(), faults, report)
	t.Logf("\n%s", fig)
	fmt.Println(fig)
	if path := os.Getenv(envReport); path != "" {
		if err := os.WriteFile(path, []byte(fig), 0o644); err != nil {
			t.Errorf("writing %s: %v", path, err)
		}
	}
	if path := os.Getenv(envHistory); path != "" {
		data, err := json.Marshal(struct {
			Ops    []history.Op
			Faults []injected
		}{h.Ops(), faults})
		if err == nil {
			err = os.WriteFile(path, data, 0o644)
		}
		if err != nil {
			t.Errorf("writing %s: %v", path, err)
		}
	}
	for _, v := range report.Violations {
		t.Errorf("seed %d: violation %s: %s", seed, v.Invariant, v.Detail)
	}
	// A run in which the load did nothing, or no fault was injected,
	// proves nothing.
	acked := 0
	for _, op := range h.Ops() {
		if op.Outcome == history.OK && op.Kind == history.KindApprove {
			acked++
		}
	}
	if acked < 50 {
		t.Errorf("seed %d: only %d approvals acknowledged: the load did not run", seed, acked)
	}
	byKind := map[faultKind]int{}
	for _, f := range faults {
		byKind[f.Kind]++
	}
	if duration >= 3*time.Minute && os.Getenv(envKinds) == "" {
		for _, k := range kinds {
			if byKind[k] == 0 {
				t.Errorf("seed %d: fault %s was never injected", seed, k)
			}
		}
	}
}

// setUp creates the CA the load rotates and its Signer, and waits until
// every replica signs for it and for the kubelet client signer.
func setUp(t *testing.T, rs *replicaSet) {
	t.Helper()
	ctx := context.Background()
	admin := rs.admin[0]
	framework.Eventually(t, 60*time.Second, "CertificateAuthority "+faultCA+" created", func(ctx context.Context) error {
		_, err := admin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
			ObjectMeta: metav1.ObjectMeta{Name: faultCA},
			Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "fault CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
				Rotation: framework.ImmediateRotation()},
		}, metav1.CreateOptions{})
		return err
	})
	if _, err := admin.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "example.com:" + faultCA},
		Spec: certv1alpha1.SignerSpec{
			SignerName:              faultSigner,
			CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: faultCA},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature},
				MaxDuration:   metav1.Duration{Duration: 24 * time.Hour},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Signer of %s: %v", faultSigner, err)
	}
	// Every replica signs in the approval write for both signers before
	// the load starts: a probe request per replica and signer.
	for i, r := range rs.replicas {
		for _, probe := range []struct{ signer, cn string }{{faultSigner, "probe"}, {kubeletSigner, "system:node:fault-node"}} {
			n := 0
			framework.Eventually(t, 90*time.Second, fmt.Sprintf("replica %d signs for %s in the write", r.index, probe.signer), func(ctx context.Context) error {
				n++
				name := fmt.Sprintf("probe-%d-%s-%d", i, strings.NewReplacer("/", "-", ".", "-").Replace(probe.signer), n)
				if probe.signer == kubeletSigner {
					csr, err := newRequest(name, kubeletSigner, probe.cn, []string{"system:nodes"},
						certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth)
					if err != nil {
						return err
					}
					out, err := rs.node[i].CertificatesV1alpha1().CertificateSigningRequests().CreateSelfNodeClient(ctx, name, csr, metav1.CreateOptions{})
					if err != nil {
						return err
					}
					if len(out.Status.Certificate) == 0 {
						return fmt.Errorf("%s stored without a certificate", name)
					}
					return nil
				}
				csr, err := newRequest(name, faultSigner, probe.cn, nil, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth)
				if err != nil {
					return err
				}
				created, err := rs.admin[i].CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
				if err != nil {
					return err
				}
				created.Status.Conditions = append(created.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
					Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "FaultProbe", Message: "probe"})
				out, err := rs.admin[i].CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, name, created, metav1.UpdateOptions{})
				if err != nil {
					return err
				}
				if len(out.Status.Certificate) == 0 {
					return fmt.Errorf("%s approved without a certificate in the write", name)
				}
				return nil
			})
		}
	}
}

// waitOrFail waits (bounded) for the load's goroutines to finish the
// call each is in.
func waitOrFail(t *testing.T, wg *sync.WaitGroup, timeout time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("the load did not stop within %s of its end", timeout)
	}
}

// settleAndSnapshot waits (bounded) until the leader has signed every
// approved request that has no certificate yet (approvals whose write
// outcome was unknown, signed by the controllers), then reads the final
// state: every request, every issuance record and every CA.
func settleAndSnapshot(t *testing.T, rs *replicaSet, l *load) history.Final {
	t.Helper()
	csrs, err := listRequests(rs)
	if err != nil {
		t.Fatalf("listing requests: %v", err)
	}
	unsigned := map[string]int{}
	for i := range csrs {
		if f := finalCSR(&csrs[i]); f.Approved && !f.Denied && !f.Failed && len(f.Certificate) == 0 {
			unsigned[csrs[i].Name] = i
		}
	}
	err = framework.EventuallyErr(90*time.Second, func(ctx context.Context) error {
		for name, i := range unsigned {
			c, err := rs.admin[0].CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			csrs[i] = *c
			if f := finalCSR(c); f.Approved && !f.Denied && !f.Failed && len(f.Certificate) == 0 {
				return fmt.Errorf("%s is approved and not signed yet (%d waiting)", name, len(unsigned))
			}
			delete(unsigned, name)
		}
		return nil
	})
	if err != nil {
		// The checker says which acknowledged approvals lack one.
		t.Logf("not every approved request was signed before the snapshot: %v", err)
	}
	final := history.Final{CAKeys: map[string][]*x509.Certificate{}}
	for i := range csrs {
		final.CSRs = append(final.CSRs, finalCSR(&csrs[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rs.etcd.Get(ctx, recordsPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading the issuance records: %v", err)
	}
	for _, kv := range resp.Kvs {
		var rec issuance.Record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			t.Fatalf("issuance record %s: %v", kv.Key, err)
		}
		final.Records = append(final.Records, rec)
	}
	cas, err := rs.admin[0].RotationV1alpha1().CertificateAuthorities().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing CertificateAuthorities: %v", err)
	}
	now := time.Now()
	for i := range cas.Items {
		final.CAs = append(final.CAs, caObservation(now, &cas.Items[i]))
	}
	seen := map[string]bool{}
	for _, o := range append(l.observations(), final.CAs...) {
		for _, c := range []*x509.Certificate{o.Current, o.Next, o.Previous} {
			if c != nil && !seen[string(c.Raw)] {
				seen[string(c.Raw)] = true
				final.CAKeys[o.Name] = append(final.CAKeys[o.Name], c)
			}
		}
	}
	return final
}

// listRequests lists every request, 500 at a time.
func listRequests(rs *replicaSet) ([]certv1alpha1.CertificateSigningRequest, error) {
	var all []certv1alpha1.CertificateSigningRequest
	opts := metav1.ListOptions{Limit: 500}
	for {
		var page *certv1alpha1.CertificateSigningRequestList
		err := framework.EventuallyErr(60*time.Second, func(ctx context.Context) error {
			var err error
			page, err = rs.admin[0].CertificatesV1alpha1().CertificateSigningRequests().List(ctx, opts)
			return err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.Continue == "" {
			return all, nil
		}
		opts.Continue = page.Continue
	}
}

func finalCSR(c *certv1alpha1.CertificateSigningRequest) history.FinalCSR {
	var op history.Op
	fill(&op, c)
	return history.FinalCSR{Name: c.Name, UID: string(c.UID), SignerName: c.Spec.SignerName,
		Approved: op.Approved, Denied: op.Denied, Failed: op.Failed, Certificate: op.Certificate}
}

// figures is the run's result as docs/reliability.md shows it.
func figures(seed int64, duration time.Duration, began, faultsFrom, ended time.Time, ops []history.Op, faults []injected, report history.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Fault run: seed %d, %s (load %s, faults from %s)\n\n", seed, duration, ended.Sub(began).Round(time.Second), faultsFrom.Sub(began).Round(time.Second))
	byKind := map[faultKind]int{}
	for _, f := range faults {
		byKind[f.Kind]++
	}
	effects := map[faultKind]map[string]int{}
	for _, f := range faults {
		if f.Effect != "" {
			if effects[f.Kind] == nil {
				effects[f.Kind] = map[string]int{}
			}
			effects[f.Kind][f.Effect]++
		}
	}
	fmt.Fprintf(&b, "| fault | injected | effect |\n|---|---|---|\n")
	for _, k := range allFaults {
		var e []string
		for effect, n := range effects[k] {
			e = append(e, fmt.Sprintf("%d× %s", n, effect))
		}
		sort.Strings(e)
		fmt.Fprintf(&b, "| %s | %d | %s |\n", k, byKind[k], strings.Join(e, ", "))
	}
	fmt.Fprintf(&b, "\n%s\n", report.String())
	// Throughput: acknowledged writes per second, without faults (the
	// baseline, and the gaps between faults) and while a fault was in
	// progress (from its injection until the cluster was whole again).
	inFault := func(at time.Time) bool {
		for _, f := range faults {
			if !at.Before(f.Start) && !at.After(f.End) {
				return true
			}
		}
		return false
	}
	var faultTime time.Duration
	for _, f := range faults {
		faultTime += f.End.Sub(f.Start)
	}
	var baseOps, gapOps, faultOps int
	for _, op := range ops {
		if op.Outcome != history.OK || op.Kind == history.KindGet {
			continue
		}
		switch {
		case op.End.Before(faultsFrom):
			baseOps++
		case inFault(op.End):
			faultOps++
		default:
			gapOps++
		}
	}
	baseTime := faultsFrom.Sub(began)
	gapTime := ended.Sub(faultsFrom) - faultTime
	rate := func(n int, d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return float64(n) / d.Seconds()
	}
	fmt.Fprintf(&b, "\n| window | time | acknowledged writes | per second |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| no fault (first %s) | %s | %d | %.1f |\n", baseTime.Round(time.Second), baseTime.Round(time.Second), baseOps, rate(baseOps, baseTime))
	fmt.Fprintf(&b, "| no fault (between faults) | %s | %d | %.1f |\n", gapTime.Round(time.Second), gapOps, rate(gapOps, gapTime))
	fmt.Fprintf(&b, "| a fault in progress | %s | %d | %.1f |\n", faultTime.Round(time.Second), faultOps, rate(faultOps, faultTime))
	// Per fault kind: what the load saw while one was in progress.
	fmt.Fprintf(&b, "\n| fault | time in it | acknowledged writes per second | writes unknown (timeout, 5xx) | writes failed |\n|---|---|---|---|---|\n")
	for _, k := range allFaults {
		var in time.Duration
		for _, f := range faults {
			if f.Kind == k {
				in += f.End.Sub(f.Start)
			}
		}
		var okN, unknownN, failedN int
		for _, op := range ops {
			if op.Kind == history.KindGet {
				continue
			}
			for _, f := range faults {
				if f.Kind == k && !op.End.Before(f.Start) && !op.End.After(f.End) {
					switch op.Outcome {
					case history.OK:
						okN++
					case history.Unknown:
						unknownN++
					default:
						failedN++
					}
					break
				}
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %d | %d |\n", k, in.Round(time.Second), rate(okN, in), unknownN, failedN)
	}
	// The same per 30 s, over the run: whether the rate moves with the
	// faults or with the run's age.
	fmt.Fprintf(&b, "\nAcknowledged writes per second, per 30 s of the run (* a fault was in progress):\n\n")
	const bucket = 30 * time.Second
	// Whole buckets only: a last partial one would read low.
	counts := make([]int, int(ended.Sub(began)/bucket))
	for _, op := range ops {
		if op.Outcome == history.OK && op.Kind != history.KindGet && op.End.After(began) {
			if i := int(op.End.Sub(began) / bucket); i < len(counts) {
				counts[i]++
			}
		}
	}
	var line []string
	for i, n := range counts {
		from := began.Add(time.Duration(i) * bucket)
		mark := ""
		for _, f := range faults {
			if f.Start.Before(from.Add(bucket)) && f.End.After(from) {
				mark = "*"
			}
		}
		line = append(line, fmt.Sprintf("%.0f%s", float64(n)/bucket.Seconds(), mark))
	}
	fmt.Fprintf(&b, "%s\n", strings.Join(line, " "))
	fmt.Fprintf(&b, "\nFaults in order:\n\n")
	sort.Slice(faults, func(i, j int) bool { return faults[i].Start.Before(faults[j].Start) })
	for _, f := range faults {
		fmt.Fprintf(&b, "- +%s %s: %s (%s to whole)\n", f.Start.Sub(began).Round(time.Second), f.Kind, f.Detail, f.End.Sub(f.Start).Round(100*time.Millisecond))
	}
	return b.String()
}
