package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/framework"
)

// The PodCertificateRequest benchmark's objects. The signer name is under
// rekey.io/, which the shipped RBAC (rekey-apiserver:host-cluster) lets
// rekey sign for in the host cluster.
const (
	pcrSigner    = "rekey.io/bench-pods"
	pcrCA        = "bench-pods"
	pcrNamespace = "bench-pcr"
	pcrSA        = "bench-pcr"
	pcrNode      = "bench-pcr-node"
	pcrLifetime  = 86400 // the kubelet's default maxExpirationSeconds
)

// pcrResult is the PodCertificateRequest benchmark (issue #30): the pods of
// one simulated node get their certificates from rekey through
// PodCertificateRequests, beside the same node's certificates.k8s.io CSRs
// through kube-controller-manager.
type pcrResult struct {
	Pods, Workers, Bursts int
	// Results are the PodCertificateRequests', then (if measured) the
	// native CSRs'.
	Results []result
	// Refused counts, by condition and reason, the PodCertificateRequests
	// that ended Denied or Failed instead of Issued.
	Refused map[string]int
	// Retries counts creates kube-apiserver refused for a reason a retry
	// may cure (its NodeRestriction informers not yet holding a pod).
	Retries int
}

// pcrAPI is one way the node asks for its pods' certificates.
type pcrAPI struct {
	name string
	// create posts the request named name for pod i, with its stub.
	create func(ctx context.Context, name string, i int, stub []byte) error
	// watch reports requests that ended: issued, or refused with a reason.
	watch func(ctx context.Context, done func(name string, refused string)) error
	// stub makes request i's PKCS#10 (DER).
	stub func(i int) []byte
}

// pcrPod is a pod of the simulated node.
type pcrPod struct {
	name string
	uid  types.UID
}

// podCertificates runs the PodCertificateRequest benchmark: a Node object
// (no kubelet), n pods bound to it with a podCertificate projected volume
// for pcrSigner and one ServiceAccount, a CA and a Signer serving the PCRs
// of pcrSigner; then bursts in which the node creates one PCR per pod, as
// its kubelet does, and (if native is set) as many CSRs for its own client
// certificate, which kube-controller-manager approves and signs.
func podCertificates(ctx context.Context, cluster *framework.Cluster, adminCfg *rest.Config, pids map[string]int, native bool, n, bursts, workers int) (*pcrResult, error) {
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	node, pods, saUID, err := pcrObjects(ctx, admin, n, workers)
	if err != nil {
		return nil, err
	}
	if err := pcrSignerObjects(ctx, clientset.NewForConfigOrDie(adminCfg)); err != nil {
		return nil, err
	}

	// The node authenticates as itself with a client certificate, so
	// kube-apiserver's Node authorizer and NodeRestriction check every
	// create as they check a kubelet's.
	kubeconfig, err := cluster.UserKubeconfig("system:node:"+pcrNode, "system:nodes")
	if err != nil {
		return nil, err
	}
	nodeCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	nodeCfg.QPS, nodeCfg.Burst = adminCfg.QPS, adminCfg.Burst
	nodeClient := kubernetes.NewForConfigOrDie(nodeCfg)

	res := &pcrResult{Pods: n, Workers: workers, Bursts: bursts, Refused: map[string]int{}}
	var retries atomic.Int64
	pcrs := nodeClient.CertificatesV1().PodCertificateRequests(pcrNamespace)
	apis := []pcrAPI{{
		name: "PodCertificateRequests (rekey, aggregated)",
		create: func(ctx context.Context, name string, i int, stub []byte) error {
			pcr := &certificatesv1.PodCertificateRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pcrNamespace,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pods[i].name, UID: pods[i].uid}}},
				Spec: certificatesv1.PodCertificateRequestSpec{
					SignerName: pcrSigner, PodName: pods[i].name, PodUID: pods[i].uid,
					ServiceAccountName: pcrSA, ServiceAccountUID: saUID,
					NodeName: types.NodeName(pcrNode), NodeUID: node,
					MaxExpirationSeconds: ptr.To[int32](pcrLifetime), StubPKCS10Request: stub,
				},
			}
			// NodeRestriction reads the pod, node and service account
			// from kube-apiserver's informers and refuses with a plain
			// error (not Forbidden) while they lag: the kubelet retries.
			for attempt := 0; ; attempt++ {
				_, err := pcrs.Create(ctx, pcr, metav1.CreateOptions{})
				if err == nil || apierrors.IsForbidden(err) || apierrors.IsAlreadyExists(err) || attempt == 4 {
					return err
				}
				retries.Add(1)
				time.Sleep(200 * time.Millisecond)
			}
		},
		watch: func(ctx context.Context, done func(string, string)) error {
			return watchPCRs(ctx, admin, done)
		},
		stub: func(int) []byte { return stubRequest(pkix.Name{}) },
	}}
	if native {
		if err := allowNodeClientBootstrap(ctx, admin); err != nil {
			return nil, err
		}
		peer := &nativeTarget{client: admin}
		apis = append(apis, pcrAPI{
			name: "native CSRs (kube-controller-manager: selfnodeclient approval, csrsigning)",
			create: func(ctx context.Context, name string, _ int, stub []byte) error {
				_, err := nodeClient.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: certificatesv1.CertificateSigningRequestSpec{
						Request: pemCSR(stub), SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName, ExpirationSeconds: ptr.To[int32](pcrLifetime),
						Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
					},
				}, metav1.CreateOptions{})
				return err
			},
			watch: func(ctx context.Context, done func(string, string)) error {
				return peer.Watch(ctx, func(name string, failed bool) {
					refused := ""
					if failed {
						refused = "Denied or Failed"
					}
					done(name, refused)
				})
			},
			// kube-controller-manager approves a node's own client
			// certificate (selfnodeclient): its subject names the node.
			stub: func(int) []byte {
				return stubRequest(pkix.Name{CommonName: "system:node:" + pcrNode, Organization: []string{"system:nodes"}})
			},
		})
	}

	// One request through each API before measuring: rekey starts its
	// PCR informer for a Signer when it sees the Signer, and that start
	// (and the first connections) is not what the bursts measure.
	for _, api := range apis {
		fmt.Fprintf(os.Stderr, "pod certificates: warming up %s\n", api.name)
		if _, err := pcrBurst(ctx, api, "warm", pods[:1], 1, 2*time.Minute, res.Refused); err != nil {
			return nil, err
		}
		if len(res.Refused) > 0 {
			return nil, fmt.Errorf("%s: the warm-up request was refused: %v", api.name, res.Refused)
		}
	}

	perAPI := make([][]pcrRound, len(apis))
	for r := 0; r < bursts; r++ {
		for j := range apis {
			i := j
			if r%2 == 1 {
				i = len(apis) - 1 - j
			}
			fmt.Fprintf(os.Stderr, "pod certificates burst %d/%d: %d pods, %s\n", r+1, bursts, n, apis[i].name)
			cpu0 := map[string]float64{}
			for name, pid := range pids {
				cpu0[name] = cpuSeconds(pid)
			}
			round, err := pcrBurst(ctx, apis[i], fmt.Sprintf("r%d", r), pods, workers, 2*time.Minute, res.Refused)
			if err != nil {
				return nil, err
			}
			round.cpu = map[string]float64{}
			for name, pid := range pids {
				round.cpu[name] = cpuSeconds(pid) - cpu0[name]
			}
			perAPI[i] = append(perAPI[i], round)
		}
	}
	for i, api := range apis {
		res.Results = append(res.Results, combinePCR(api.name, perAPI[i]))
	}
	res.Retries = int(retries.Load())
	return res, nil
}

// pcrObjects makes the simulated node: its Node object, the namespace, the
// ServiceAccount, and n pods bound to the node with a podCertificate
// projected volume for pcrSigner (NodeRestriction lets a node ask for a
// pod's certificate of a signer the pod mounts). No kubelet runs: the
// pods stay Pending, which nothing here minds.
func pcrObjects(ctx context.Context, admin kubernetes.Interface, n, workers int) (types.UID, []pcrPod, types.UID, error) {
	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: pcrNode}}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, "", fmt.Errorf("creating Node %s: %w", pcrNode, err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pcrNamespace}}, metav1.CreateOptions{}); err != nil {
		return "", nil, "", fmt.Errorf("creating namespace %s: %w", pcrNamespace, err)
	}
	sa, err := admin.CoreV1().ServiceAccounts(pcrNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: pcrSA}}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, "", fmt.Errorf("creating ServiceAccount %s/%s: %w", pcrNamespace, pcrSA, err)
	}
	fmt.Fprintf(os.Stderr, "pod certificates: creating %d pods on node %s\n", n, pcrNode)
	pods := make([]pcrPod, n)
	var errs atomic.Int64
	start := time.Now()
	parallel(n, workers, func(i int) {
		name := fmt.Sprintf("pod-%05d", i)
		pod, err := admin.CoreV1().Pods(pcrNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				NodeName: pcrNode, ServiceAccountName: pcrSA, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
					VolumeMounts: []corev1.VolumeMount{{Name: "cert", MountPath: "/var/run/cert", ReadOnly: true}}}},
				Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{
						SignerName: pcrSigner, KeyType: "ECDSAP256", CredentialBundlePath: "credentialbundle.pem",
						MaxExpirationSeconds: ptr.To[int32](pcrLifetime),
					}}},
				}}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			if errs.Add(1) == 1 {
				fmt.Fprintf(os.Stderr, "  creating pod %s: %v\n", name, err)
			}
			return
		}
		pods[i] = pcrPod{name: pod.Name, uid: pod.UID}
	})
	if errs.Load() > 0 {
		return "", nil, "", fmt.Errorf("%d of %d pods not created", errs.Load(), n)
	}
	fmt.Fprintf(os.Stderr, "  created in %s\n", time.Since(start).Round(time.Millisecond))
	return node.UID, pods, sa.UID, nil
}

// pcrSignerObjects makes the CA and the Signer that serves the
// PodCertificateRequests of pcrSigner: every service account of
// pcrNamespace, ECDSA P-256 keys, a SPIFFE ID, 24 hours.
func pcrSignerObjects(ctx context.Context, admin clientset.Interface) error {
	_, err := admin.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: pcrCA},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "bench pod certificates CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Validity: metav1.Duration{Duration: 72 * time.Hour}, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating CertificateAuthority %s: %w", pcrCA, err)
	}
	_, err = admin.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(pcrSigner, "/", ":")},
		Spec: certv1alpha1.SignerSpec{SignerName: pcrSigner, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: pcrCA},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages:   []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth, certv1alpha1.UsageServerAuth},
				MaxDuration:     metav1.Duration{Duration: 24 * time.Hour},
				SubjectAltNames: certv1alpha1.SubjectAltNamePolicy{Allowed: []certv1alpha1.SubjectAltNameType{certv1alpha1.SANTypeURI}},
			},
			HostCluster: &certv1alpha1.HostClusterServing{PodCertificateRequests: &certv1alpha1.PodCertificatePolicy{
				Allowed:           []certv1alpha1.PodCertificateSubjects{{Namespace: pcrNamespace}},
				SPIFFETrustDomain: "bench.example",
				KeyTypes:          []certv1alpha1.PodCertificateKeyType{certv1alpha1.PodCertificateKeyECDSAP256},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Signer for %s: %w", pcrSigner, err)
	}
	return nil
}

// watchPCRs reports the benchmark's PodCertificateRequests that ended, on
// one watch selected by signer name, as rekey's own informer selects them.
func watchPCRs(ctx context.Context, admin kubernetes.Interface, done func(name, refused string)) error {
	pcrs := admin.CertificatesV1().PodCertificateRequests(pcrNamespace)
	selector := fields.OneTermEqualSelector("spec.signerName", pcrSigner).String()
	report := func(pcr *certificatesv1.PodCertificateRequest) {
		for _, c := range pcr.Status.Conditions {
			if c.Status != metav1.ConditionTrue {
				continue
			}
			switch c.Type {
			case certificatesv1.PodCertificateRequestConditionTypeIssued:
				done(pcr.Name, "")
			case certificatesv1.PodCertificateRequestConditionTypeDenied, certificatesv1.PodCertificateRequestConditionTypeFailed:
				done(pcr.Name, c.Type+" "+c.Reason)
			}
		}
	}
	return watchForever(ctx, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.AllowWatchBookmarks = true
		opts.FieldSelector = selector
		return pcrs.Watch(ctx, opts)
	}, func(first bool) (string, error) {
		opts := listOptions(first)
		opts.FieldSelector = selector
		list, err := pcrs.List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			report(&list.Items[i])
		}
		return list.ResourceVersion, nil
	}, func(obj runtime.Object) {
		if pcr, ok := obj.(*certificatesv1.PodCertificateRequest); ok {
			report(pcr)
		}
	})
}

// pcrRound is one burst's outcome.
type pcrRound struct {
	requested, issued, errors int
	elapsed                   time.Duration
	latencies                 []time.Duration
	cpu                       map[string]float64
}

// pcrBurst has the node ask for one certificate per pod at once, workers
// creates at a time, as a kubelet starting those pods does (it creates a
// pod's request and moves on; the pod waits). Latency is from a create's
// send to the watch seeing the request end; elapsed is from the first
// send to the last certificate. Requests refused (Denied, Failed) are
// counted in refused by reason.
func pcrBurst(ctx context.Context, api pcrAPI, prefix string, pods []pcrPod, workers int, timeout time.Duration, refused map[string]int) (pcrRound, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch before the next burst
	n := len(pods)
	names := make([]string, n)
	index := make(map[string]int, n)
	for i := range pods {
		names[i] = fmt.Sprintf("pc-%s-%05d", prefix, i)
		index[names[i]] = i
	}
	// A fresh key per request, made before the clock starts: the
	// kubelet's key generation is the node's work, not the signer's.
	stubs := make([][]byte, n)
	for i := range stubs {
		stubs[i] = api.stub(i)
	}

	var mu sync.Mutex
	sent := make([]time.Time, n)
	ended := make([]time.Time, n)
	why := make([]string, n)
	finished := make([]bool, n)
	left := n
	allDone := make(chan struct{})
	end := func(i int, at time.Time, reason string) {
		mu.Lock()
		defer mu.Unlock()
		if finished[i] {
			return
		}
		finished[i], ended[i], why[i] = true, at, reason
		if left--; left == 0 {
			close(allDone)
		}
	}
	if err := api.watch(ctx, func(name, reason string) {
		if i, ok := index[name]; ok {
			end(i, time.Now(), reason)
		}
	}); err != nil {
		return pcrRound{}, fmt.Errorf("%s: watching: %w", api.name, err)
	}
	time.Sleep(300 * time.Millisecond) // the watch is open (as the other bursts wait)

	var errs atomic.Int64
	start := time.Now()
	parallel(n, workers, func(i int) {
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		if err := api.create(ctx, names[i], i, stubs[i]); err != nil {
			if errs.Add(1) <= 3 {
				fmt.Fprintf(os.Stderr, "  create %s: %v\n", names[i], err)
			}
			end(i, time.Time{}, "create failed")
		}
	})
	created := time.Since(start)
	select {
	case <-allDone:
	case <-time.After(timeout):
	}

	mu.Lock()
	defer mu.Unlock()
	r := pcrRound{requested: n, errors: int(errs.Load())}
	var last time.Time
	for i := range pods {
		switch {
		case !finished[i] || ended[i].IsZero():
			// lost (no outcome in time) or not created: errors.
			if !finished[i] {
				r.errors++
			}
		case why[i] != "":
			refused[why[i]]++
		default:
			r.issued++
			r.latencies = append(r.latencies, ended[i].Sub(sent[i]))
			if ended[i].After(last) {
				last = ended[i]
			}
		}
	}
	r.elapsed = time.Since(start)
	if r.issued == n {
		r.elapsed = last.Sub(start)
	}
	fmt.Fprintf(os.Stderr, "  all %d created in %s; %d issued in %s\n", n, created.Round(time.Millisecond), r.issued, r.elapsed.Round(time.Millisecond))
	return r, nil
}

// combinePCR sums an API's bursts: latencies pooled for the percentiles,
// throughput over the bursts' summed time, each burst's certificates/s in
// Rounds.
func combinePCR(name string, rounds []pcrRound) result {
	var lat []time.Duration
	out := result{Name: name, CPUByProcess: map[string]float64{}}
	for _, r := range rounds {
		out.Issued += r.issued
		out.Errors += r.errors
		out.Requested += r.requested
		out.Elapsed += r.elapsed
		out.Rounds = append(out.Rounds, float64(r.issued)/r.elapsed.Seconds())
		lat = append(lat, r.latencies...)
		for p, v := range r.cpu {
			out.CPUByProcess[p] += v
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	out.P50, out.P95, out.P99 = percentile(lat, 0.50), percentile(lat, 0.95), percentile(lat, 0.99)
	if out.Elapsed > 0 {
		out.Throughput = float64(out.Issued) / out.Elapsed.Seconds()
	}
	if out.Issued > 0 {
		total := 0.0
		for _, v := range out.CPUByProcess {
			total += v
		}
		out.CPUPer1000 = total / float64(out.Issued) * 1000
	}
	return out
}

// stubRequest is a PKCS#10 request (DER) of a fresh ECDSA P-256 key, as
// the kubelet makes for a podCertificate volume (which has no subject).
func stubRequest(subject pkix.Name) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err) // crypto/rand failing leaves nothing to measure
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
	if err != nil {
		panic(err)
	}
	return der
}

// pemCSR is a PKCS#10 request in PEM, as certificates.k8s.io CSRs carry it.
func pemCSR(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// renderPCR is the PodCertificateRequest section of the report.
func renderPCR(r *pcrResult) string {
	var b stringsBuilder
	b.f("\nPodCertificateRequests (issue #30): %d pods bound to one simulated node `%s` (a Node object, no kubelet; pods with `spec.nodeName` and a `podCertificate` projected volume for `%s`, in namespace `%s`, one ServiceAccount). "+
		"In each burst the node, as `system:node:%s` in `system:nodes` with a client certificate (so kube-apiserver's Node authorizer and NodeRestriction check every create, as a kubelet's), "+
		"creates one PodCertificateRequest per pod, each with a fresh ECDSA P-256 stub PKCS#10, %d creates at a time without waiting; rekey (aggregated, leader) checks the pod, ServiceAccount and node and writes `Issued`. "+
		"The peer, in the same run: the same node creates as many `certificates.k8s.io/v1` CSRs for its own client certificate (`kubernetes.io/kube-apiserver-client-kubelet`, fresh ECDSA P-256 keys), approved by kube-controller-manager's csrapproving (selfnodeclient SubjectAccessReview) and signed by its csrsigning. "+
		"%d bursts per API, alternating which goes first. Latency is from a create's send to the bench's watch seeing `Issued` (the certificate); certificates/s is issued over the time from the first send to the last certificate.\n\n",
		r.Pods, pcrNode, pcrSigner, pcrNamespace, pcrNode, r.Workers, r.Bursts)
	b.f("| API | issued | errors | certificates/s | each burst (/s) | p50 | p95 | p99 | CPU s: kube-apiserver | rekey-apiserver | kube-controller-manager | etcd | server CPU s / 1,000 |\n")
	b.f("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, res := range r.Results {
		cpu := func(name string) string {
			if v, ok := res.CPUByProcess[name]; ok {
				return fmt.Sprintf("%.1f", v)
			}
			return "-"
		}
		each := make([]string, len(res.Rounds))
		for i, v := range res.Rounds {
			each[i] = fmt.Sprintf("%.0f", v)
		}
		b.f("| %s | %d | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n", res.Name, res.Issued, res.Errors, res.Throughput, strings.Join(each, ", "),
			ms(res.P50), ms(res.P95), ms(res.P99), cpu("kube-apiserver"), cpu("rekey-apiserver"), cpu("kube-controller-manager"), cpu("etcd"), res.CPUPer1000)
	}
	pcr := r.Results[0]
	if len(r.Results) > 1 && r.Results[1].Issued > 0 && pcr.Issued > 0 {
		peer := r.Results[1]
		b.f("\nRatio PodCertificateRequests / native CSRs: throughput %.2fx, p50 %.2fx, p99 %.2fx, server CPU per 1,000 %.2fx.\n",
			pcr.Throughput/peer.Throughput, float64(pcr.P50)/float64(peer.P50), float64(pcr.P99)/float64(peer.P99), pcr.CPUPer1000/peer.CPUPer1000)
	}
	if len(r.Refused) > 0 {
		reasons := make([]string, 0, len(r.Refused))
		for why, count := range r.Refused {
			reasons = append(reasons, fmt.Sprintf("%s: %d", why, count))
		}
		sort.Strings(reasons)
		b.f("\nRefused instead of issued: %s.\n", strings.Join(reasons, ", "))
	}
	if r.Retries > 0 {
		b.f("\nCreates retried after kube-apiserver's NodeRestriction had not yet seen an object: %d.\n", r.Retries)
	}
	b.f("\nTargets (the issue sets no ratio for these; reported):\n\n")
	check(&b.Builder, fmt.Sprintf("pod certificates: every PodCertificateRequest Issued (%d/%d), none refused or lost", pcr.Issued, pcr.Requested),
		pcr.Errors == 0 && pcr.Issued == pcr.Requested && len(r.Refused) == 0)
	return b.String()
}
