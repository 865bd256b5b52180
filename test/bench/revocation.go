package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/framework"
)

// The revocation benchmark's objects: users with client certificates of
// rekey's built-in kube-apiserver client signer, in a group that may read
// one namespace's ConfigMaps.
const (
	revSigner    = "rekey.io/kube-apiserver-client"
	revCA        = "rekey.io-kube-apiserver-client"
	revGroup     = "bench-revocation"
	revNamespace = "bench-revocation"
	revConfigMap = "bench"
)

// revocationResult is the revocation benchmark (issue #31): how long after
// a Revocation's create returns kube-apiserver refuses the certificate,
// and what rekey's authorization webhook in kube-apiserver's chain costs a
// read-heavy client-certificate workload.
type revocationResult struct {
	Revocations int
	// Latency is from the create's return to the first 403 that names the
	// revocation, per revocation; Create is the create call itself.
	Latency, Create []time.Duration
	// Polls counts the requests made while waiting for the 403s; Errors
	// the revocations whose 403 never came (or came for another reason).
	Polls, Errors int
	// Throughput is the read workload with the webhook in the chain, then
	// without it, then (CacheTTL set) with the webhook's NoOpinion cached.
	Throughput []readResult
	// Workload is what the read workload's clients do (-revocation-workload).
	Workload   string
	WorkloadIs string
	Clients    int
	Window     time.Duration
	Rounds     int
	// CacheTTL, when set, is the unauthorizedTTL of the third
	// configuration; CachedLatency and CachedErrors are the revocations
	// measured through it.
	CacheTTL       time.Duration
	CachedLatency  []time.Duration
	CachedErrors   int
	KubeAPIProfile string
	RekeyProfile   string
}

// readResult is the read workload through one kube-apiserver
// configuration, summed over its rounds.
type readResult struct {
	Name     string
	Requests int
	Errors   int
	Elapsed  time.Duration
	Lat      []time.Duration
	Rounds   []float64
	CPU      map[string]float64
}

func (r *readResult) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// revocationBench runs the revocation benchmark on a control plane of its
// own (etcd, kube-apiserver whose AuthorizationConfiguration puts rekey's
// webhook first, as docs/revocation.md gives it, and rekey-apiserver), so
// that no other benchmark runs with the webhook in its chain.
func revocationBench(ctx context.Context, dir, rekeyBin string, n, clients, rounds int, window, cacheTTL time.Duration, profile, workloadName string) (*revocationResult, error) {
	workload, err := newReadWorkload(workloadName)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "revocation: starting etcd, kube-apiserver (rekey's webhook first) and rekey-apiserver")
	cluster, err := framework.StartCluster(dir, rekeyBin, framework.ClusterOptions{
		RekeyArgs:                   []string{"--profiling=true", "--kube-api-qps=5000", "--kube-api-burst=10000"},
		KubeAPIServerArgs:           []string{"--profiling=true"},
		RevocationWebhookAuthorizer: true,
		Logf:                        func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	if err != nil {
		return nil, err
	}
	defer cluster.Stop()
	adminCfg, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		return nil, err
	}
	adminCfg.QPS, adminCfg.Burst = 10000, 20000
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	rekey := clientset.NewForConfigOrDie(adminCfg)
	if err := revocationObjects(ctx, admin); err != nil {
		return nil, err
	}
	if err := workload.setup(ctx, admin); err != nil {
		return nil, err
	}
	var bundle string
	if err := framework.EventuallyErr(2*time.Minute, func(ctx context.Context) error {
		ca, err := rekey.RotationV1alpha1().CertificateAuthorities().Get(ctx, revCA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if bundle = ca.Status.TrustBundle; bundle == "" {
			return fmt.Errorf("CertificateAuthority %s has no trust bundle yet", revCA)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := cluster.TrustClientCAs([]byte(bundle)); err != nil {
		return nil, err
	}

	fmt.Fprintf(os.Stderr, "revocation: issuing %d + %d client certificates\n", clients, n)
	readers, err := issueClients(ctx, rekey, cluster, "bench-reader", clients)
	if err != nil {
		return nil, err
	}
	revoked, err := issueClients(ctx, rekey, cluster, "bench-revoked", n)
	if err != nil {
		return nil, err
	}
	// kube-apiserver re-reads its client CA file by itself.
	if err := framework.EventuallyErr(2*time.Minute, func(ctx context.Context) error {
		return readOnce(ctx, readers[0].client)
	}); err != nil {
		return nil, fmt.Errorf("kube-apiserver does not accept rekey's client certificates: %w", err)
	}

	res := &revocationResult{Revocations: n, Clients: clients, Window: window, Rounds: rounds, CacheTTL: cacheTTL, Workload: workload.name, WorkloadIs: workload.describe}
	fmt.Fprintf(os.Stderr, "revocation: %d revocations, one at a time\n", n)
	res.Latency, res.Create, res.Polls, res.Errors = revokeAll(ctx, rekey, revoked)

	// The read workload through each configuration of kube-apiserver,
	// taking turns as the issuance scenarios do (turn: each round starts
	// one later, every other round goes backwards), kube-apiserver
	// restarted on the same etcd for each change, so that none always runs
	// first or on a warmer server.
	configs := []readConfig{
		{name: "rekey's webhook first, nothing cached (AuthorizationConfiguration: rekey, Node, RBAC)"},
		{name: "without it (--authorization-mode=Node,RBAC)", args: []string{"--authorization-config=", "--authorization-mode=Node,RBAC"}},
	}
	var cachedConfig string
	if cacheTTL > 0 {
		if cachedConfig, err = cachedAuthorizationConfig(cluster, dir, cacheTTL); err != nil {
			return nil, err
		}
		configs = append(configs, readConfig{
			name: fmt.Sprintf("rekey's webhook first, NoOpinion cached %s (cacheUnauthorizedRequests: true, unauthorizedTTL: %s)", cacheTTL, cacheTTL),
			args: []string{"--authorization-config=" + cachedConfig},
		})
	}
	pids := func() map[string]int {
		return map[string]int{"kube-apiserver": cluster.KubeAPIServer.Pid(), "rekey-apiserver": cluster.Rekey.Pid(), "etcd": cluster.Etcd.Pid()}
	}
	res.Throughput = make([]readResult, len(configs))
	for i := range configs {
		res.Throughput[i] = readResult{Name: configs[i].name, CPU: map[string]float64{}}
	}
	current := 0 // kube-apiserver started with configs[0]
	for r := 0; r < rounds; r++ {
		for j := range configs {
			idx := turn(r, j, len(configs))
			if idx != current {
				fmt.Fprintf(os.Stderr, "revocation: restarting kube-apiserver: %s\n", configs[idx].name)
				if err := cluster.RestartKubeAPIServer(configs[idx].args...); err != nil {
					return nil, err
				}
				current = idx
			}
			// A second of load first: connections, caches and the
			// webhook's client warm, none of it counted.
			readLoad(ctx, readers, workload, time.Second)
			if profile != "" && idx == 0 && res.KubeAPIProfile == "" {
				res.KubeAPIProfile = profile
				res.RekeyProfile = strings.TrimSuffix(profile, ".pprof") + "-rekey.pprof"
				go profileCPUFor(ctx, restClient(adminCfg), profile, window-2*time.Second)
				go profileCPUFor(ctx, restClient(cluster.DirectToRekey(adminCfg)), res.RekeyProfile, window-2*time.Second)
			}
			cpu0 := map[string]float64{}
			for name, pid := range pids() {
				cpu0[name] = cpuSeconds(pid)
			}
			round := readLoad(ctx, readers, workload, window)
			t := &res.Throughput[idx]
			for name, pid := range pids() {
				t.CPU[name] += cpuSeconds(pid) - cpu0[name]
			}
			t.Requests += round.Requests
			t.Errors += round.Errors
			t.Elapsed += round.Elapsed
			t.Lat = append(t.Lat, round.Lat...)
			t.Rounds = append(t.Rounds, round.rate())
			fmt.Fprintf(os.Stderr, "  %s: %d reads, %d errors, %.0f/s\n", t.Name, round.Requests, round.Errors, round.rate())
		}
	}

	// With NoOpinion cached, a revocation waits for the cached answer of
	// the request made just before it to expire: the same measurement
	// again on that configuration, with certificates of its own.
	if cacheTTL > 0 {
		if current != len(configs)-1 {
			fmt.Fprintf(os.Stderr, "revocation: restarting kube-apiserver: %s\n", configs[len(configs)-1].name)
			if err := cluster.RestartKubeAPIServer(configs[len(configs)-1].args...); err != nil {
				return nil, err
			}
		}
		cached, err := issueClients(ctx, rekey, cluster, "bench-revoked-cached", n)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "revocation: %d revocations with NoOpinion cached %s\n", n, cacheTTL)
		res.CachedLatency, _, _, res.CachedErrors = revokeAll(ctx, rekey, cached)
	}
	return res, nil
}

// readConfig is a kube-apiserver configuration the read workload runs
// through: args restart kube-apiserver with it (none: as started).
type readConfig struct {
	name string
	args []string
}

// cachedAuthorizationConfig writes the documented AuthorizationConfiguration
// (failing open) with rekey's NoOpinion answers cached for ttl, and returns
// its path.
func cachedAuthorizationConfig(cluster *framework.Cluster, dir string, ttl time.Duration) (string, error) {
	data, err := os.ReadFile(cluster.RevocationAuthorizationConfigPath(framework.RevocationFailOpen))
	if err != nil {
		return "", err
	}
	out := strings.Replace(strings.Replace(string(data),
		"cacheUnauthorizedRequests: false", "cacheUnauthorizedRequests: true", 1),
		"unauthorizedTTL: 1s", "unauthorizedTTL: "+ttl.String(), 1)
	if !strings.Contains(out, "cacheUnauthorizedRequests: true") || !strings.Contains(out, "unauthorizedTTL: "+ttl.String()) {
		return "", fmt.Errorf("%s: no cacheUnauthorizedRequests: false and unauthorizedTTL: 1s to change", cluster.RevocationAuthorizationConfigPath(framework.RevocationFailOpen))
	}
	path := filepath.Join(dir, "authorization-cached.yaml")
	return path, os.WriteFile(path, []byte(out), 0o600)
}

// revokeAll revokes each client's certificate in turn (revokeOne).
func revokeAll(ctx context.Context, rekey clientset.Interface, clients []certClient) (lat, create []time.Duration, polls, errs int) {
	for i, c := range clients {
		l, cr, p, err := revokeOne(ctx, rekey, c)
		polls += p
		if err != nil {
			errs++
			fmt.Fprintf(os.Stderr, "  %s: %v\n", c.user, err)
			continue
		}
		lat = append(lat, l)
		create = append(create, cr)
		if (i+1)%25 == 0 {
			fmt.Fprintf(os.Stderr, "  %d revoked\n", i+1)
		}
	}
	return lat, create, polls, errs
}

// revocationObjects: a namespace with a ConfigMap that the group revGroup
// may read.
func revocationObjects(ctx context.Context, admin kubernetes.Interface) error {
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: revNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", revNamespace, err)
	}
	_, err = admin.CoreV1().ConfigMaps(revNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: revConfigMap},
		Data:       map[string]string{"greeting": "hello"},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ConfigMap %s/%s: %w", revNamespace, revConfigMap, err)
	}
	// A Role of its own: the ClusterRole view is aggregated, and with no
	// kube-controller-manager to aggregate it has no rules.
	_, err = admin.RbacV1().Roles(revNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-revocation-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Role bench-revocation-reader: %w", err)
	}
	_, err = admin.RbacV1().RoleBindings(revNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-revocation-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "bench-revocation-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: revGroup}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding bench-revocation-reader to %s: %w", revGroup, err)
	}
	return nil
}

// certClient is a user with its own rekey client certificate, talking to
// kube-apiserver with it over a connection of its own (client-go keeps one
// transport per certificate).
type certClient struct {
	user   string
	sha256 string
	client kubernetes.Interface
}

// issueClients gets n client certificates from rekey (a CSR each, approved
// by the admin) for users <prefix>-<i> in revGroup, and a client for each.
func issueClients(ctx context.Context, rekey clientset.Interface, cluster *framework.Cluster, prefix string, n int) ([]certClient, error) {
	out := make([]certClient, n)
	work := make(chan int, n)
	for i := range n {
		work <- i
	}
	close(work)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c, err := issueClient(ctx, rekey, cluster, fmt.Sprintf("%s-%d", prefix, i))
				if err != nil {
					errs <- err
					continue
				}
				out[i] = c
			}
		}()
	}
	wg.Wait()
	close(errs)
	return out, <-errs
}

func issueClient(ctx context.Context, rekey clientset.Interface, cluster *framework.Cluster, user string) (certClient, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certClient{}, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: user, Organization: []string{revGroup}}}, key)
	if err != nil {
		return certClient{}, err
	}
	csrs := rekey.CertificatesV1alpha1().CertificateSigningRequests()
	name := "bench-rev-" + user
	_, err = csrs.Create(ctx, &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: revSigner, ExpirationSeconds: ptr.To[int32](3600),
			Usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return certClient{}, fmt.Errorf("CSR %s: %w", name, err)
	}
	approval := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}}
	approval.Status.Conditions = []certv1alpha1.CertificateSigningRequestCondition{{
		Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "Bench",
	}}
	csr, err := csrs.UpdateApproval(ctx, name, approval, metav1.UpdateOptions{})
	if err != nil {
		return certClient{}, fmt.Errorf("approving CSR %s: %w", name, err)
	}
	if len(csr.Status.Certificate) == 0 {
		// Issued after the approval's response: wait for it.
		if err := framework.EventuallyErr(time.Minute, func(ctx context.Context) error {
			if csr, err = csrs.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
			if len(csr.Status.Certificate) == 0 {
				return fmt.Errorf("CSR %s has no certificate yet", name)
			}
			return nil
		}); err != nil {
			return certClient{}, err
		}
	}
	leaf, _ := pem.Decode(csr.Status.Certificate)
	if leaf == nil {
		return certClient{}, fmt.Errorf("CSR %s: no PEM certificate", name)
	}
	sum := sha256.Sum256(leaf.Bytes)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return certClient{}, err
	}
	cfg := &rest.Config{
		Host: cluster.KubeAPIURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cluster.ServingCA.CertPEM(),
			CertData: csr.Status.Certificate,
			KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
		// No client-side limit: the benchmark is the server's.
		QPS: -1,
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return certClient{}, err
	}
	return certClient{user: user, sha256: hex.EncodeToString(sum[:]), client: client}, nil
}

func readOnce(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.CoreV1().ConfigMaps(revNamespace).Get(ctx, revConfigMap, metav1.GetOptions{})
	return err
}

// revokeOne: a request with the certificate that works, then the
// Revocation created as `kubectl rekey revoke` creates it (named by the
// certificate's SHA-256, through kube-apiserver's aggregation layer), then
// requests with the certificate, back to back, until the first 403 that
// names the revocation. The latency runs from the create's return.
func revokeOne(ctx context.Context, rekey clientset.Interface, c certClient) (lat, create time.Duration, polls int, err error) {
	if err := readOnce(ctx, c.client); err != nil {
		return 0, 0, 0, fmt.Errorf("before the revocation: %w", err)
	}
	t0 := time.Now()
	_, err = rekey.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{
		ObjectMeta: metav1.ObjectMeta{Name: c.sha256},
		Spec:       certv1alpha1.RevocationSpec{CertificateSHA256: c.sha256, Reason: certv1alpha1.RevocationReasonKeyCompromise},
	}, metav1.CreateOptions{FieldManager: "kubectl-rekey"})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("creating the Revocation: %w", err)
	}
	t1 := time.Now()
	deadline := t1.Add(30 * time.Second)
	for time.Now().Before(deadline) {
		polls++
		err := readOnce(ctx, c.client)
		switch {
		case err == nil:
			time.Sleep(time.Millisecond)
			continue
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "was revoked"):
			return time.Since(t1), t1.Sub(t0), polls, nil
		default:
			return 0, 0, polls, fmt.Errorf("after the revocation: %w", err)
		}
	}
	return 0, 0, polls, errors.New("no 403 within 30s of the revocation")
}

// readLoad: every client makes the workload's requests back to back for
// the window (closed loop, one request in flight per client).
func readLoad(ctx context.Context, clients []certClient, workload readWorkload, window time.Duration) readResult {
	return closedLoop(ctx, len(clients), window, func(ctx context.Context, i, k int) error {
		if err := workload.read(ctx, clients[i].client, i, k); err != nil {
			return fmt.Errorf("%s: %w", clients[i].user, err)
		}
		return nil
	})
}

// closedLoop runs op back to back in callers goroutines for window (one
// call in flight per caller); op gets its caller's index and how many
// calls that caller made before.
func closedLoop(ctx context.Context, callers int, window time.Duration, op func(ctx context.Context, caller, k int) error) readResult {
	var errs atomic.Int64
	lats := make([][]time.Duration, callers)
	start := time.Now()
	end := start.Add(window)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; time.Now().Before(end); k++ {
				t0 := time.Now()
				if err := op(ctx, i, k); err != nil {
					if errs.Add(1) == 1 {
						fmt.Fprintf(os.Stderr, "  caller %d: %v\n", i, err)
					}
					continue
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	r := readResult{Elapsed: time.Since(start), Errors: int(errs.Load())}
	for _, l := range lats {
		r.Requests += len(l)
		r.Lat = append(r.Lat, l...)
	}
	return r
}

// profileCPUFor writes a CPU profile of kube-apiserver, seconds long,
// started two seconds from now.
func profileCPUFor(ctx context.Context, client rest.Interface, file string, d time.Duration) {
	time.Sleep(2 * time.Second)
	secs := max(1, int(d.Seconds()))
	data, err := client.Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(secs)).DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(file, data, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", err)
	}
}

func sortedDurations(d []time.Duration) []time.Duration {
	out := append([]time.Duration(nil), d...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func msf(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func renderRevocation(r *revocationResult) string {
	var b strings.Builder
	lat, create := sortedDurations(r.Latency), sortedDurations(r.Create)
	cached := sortedDurations(r.CachedLatency)
	if r.Revocations == 0 {
		// -revocations 0 with -revocation-only: the read workload alone.
		fmt.Fprint(&b, "\nRevocation (issue #31): no revocations (-revocations 0), the read workload only.\n")
	} else {
		renderRevocations(&b, r, lat, create, cached)
	}

	fmt.Fprintf(&b, "\nkube-apiserver reads (workload %s: %s), %d clients each with its own rekey client certificate, closed loop, %s windows, %d rounds per configuration taking turns (kube-apiserver restarted on the same etcd between configurations, a second of unmeasured load after each):\n\n",
		r.Workload, r.WorkloadIs, r.Clients, r.Window, r.Rounds)
	renderReads(&b, r, lat, cached)
	return b.String()
}

// renderRevocations is the table of revoke → 403 latencies.
func renderRevocations(b *strings.Builder, r *revocationResult, lat, create, cached []time.Duration) {
	fmt.Fprintf(b, "\nRevocation (issue #31): %d client certificates of %s revoked one at a time through kube-apiserver (a Revocation named by the certificate's SHA-256, as `kubectl rekey revoke` creates it), each right after a request with it that worked; after each create returned, GETs with the certificate back to back (1 ms apart) until the first 403 naming the revocation:\n\n",
		r.Revocations, revSigner)
	fmt.Fprintln(b, "| kube-apiserver authorization | measured | revocations | errors | p50 | p99 | max |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|")
	fmt.Fprintf(b, "| rekey's webhook first, nothing cached | create returned → first 403 (%d requests in all while waiting) | %d | %d | %s | %s | %s |\n", r.Polls, len(lat), r.Errors, msf(percentile(lat, 0.5)), msf(percentile(lat, 0.99)), msf(last(lat)))
	fmt.Fprintf(b, "| rekey's webhook first, nothing cached | the create call | %d | | %s | %s | %s |\n", len(create), msf(percentile(create, 0.5)), msf(percentile(create, 0.99)), msf(last(create)))
	if r.CacheTTL > 0 {
		fmt.Fprintf(b, "| NoOpinion cached %s | create returned → first 403 | %d | %d | %s | %s | %s |\n", r.CacheTTL, len(cached), r.CachedErrors, msf(percentile(cached, 0.5)), msf(percentile(cached, 0.99)), msf(last(cached)))
	}
}

// renderReads is the read workload's table and the targets.
func renderReads(b *strings.Builder, r *revocationResult, lat, cached []time.Duration) {
	fmt.Fprintln(b, "| kube-apiserver authorization | reads | errors | reads/s | per round | ratio to without | p50 | p99 | CPU ms / read: kube-apiserver | rekey-apiserver | etcd |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|---|---|---|")
	without := r.Throughput[1].rate()
	for _, t := range r.Throughput {
		l := sortedDurations(t.Lat)
		per := make([]string, len(t.Rounds))
		for i, v := range t.Rounds {
			per[i] = fmt.Sprintf("%.0f", v)
		}
		cpu := func(name string) string {
			if t.Requests == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f", t.CPU[name]/float64(t.Requests)*1000)
		}
		ratio := 0.0
		if without > 0 {
			ratio = t.rate() / without
		}
		fmt.Fprintf(b, "| %s | %d | %d | %.0f | %s | %.2fx | %s | %s | %s | %s | %s |\n", t.Name, t.Requests, t.Errors, t.rate(), strings.Join(per, ", "), ratio,
			msf(percentile(l, 0.5)), msf(percentile(l, 0.99)), cpu("kube-apiserver"), cpu("rekey-apiserver"), cpu("etcd"))
	}
	if r.KubeAPIProfile != "" {
		fmt.Fprintf(b, "\nCPU profiles of the first round with the webhook (nothing cached): kube-apiserver %s, rekey-apiserver %s\n", r.KubeAPIProfile, r.RekeyProfile)
	}
	ratio := 0.0
	if without > 0 {
		ratio = r.Throughput[0].rate() / without
	}
	fmt.Fprint(b, "\nTargets:\n\n")
	if r.Revocations > 0 {
		p99 := percentile(lat, 0.99)
		check(b, fmt.Sprintf("revocation → 403 at kube-apiserver: p99 <= 1 s over at least 100 revocations (%s over %d, %d errors)", msf(p99), len(lat), r.Errors),
			len(lat) >= 100 && r.Errors == 0 && p99 <= time.Second)
	}
	check(b, fmt.Sprintf("kube-apiserver read throughput with rekey's webhook >= 0.90x without, workload %s (%.0f vs %.0f/s, %.2fx)", r.Workload, r.Throughput[0].rate(), without, ratio),
		ratio >= 0.90 && r.Throughput[0].Errors == 0)
	if r.CacheTTL > 0 {
		t := r.Throughput[2]
		cratio := 0.0
		if without > 0 {
			cratio = t.rate() / without
		}
		fmt.Fprintf(b, "- (reported) NoOpinion cached %s: read throughput %.2fx without", r.CacheTTL, cratio)
		if r.Revocations > 0 {
			fmt.Fprintf(b, "; revocation → 403 p99 %s over %d (%d errors)", msf(percentile(cached, 0.99)), len(cached), r.CachedErrors)
		}
		fmt.Fprintln(b)
	}
}

func last(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)-1]
}

// revocationDir is where the revocation benchmark's control plane lives.
func revocationDir(dir string) string { return filepath.Join(dir, "revocation") }
