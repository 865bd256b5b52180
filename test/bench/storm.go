package main

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rekey.io/rekey/pkg/agent"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/strictpem"
	"rekey.io/rekey/test/framework"
)

// kubeletSigner and kubeletCA are the built-in signer the storm's nodes
// renew with and the CA it rotates.
const (
	kubeletSigner = "rekey.io/kube-apiserver-client-kubelet"
	kubeletCA     = "rekey.io-kube-apiserver-client-kubelet"
)

// stormResult is the renewal storm after Prepared (issue #29): every node
// holds a certificate of the CA's old key, the CA rotates, and each node
// renews at the point rekey-agent draws from its certificate.
type stormResult struct {
	Nodes  int
	Window time.Duration
	// Prepare is the preparatory burst that gave every node its old
	// certificate (not measured for the target).
	Prepare time.Duration
	// StartToPrepared is from the Start to the CA reaching Prepared
	// (trustPropagation 0s, no consumer: only rekey's own publication).
	StartToPrepared time.Duration
	// Issued counts renewals whose certificate verifies against the new
	// CA; Errors counts failed creates; Wrong counts certificates that do
	// not verify against the new CA.
	Issued, Errors, Wrong int
	// ClientPerSecond and ServerPerSecond are the arrivals per second
	// since Prepared: as the nodes sent them (client clock) and by each
	// request's creationTimestamp (server, 1 s resolution).
	ClientPerSecond, ServerPerSecond []int
	// Seen is from status.lastInitiationFinishedTime (which has seconds
	// only) to the bench seeing Prepared; DueAtOnce counts the nodes whose
	// point had passed by then (they renew at once, together).
	Seen      time.Duration
	DueAtOnce int
	// Late is the largest delay between a node's renewal point and its
	// send: how far the bench itself kept up.
	Late time.Duration
	// LastIssued is from Prepared to the last renewed certificate.
	LastIssued time.Duration
	// Pending samples status.pendingRenewal after Prepared.
	Pending []pendingSample
	// PendingZero is from Prepared to status.pendingRenewal 0 (0: not
	// seen).
	PendingZero time.Duration
	// AgentAgrees says agent.IssuerRotating, read for one node against the
	// live CA, gave the point the bench computed with agent.RenewalPoint.
	AgentAgrees bool
	// Writes counts the CA's writes from the Start to pendingRenewal 0
	// (a watch's events): each wakes every rekey-agent whose client
	// certificate the CA signed (the agent watches it), and the woken
	// agent reads its Signer and CA.
	Writes int
	// Completed says Complete was accepted without force at the end.
	Completed    bool
	CompleteErr  string
	CPUByProcess map[string]float64
}

type pendingSample struct {
	At      time.Duration
	Phase   rotationv1alpha1.RotationPhase
	Pending int32
}

// stormNode is one simulated node.
type stormNode struct {
	name    string
	leaf    *x509.Certificate
	renewal []byte
	point   time.Time
	sent    time.Time
	created time.Time // server's creationTimestamp of the renewal
	cert    []byte
	err     error
}

// renewalStorm runs the storm against the aggregated cluster: admin is
// the admin's rekey client (nodes are impersonated from it), pids the
// server processes whose CPU is reported.
func renewalStorm(ctx context.Context, admin clientset.Interface, pids map[string]int, n int, window time.Duration) (*stormResult, error) {
	cas := admin.RotationV1alpha1().CertificateAuthorities()
	res := &stormResult{Nodes: n, Window: window}
	patch := fmt.Sprintf(`{"spec":{"rotation":{"trustPropagation":"0s","renewalWindow":%q}}}`, window.String())
	if _, err := cas.Patch(ctx, kubeletCA, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("setting spec.rotation of %s: %w", kubeletCA, err)
	}
	ca, err := cas.Get(ctx, kubeletCA, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if ca.Status.Current == nil || ca.Status.Phase == rotationv1alpha1.PhasePreparing || ca.Status.Phase == rotationv1alpha1.PhasePrepared {
		return nil, fmt.Errorf("CertificateAuthority %s is not ready to rotate (phase %q)", kubeletCA, ca.Status.Phase)
	}
	oldCA, err := parseCA(ca.Status.Current.Certificate)
	if err != nil {
		return nil, err
	}

	// Every node gets its certificate of the old key, as itself (what it
	// would hold after its bootstrap and earlier renewals), and makes the
	// key and request of its renewal now, off the measured path.
	nodes := make([]*stormNode, n)
	for i := range nodes {
		nodes[i] = &stormNode{name: fmt.Sprintf("storm-node-%05d", i)}
	}
	fmt.Fprintf(os.Stderr, "renewal storm: %d nodes get certificates of the old key\n", n)
	start := time.Now()
	var prepErrs atomic.Int64
	parallel(n, 64, func(i int) {
		nd := nodes[i]
		subject := pkix.Name{CommonName: "system:node:" + nd.name, Organization: []string{"system:nodes"}}
		out, err := createAsNode(ctx, admin, nd.name, "storm-"+nd.name+"-old", mustCSR(subject))
		if err == nil {
			nd.leaf, err = parseLeaf(out.Status.Certificate)
		}
		if err == nil && nd.leaf.CheckSignatureFrom(oldCA) != nil {
			err = fmt.Errorf("not signed by the current CA")
		}
		if err != nil {
			prepErrs.Add(1)
			fmt.Fprintf(os.Stderr, "  %s: old certificate: %v\n", nd.name, err)
		}
		nd.renewal = mustCSR(subject)
	})
	res.Prepare = time.Since(start)
	if prepErrs.Load() > 0 {
		return nil, fmt.Errorf("%d of %d nodes got no certificate of the old key", prepErrs.Load(), n)
	}
	fmt.Fprintf(os.Stderr, "  done in %s\n", res.Prepare.Round(time.Millisecond))

	cpu0 := map[string]float64{}
	for name, pid := range pids {
		cpu0[name] = cpuSeconds(pid)
	}
	events, stopWatch, err := watchCA(ctx, admin, kubeletCA, ca.ResourceVersion)
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	startAt := time.Now()
	if _, err := cas.Rotate(ctx, kubeletCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("starting the rotation of %s: %w", kubeletCA, err)
	}
	err = framework.EventuallyErr(2*time.Minute, func(ctx context.Context) error {
		if ca, err = cas.Get(ctx, kubeletCA, metav1.GetOptions{}); err != nil {
			return err
		}
		if ca.Status.Phase != rotationv1alpha1.PhasePrepared || ca.Status.LastInitiationFinishedTime == nil {
			return fmt.Errorf("phase %q", ca.Status.Phase)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("CertificateAuthority %s did not reach Prepared: %w", kubeletCA, err)
	}
	prepared := ca.Status.LastInitiationFinishedTime.Time
	seenAt := time.Now()
	res.Seen = seenAt.Sub(prepared)
	res.StartToPrepared = prepared.Sub(startAt.Truncate(time.Second))
	newCA, err := parseCA(ca.Status.Current.Certificate)
	if err != nil {
		return nil, err
	}
	var caWindow time.Duration
	if ca.Spec.Rotation != nil && ca.Spec.Rotation.RenewalWindow != nil {
		caWindow = ca.Spec.Rotation.RenewalWindow.Duration
	}
	// The points are rekey-agent's own: RenewalPoint on the CA as the
	// agent reads it; one node checks the agent's whole decision.
	for _, nd := range nodes {
		nd.point = agent.RenewalPoint(nd.leaf, prepared, caWindow)
		if nd.point.Before(seenAt) {
			res.DueAtOnce++
		}
	}
	if r, known, err := agent.IssuerRotating(ctx, admin, kubeletSigner, nodes[0].leaf); err == nil && known && r != nil {
		res.AgentAgrees = r.At.Equal(nodes[0].point)
	}
	fmt.Fprintf(os.Stderr, "renewal storm: Prepared at %s; %d nodes renew over %s\n", prepared.UTC().Format(time.RFC3339), n, caWindow)

	// status.pendingRenewal across the window.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var samples []pendingSample
	var samplesMu sync.Mutex
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		every := max(caWindow/12, 2*time.Second)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if ca, err := cas.Get(sampleCtx, kubeletCA, metav1.GetOptions{}); err == nil {
				samplesMu.Lock()
				samples = append(samples, pendingSample{At: time.Since(prepared), Phase: ca.Status.Phase, Pending: ca.Status.PendingRenewal})
				samplesMu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	}()

	// Each node sleeps until its point, then renews as itself.
	var wg sync.WaitGroup
	for _, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(nd.point))
			nd.sent = time.Now()
			out, err := createAsNode(ctx, admin, nd.name, "storm-"+nd.name+"-new", nd.renewal)
			if err != nil {
				nd.err = err
				return
			}
			nd.created = out.CreationTimestamp.Time
			nd.cert = out.Status.Certificate
		}()
	}
	wg.Wait()
	for _, nd := range nodes {
		if nd.err != nil {
			res.Errors++
			fmt.Fprintf(os.Stderr, "  %s: renewal: %v\n", nd.name, nd.err)
			continue
		}
		leaf, err := parseLeaf(nd.cert)
		if err != nil || leaf.CheckSignatureFrom(newCA) != nil {
			res.Wrong++
			continue
		}
		res.Issued++
	}
	res.LastIssued = time.Since(prepared)
	res.ClientPerSecond, res.ServerPerSecond, res.Late = arrivals(nodes, prepared, caWindow)

	// The CA's count of pending renewals falls to 0 once it has read the
	// last renewal (it recounts every few seconds).
	err = framework.EventuallyErr(time.Minute, func(ctx context.Context) error {
		ca, err := cas.Get(ctx, kubeletCA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca.Status.PendingRenewal != 0 {
			return fmt.Errorf("pendingRenewal %d", ca.Status.PendingRenewal)
		}
		res.PendingZero = time.Since(prepared)
		return nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "  status.pendingRenewal did not fall to 0: %v\n", err)
	}
	stopSampling()
	<-sampled
	stopWatch()
	for range events {
		res.Writes++
	}
	samplesMu.Lock()
	res.Pending = append(samples, pendingSample{At: time.Since(prepared), Phase: rotationv1alpha1.PhasePrepared, Pending: lastPending(ctx, admin)})
	samplesMu.Unlock()
	res.CPUByProcess = map[string]float64{}
	for name, pid := range pids {
		res.CPUByProcess[name] = cpuSeconds(pid) - cpu0[name]
	}

	// Every node renewed, so Complete needs no force; it also leaves the
	// CA's one key signing for whatever runs next.
	if _, err := cas.Rotate(ctx, kubeletCA, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete}, metav1.CreateOptions{}); err != nil {
		res.CompleteErr = err.Error()
	} else {
		res.Completed = true
	}
	fmt.Fprintf(os.Stderr, "  %d renewed, %d errors, %d not from the new CA; last after %s; pendingRenewal 0 after %s\n",
		res.Issued, res.Errors, res.Wrong, res.LastIssued.Round(time.Millisecond), res.PendingZero.Round(time.Second))
	return res, nil
}

// arrivals buckets the nodes' renewals by second since prepared, by the
// client's send time and by the server's creationTimestamp (which has
// seconds only, so its bucket is the one its second falls in).
func arrivals(nodes []*stormNode, prepared time.Time, window time.Duration) (client, server []int, late time.Duration) {
	buckets := int(window/time.Second) + 1
	client, server = make([]int, buckets), make([]int, buckets)
	add := func(b []int, d time.Duration) []int {
		i := max(0, int(d/time.Second))
		for len(b) <= i {
			b = append(b, 0)
		}
		b[i]++
		return b
	}
	base := prepared.Truncate(time.Second)
	for _, nd := range nodes {
		if nd.sent.IsZero() {
			continue
		}
		client = add(client, nd.sent.Sub(prepared))
		if !nd.created.IsZero() {
			server = add(server, nd.created.Sub(base))
		}
		late = max(late, nd.sent.Sub(nd.point))
	}
	return client, server, late
}

// peak is the largest bucket and its second.
func peak(b []int) (int, int) {
	at, most := 0, 0
	for i, v := range b {
		if v > most {
			at, most = i, v
		}
	}
	return most, at
}

func lastPending(ctx context.Context, admin clientset.Interface) int32 {
	ca, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, kubeletCA, metav1.GetOptions{})
	if err != nil {
		return -1
	}
	return ca.Status.PendingRenewal
}

// createAsNode creates a kubelet client request as system:node:<node>
// through selfnodeclient (rekey-agent's renewal path); the response holds
// the certificate.
func createAsNode(ctx context.Context, admin clientset.Interface, node, name string, request []byte) (*certv1alpha1.CertificateSigningRequest, error) {
	csr := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:    request,
			SignerName: kubeletSigner,
			Usages:     []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
		},
	}
	out := &certv1alpha1.CertificateSigningRequest{}
	if err := impersonateNode(admin.CertificatesV1alpha1().RESTClient().Post(), node).Name(name).SubResource("selfnodeclient").Body(csr).Do(ctx).Into(out); err != nil {
		return nil, err
	}
	if len(out.Status.Certificate) == 0 {
		return nil, fmt.Errorf("the response to %s holds no certificate", name)
	}
	return out, nil
}

func parseLeaf(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseCA(data string) (*x509.Certificate, error) {
	certs, err := strictpem.Certificates([]byte(data), 1)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return certs[0], nil
}

// parallel runs f(0..n-1) on w workers.
func parallel(n, w int, f func(i int)) {
	work := make(chan int, n)
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// renderStorm is the storm's section of the report.
func renderStorm(r *stormResult) string {
	var b stringsBuilder
	mean := float64(r.Nodes) / r.Window.Seconds()
	cPeak, cAt := peak(r.ClientPerSecond)
	sPeak, sAt := peak(r.ServerPerSecond)
	b.f("\nRenewal storm after Prepared (issue #29): %d simulated nodes, each holding a `%s` client certificate of the old key (issued as itself through selfnodeclient in a preparatory burst of %s), renew as themselves through selfnodeclient at the point rekey-agent draws from the certificate (`agent.RenewalPoint`); CA `%s` rotated with spec.rotation {trustPropagation: 0s, renewalWindow: %s}. No peer: kube-controller-manager has no such feature; absolute figures and peak/mean.\n\n",
		r.Nodes, kubeletSigner, r.Prepare.Round(time.Millisecond), kubeletCA, r.Window)
	b.f("| window | nodes | renewed (verify against the new CA) | errors | not from the new CA | lost | mean arrivals/s | peak second (client) | peak/mean (client) | peak second (server creationTimestamp) | peak/mean (server) | last certificate after Prepared | pendingRenewal 0 after Prepared | Start to Prepared |\n")
	b.f("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	pz := "not seen"
	if r.PendingZero > 0 {
		pz = r.PendingZero.Round(time.Second).String()
	}
	b.f("| %s | %d | %d | %d | %d | %d | %.1f | %d (s %d) | %.2fx | %d (s %d) | %.2fx | %s | %s | %s |\n", r.Window, r.Nodes, r.Issued, r.Errors, r.Wrong, r.Nodes-r.Issued-r.Errors-r.Wrong,
		mean, cPeak, cAt, float64(cPeak)/mean, sPeak, sAt, float64(sPeak)/mean, r.LastIssued.Round(time.Millisecond), pz, r.StartToPrepared.Round(time.Second))
	b.f("\nArrivals per 10 s since Prepared (client send time): %s. The bench saw Prepared %s after status.lastInitiationFinishedTime (the promotion's time rounded up to the second, so negative when seen within that second), when the points of %d nodes had passed: they renewed at once. Latest send after its point: %s.\n",
		tens(r.ClientPerSecond), r.Seen.Round(time.Millisecond), r.DueAtOnce, r.Late.Round(time.Millisecond))
	b.f("\nArrivals per second (client): %s.\n", perSecond(r.ClientPerSecond))
	b.f("\nstatus.pendingRenewal after Prepared: %s.\n", pendingCurve(r.Pending))
	b.f("\nServer CPU seconds from the Start to pendingRenewal 0: %s.\n", cpuList(r.CPUByProcess))
	b.f("\nWrites of the CA from the Start to pendingRenewal 0 (watch events): %d, each sent to every agent watching the CA (%d here: %d events); an agent looks again (reads its Signer and the CA) only on the few that change what decides its renewal (phase, current CA, bundle, Prepared time, window), not on the pending recounts.\n",
		r.Writes, r.Nodes, r.Writes*r.Nodes)
	b.f("\nagent.IssuerRotating (rekey-agent's whole decision, read against the live CA for one node) gives the point the bench used: %v. Complete without force afterwards: %s.\n",
		r.AgentAgrees, okOr(r.Completed, r.CompleteErr))
	b.f("\nTargets:\n\n")
	check(&b.Builder, fmt.Sprintf("renewal storm: every certificate issued and verifiable against the new CA (%d/%d), none lost", r.Issued, r.Nodes), r.Issued == r.Nodes)
	check(&b.Builder, fmt.Sprintf("renewal storm: peak second <= 3x the mean (client %.2fx, server %.2fx; %d vs %.1f/s)", float64(cPeak)/mean, float64(sPeak)/mean, max(cPeak, sPeak), mean), float64(max(cPeak, sPeak)) <= 3*mean)
	check(&b.Builder, "renewal storm: status.pendingRenewal falls to 0", r.PendingZero > 0)
	return b.String()
}

func tens(b []int) string {
	var out []string
	for i := 0; i < len(b); i += 10 {
		sum := 0
		for _, v := range b[i:min(i+10, len(b))] {
			sum += v
		}
		out = append(out, fmt.Sprintf("%d", sum))
	}
	return strings.Join(out, ", ")
}

func perSecond(b []int) string {
	out := make([]string, len(b))
	for i, v := range b {
		out[i] = fmt.Sprintf("%d", v)
	}
	return strings.Join(out, " ")
}

func pendingCurve(s []pendingSample) string {
	var out []string
	for _, p := range s {
		out = append(out, fmt.Sprintf("%s: %d", p.At.Round(time.Second), p.Pending))
	}
	return strings.Join(out, ", ")
}

func cpuList(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []string
	for _, name := range names {
		out = append(out, fmt.Sprintf("%s %.1f", name, m[name]))
	}
	return strings.Join(out, ", ")
}

func okOr(ok bool, err string) string {
	if ok {
		return "accepted"
	}
	return "refused: " + err
}

// stringsBuilder is a strings.Builder with Fprintf as a method.
type stringsBuilder struct{ strings.Builder }

func (b *stringsBuilder) f(format string, a ...any) { fmt.Fprintf(&b.Builder, format, a...) }
