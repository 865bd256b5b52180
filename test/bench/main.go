// Command bench measures certificate issuance: rekey standalone (direct),
// rekey behind kube-apiserver's aggregation layer, and the native
// certificates.k8s.io/v1 API with kube-controller-manager's signer, on the
// same machine in the same run; plus 5,000-node bursts of kubelet client
// certificate requests with NodeClient approval: as nodes join with one
// bootstrap token, and as nodes renew each as itself; and the pods of one
// simulated node getting certificates through PodCertificateRequests that
// rekey issues, beside the same node's native CSRs through
// kube-controller-manager; and revocation: how soon kube-apiserver refuses
// a revoked client certificate, and what rekey's authorization webhook
// costs kube-apiserver's reads; and service-account tokens signed through
// rekey (kube-apiserver's --service-account-signing-endpoint on rekey-agent
// jwt-signer) beside kube-apiserver's own key-file signing. `make bench`
// runs it.
package main

import (
	"context"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/framework"
)

func main() {
	n := flag.Int("issuances", 10000, "issuances per throughput scenario (0: only the burst)")
	requesters := flag.Int("requesters", 32, "concurrent requesters")
	approvers := flag.Int("approvers", 16, "concurrent approvers")
	burst := flag.Int("burst-nodes", 5000, "simulated nodes in the bootstrap burst (0 skips it)")
	out := flag.String("out", "", "write the markdown report here as well")
	skipNative := flag.Bool("skip-native", false, "skip kube-apiserver + kube-controller-manager")
	flag.StringVar(&profileFile, "cpuprofile", "", "write a 10s CPU profile of the standalone server, taken during the direct scenario, here")
	flag.BoolVar(&directOnly, "direct-only", false, "run only the standalone (direct) scenario")
	flag.StringVar(&burstProfileFile, "burst-cpuprofile", "", "write a 10s CPU profile of the aggregated rekey-apiserver, taken during the burst, here (and one of kube-apiserver next to it, <name>-kube-apiserver.pprof)")
	flag.StringVar(&memProfileDir, "memprofiles", "", "save the heap profiles taken for the memory comparison (rekey-apiserver and kube-apiserver, before and after) in this directory")
	flag.StringVar(&heapFile, "heapprofile", "", "write a heap profile of the standalone server, taken after the direct scenario, here")
	flag.StringVar(&aggProfilePrefix, "aggregated-cpuprofile", "", "write 10s CPU profiles of the aggregated rekey-apiserver and of kube-apiserver, taken during the first aggregated round, to <prefix>-rekey.pprof and <prefix>-kube-apiserver.pprof")
	rounds := flag.Int("rounds", 10, "rounds the scenarios take turns in (each round starts one scenario later, and every other round goes backwards)")
	flag.IntVar(&burstRounds, "burst-rounds", 2, "bursts per API, taking turns in alternating order")
	flag.StringVar(&burstKinds, "burst-kinds", "bootstrap,renewal", "which bursts: bootstrap (one shared bootstrap token, nodeclient), renewal (each node as itself, selfnodeclient)")
	flag.IntVar(&stormNodes, "renewal-storm-nodes", 5000, "simulated nodes that renew after their CA's rotation reaches Prepared, each at rekey-agent's point in the renewal window (0 skips it; aggregated cluster)")
	flag.DurationVar(&renewalWindow, "renewal-window", 60*time.Second, "spec.rotation.renewalWindow of the renewal storm's CA")
	flag.IntVar(&gateConsumers, "gate-consumers", 5000, "TrustConsumers on one CA whose reports open a rotation's trust gate (0 skips it; aggregated cluster)")
	flag.IntVar(&gateWorkers, "gate-workers", 32, "concurrent consumer reports in the trust-gate benchmark")
	flag.IntVar(&pcrPods, "pcr-pods", 1000, "pods of one simulated node that each get a certificate through a PodCertificateRequest, beside as many native CSRs through kube-controller-manager (0 skips it; aggregated cluster)")
	flag.IntVar(&pcrBursts, "pcr-bursts", 2, "PodCertificateRequest bursts per API, taking turns in alternating order")
	flag.IntVar(&pcrWorkers, "pcr-workers", 32, "concurrent creates in the PodCertificateRequest benchmark")
	flag.IntVar(&revocations, "revocations", 100, "client certificates revoked one at a time, each timed from the Revocation's create to kube-apiserver's first 403 (0 skips the revocation benchmark; a control plane of its own, with rekey's authorization webhook first in kube-apiserver's chain)")
	flag.IntVar(&revClients, "revocation-clients", 32, "concurrent clients, each with its own rekey client certificate, in the revocation benchmark's read workload")
	flag.DurationVar(&revWindow, "revocation-window", 5*time.Second, "length of each read-workload round in the revocation benchmark")
	flag.IntVar(&revRounds, "revocation-rounds", 2, "read-workload rounds per kube-apiserver configuration (with rekey's webhook, without), taking turns")
	flag.DurationVar(&revCacheTTL, "revocation-cache-ttl", 0, "also measure reads and revocations with rekey's NoOpinion cached by kube-apiserver for this long (cacheUnauthorizedRequests: true, unauthorizedTTL); 0 skips it")
	flag.StringVar(&revProfile, "revocation-cpuprofile", "", "write CPU profiles of kube-apiserver (here) and rekey-apiserver (<name>-rekey.pprof), taken during the first read round with rekey's webhook")
	flag.StringVar(&revWorkload, "revocation-workload", "get", "the revocation benchmark's read workload: get (each client GETs one tiny ConfigMap, the webhook's worst case), list (LISTs a namespace of 100 ConfigMaps of 1 KiB), mixed (kubelet-like: GET of its Node and LIST of its pods by spec.nodeName, taking turns)")
	flag.BoolVar(&revocationOnly, "revocation-only", false, "run only the revocation benchmark")
	flag.BoolVar(&satokens, "satokens", true, "measure service-account token signing (#33): TokenRequest through kube-apiservers signing with a key file (ES256, RSA-2048) and through two on --service-account-signing-endpoint (rekey-agent jwt-signer → signjwt through kube-apiserver's aggregator, and straight to rekey-apiserver), and Sign on the signers' sockets beside the same signature in process (a control plane of its own; false or 0 skips it)")
	flag.BoolVar(&satokensOnly, "satokens-only", false, "run only the service-account token benchmark")
	flag.IntVar(&satRounds, "satoken-rounds", 4, "rounds of the service-account token benchmark; in each, every configuration takes its turn")
	flag.DurationVar(&satWindow, "satoken-window", 5*time.Second, "length of each measured window in the service-account token benchmark (after a second unmeasured)")
	flag.IntVar(&satClients, "satoken-clients", 32, "concurrent callers in the service-account token benchmark (TokenRequest, and Sign's concurrent rows)")
	flag.Parse()
	if err := run(*n, *requesters, *approvers, *burst, *rounds, *out, *skipNative); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var (
	profileFile      string
	burstProfileFile string
	burstRounds      int
	burstKinds       string
	memProfileDir    string
	heapFile         string
	aggProfilePrefix string
	directOnly       bool
	stormNodes       int
	renewalWindow    time.Duration
	gateConsumers    int
	gateWorkers      int
	pcrPods          int
	pcrBursts        int
	pcrWorkers       int
	revocations      int
	revClients       int
	revWindow        time.Duration
	revCacheTTL      time.Duration
	revRounds        int
	revProfile       string
	revWorkload      string
	revocationOnly   bool
	satokens         bool
	satokensOnly     bool
	satRounds        int
	satWindow        time.Duration
	satClients       int
)

func run(n, requesters, approvers, burst, rounds int, out string, skipNative bool) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rekey-bench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	defer framework.RemoveBinaries()
	rekeyBin, err := framework.ReleaseBinaryPath("rekey-apiserver")
	if err != nil {
		return err
	}
	if revocationOnly || satokensOnly {
		report := fmt.Sprintf("## Run of %s\n\nMachine: %s.\n\nCommand: `go run ./test/bench %s`.\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), machine(), strings.Join(os.Args[1:], " "))
		if revocationOnly {
			rev, err := revocationBench(ctx, revocationDir(dir), rekeyBin, revocations, revClients, revRounds, revWindow, revCacheTTL, revProfile, revWorkload)
			if err != nil {
				return fmt.Errorf("revocation: %w", err)
			}
			report += renderRevocation(rev)
		}
		if satokensOnly {
			sat, err := satokensBench(ctx, satokensDir(dir), rekeyBin, satClients, satRounds, satWindow)
			if err != nil {
				return fmt.Errorf("service-account tokens: %w", err)
			}
			report += renderSATokens(sat)
		}
		fmt.Print(report)
		if out != "" {
			return os.WriteFile(out, []byte(report), 0o644)
		}
		return nil
	}
	rekeyUsages := []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}

	// Every server runs for the whole measurement, and the scenarios take
	// turns in rounds: this machine's speed drifts by tens of percent over
	// minutes, and interleaving keeps that drift out of the ratios.
	fmt.Fprintln(os.Stderr, "starting rekey-apiserver --standalone (direct)")
	s, err := startStandalone(filepath.Join(dir, "standalone"), rekeyBin)
	if err != nil {
		return err
	}
	defer s.Process.Stop(30 * time.Second)
	directClient := clientset.NewForConfigOrDie(s.Config)
	scenarios := []*scenario{{
		name: "rekey standalone (direct)", prefix: "direct",
		tgt:      &rekeyTarget{client: directClient, signerName: "rekey.io/kube-apiserver-client", usages: rekeyUsages},
		requests: makeRequests(n, "direct", nil), cpuProcs: []namedProc{{"rekey-apiserver", s.Pid()}}, rssPids: []int{s.Pid()},
	}}

	var cluster *framework.Cluster
	var kcm *framework.Process
	var adminCfg *rest.Config
	var probes []memoryProbe
	if !directOnly {
		fmt.Fprintln(os.Stderr, "starting etcd, kube-apiserver and rekey-apiserver (aggregated)")
		cluster, err = framework.StartCluster(filepath.Join(dir, "cluster"), rekeyBin, framework.ClusterOptions{
			// Client throttling toward kube-apiserver lifted, as for
			// kube-controller-manager (startKCM).
			RekeyArgs:         []string{"--signer-workers=16", "--profiling=true", "--kube-api-qps=5000", "--kube-api-burst=10000"},
			KubeAPIServerArgs: []string{"--profiling=true", "--enable-bootstrap-token-auth=true"},
			Logf:              func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
		})
		if err != nil {
			return err
		}
		defer cluster.Stop()
		if adminCfg, err = clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig); err != nil {
			return err
		}
		adminCfg.QPS, adminCfg.Burst = 10000, 20000
		scenarios = append(scenarios, &scenario{
			name: "rekey aggregated", prefix: "agg",
			tgt:      &rekeyTarget{client: clientset.NewForConfigOrDie(adminCfg), signerName: "rekey.io/kube-apiserver-client", usages: rekeyUsages},
			requests: makeRequests(n, "agg", nil),
			cpuProcs: []namedProc{{"rekey-apiserver", cluster.Rekey.Pid()}, {"kube-apiserver", cluster.KubeAPIServer.Pid()}, {"etcd", cluster.Etcd.Pid()}}, rssPids: []int{cluster.Rekey.Pid()},
		})
		rekeyDirect := cluster.DirectToRekey(adminCfg)
		probes = []memoryProbe{
			{name: "rekey-apiserver", pid: cluster.Rekey.Pid(), client: restClient(rekeyDirect)},
			{name: "kube-apiserver", pid: cluster.KubeAPIServer.Pid(), client: restClient(adminCfg)},
		}
		if !skipNative {
			fmt.Fprintln(os.Stderr, "starting kube-controller-manager")
			if kcm, err = startKCM(cluster); err != nil {
				return err
			}
			defer kcm.Stop(10 * time.Second)
			scenarios = append(scenarios, &scenario{
				name: "native (kube-apiserver + kube-controller-manager)", prefix: "native",
				tgt:      &nativeTarget{client: kubernetes.NewForConfigOrDie(adminCfg), signerName: "kubernetes.io/kube-apiserver-client"},
				requests: makeRequests(n, "native", nil),
				cpuProcs: []namedProc{{"kube-apiserver", cluster.KubeAPIServer.Pid()}, {"kube-controller-manager", kcm.Pid()}, {"etcd", cluster.Etcd.Pid()}}, rssPids: []int{cluster.KubeAPIServer.Pid()},
			})
		}
	}

	before := make([]memory, len(probes))
	for i, p := range probes {
		if before[i], err = p.read(ctx); err != nil {
			return err
		}
	}
	if profileFile != "" {
		go profileCPU(ctx, directClient.Discovery().RESTClient(), profileFile)
	}
	for r := 0; r < rounds && n > 0; r++ {
		for i := range scenarios {
			sc := scenarios[turn(r, i, len(scenarios))]
			if aggProfilePrefix != "" && r == 0 && sc.prefix == "agg" && len(probes) == 2 {
				go profileCPU(ctx, probes[0].client, aggProfilePrefix+"-rekey.pprof")
				go profileCPU(ctx, probes[1].client, aggProfilePrefix+"-kube-apiserver.pprof")
			}
			fmt.Fprintf(os.Stderr, "round %d/%d: %s\n", r+1, rounds, sc.name)
			sc.runRound(ctx, r, rounds, requesters, approvers)
		}
	}
	if heapFile != "" {
		writeHeapProfile(ctx, directClient)
	}
	var mem *memoryResult
	if len(probes) == 2 && !skipNative && n > 0 {
		mem = &memoryResult{Stored: n}
		for i, p := range probes {
			after, err := p.read(ctx)
			if err != nil {
				return err
			}
			mem.Growth[i] = memory{RSSMiB: after.RSSMiB - before[i].RSSMiB, HeapMiB: after.HeapMiB - before[i].HeapMiB}
		}
	}
	results := make([]result, len(scenarios))
	for i, sc := range scenarios {
		results[i] = sc.result()
	}

	// The rotation benchmarks run before the bursts: the storm rotates the
	// kubelet client CA, and every certificate it signed before (a burst's)
	// would stay pending and keep status.pendingRenewal above 0.
	var storm *stormResult
	var gate *gateResult
	if cluster != nil && (stormNodes > 0 || gateConsumers > 0) {
		pids := map[string]int{"rekey-apiserver": cluster.Rekey.Pid(), "kube-apiserver": cluster.KubeAPIServer.Pid(), "etcd": cluster.Etcd.Pid()}
		admin := clientset.NewForConfigOrDie(adminCfg)
		if stormNodes > 0 {
			if storm, err = renewalStorm(ctx, admin, pids, stormNodes, renewalWindow); err != nil {
				return fmt.Errorf("renewal storm: %w", err)
			}
		}
		if gateConsumers > 0 {
			if gate, err = trustGate(ctx, admin, pids, gateConsumers, gateWorkers); err != nil {
				return fmt.Errorf("trust gate: %w", err)
			}
		}
	}

	var bursts []burstSet
	if burst > 0 && cluster != nil {
		pids := map[string]int{"rekey-apiserver": cluster.Rekey.Pid(), "kube-apiserver": cluster.KubeAPIServer.Pid(), "etcd": cluster.Etcd.Pid()}
		var native kubernetes.Interface
		if kcm != nil {
			pids["kube-controller-manager"] = kcm.Pid()
			if err := allowNodeClientBootstrap(ctx, cluster.Admin); err != nil {
				return err
			}
			native = kubernetes.NewForConfigOrDie(adminCfg)
		}
		var kinds []burstKind
		for _, kind := range strings.Split(burstKinds, ",") {
			switch kind {
			case "bootstrap":
				tokenCfg, err := bootstrapToken(ctx, cluster.Admin, adminCfg)
				if err != nil {
					return err
				}
				var nativeBootstrap kubernetes.Interface
				if native != nil {
					nativeBootstrap = kubernetes.NewForConfigOrDie(tokenCfg)
				}
				kinds = append(kinds, bootstrapKind(clientset.NewForConfigOrDie(tokenCfg), nativeBootstrap))
			case "renewal":
				kinds = append(kinds, renewalKind(clientset.NewForConfigOrDie(adminCfg), native))
			default:
				return fmt.Errorf("-burst-kinds: unknown kind %q (bootstrap, renewal)", kind)
			}
		}
		// The bursts take turns as the throughput scenarios do: each round
		// runs every kind, each kind's APIs in alternating order (rekey,
		// native, then native, rekey), so that no API and no kind always
		// runs first or on the larger store.
		perKind := make([][][]result, len(kinds))
		for k := range kinds {
			perKind[k] = make([][]result, len(kinds[k].apis))
		}
		for r := 0; r < burstRounds; r++ {
			for k, kind := range kinds {
				apis := kind.apis
				for j := range apis {
					i := j
					if r%2 == 1 {
						i = len(apis) - 1 - j
					}
					api := apis[i]
					fmt.Fprintf(os.Stderr, "%s burst %d/%d: %d nodes, %s\n", kind.name, r+1, burstRounds, burst, api.name)
					cpu0 := map[string]float64{}
					for name, pid := range pids {
						cpu0[name] = cpuSeconds(pid)
					}
					if burstProfileFile != "" && k == 0 && i == 0 && r == 0 {
						go profileCPU(ctx, probes[0].client, burstProfileFile)
						go profileCPU(ctx, probes[1].client, strings.TrimSuffix(burstProfileFile, ".pprof")+"-kube-apiserver.pprof")
					}
					b, err := bootstrapBurst(ctx, api, fmt.Sprintf("%s%d%d", kind.name[:1], r, i), burst)
					if err != nil {
						return err
					}
					b.CPUByProcess = map[string]float64{}
					for name, pid := range pids {
						b.CPUByProcess[name] = cpuSeconds(pid) - cpu0[name]
					}
					perKind[k][i] = append(perKind[k][i], b)
				}
			}
		}
		for k, kind := range kinds {
			set := burstSet{kind: kind}
			for _, rs := range perKind[k] {
				set.results = append(set.results, combineBursts(rs))
			}
			bursts = append(bursts, set)
		}
	}
	var pcr *pcrResult
	if pcrPods > 0 && cluster != nil {
		pids := map[string]int{"rekey-apiserver": cluster.Rekey.Pid(), "kube-apiserver": cluster.KubeAPIServer.Pid(), "etcd": cluster.Etcd.Pid()}
		if kcm != nil {
			pids["kube-controller-manager"] = kcm.Pid()
		}
		if pcr, err = podCertificates(ctx, cluster, adminCfg, pids, kcm != nil, pcrPods, pcrBursts, pcrWorkers); err != nil {
			return fmt.Errorf("pod certificates: %w", err)
		}
	}
	var rev *revocationResult
	if revocations > 0 && !directOnly {
		if rev, err = revocationBench(ctx, revocationDir(dir), rekeyBin, revocations, revClients, revRounds, revWindow, revCacheTTL, revProfile, revWorkload); err != nil {
			return fmt.Errorf("revocation: %w", err)
		}
	}
	var sat *satokenResult
	if satokens && !directOnly {
		if sat, err = satokensBench(ctx, satokensDir(dir), rekeyBin, satClients, satRounds, satWindow); err != nil {
			return fmt.Errorf("service-account tokens: %w", err)
		}
	}
	report := render(results, mem, bursts, n, requesters, rounds)
	if storm != nil {
		report += renderStorm(storm)
	}
	if gate != nil {
		report += renderGate(gate)
	}
	if pcr != nil {
		report += renderPCR(pcr)
	}
	if rev != nil {
		report += renderRevocation(rev)
	}
	if sat != nil {
		report += renderSATokens(sat)
	}
	fmt.Print(report)
	if out != "" {
		return os.WriteFile(out, []byte(report), 0o644)
	}
	return nil
}

// allowNodeClientBootstrap grants what kubeadm grants for kubelet client
// certificates in certificates.k8s.io: bootstrap tokens
// (system:bootstrappers) create requests and have them approved
// (nodeclient); nodes create requests and have their own renewals
// approved (selfnodeclient). rekey's grants are its artifacts/rbac.
func allowNodeClientBootstrap(ctx context.Context, admin kubernetes.Interface) error {
	for _, grant := range []struct{ role, group string }{
		{"system:node-bootstrapper", "system:nodes"},
		{"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
		{"system:node-bootstrapper", "system:bootstrappers"},
		{"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
	} {
		_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-" + strings.ReplaceAll(grant.group+"-"+grant.role, ":", "-")},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: grant.role},
			Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: grant.group}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("binding %s to %s: %w", grant.role, grant.group, err)
		}
	}
	return nil
}

// bootstrapToken makes a bootstrap token as `kubeadm token create` does
// (kube-apiserver runs with --enable-bootstrap-token-auth) and returns a
// client configuration that authenticates with it, once kube-apiserver
// accepts it.
func bootstrapToken(ctx context.Context, admin kubernetes.Interface, adminCfg *rest.Config) (*rest.Config, error) {
	const id, secret = "bench0", "0123456789abcdef"
	_, err := admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": id, "token-secret": secret,
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              "system:bootstrappers:kubeadm:default-node-token",
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating the bootstrap token: %w", err)
	}
	cfg := rest.AnonymousClientConfig(adminCfg)
	cfg.BearerToken = id + "." + secret
	cfg.QPS, cfg.Burst = adminCfg.QPS, adminCfg.Burst
	client := kubernetes.NewForConfigOrDie(cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err == nil && review.Status.UserInfo.Username == "system:bootstrap:"+id {
			return cfg, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("kube-apiserver does not accept the bootstrap token (is --enable-bootstrap-token-auth set?): %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func restClient(cfg *rest.Config) rest.Interface {
	return kubernetes.NewForConfigOrDie(cfg).Discovery().RESTClient()
}

// profileCPU writes a 10-second CPU profile of a server, started two
// seconds from now.
func profileCPU(ctx context.Context, client rest.Interface, file string) {
	time.Sleep(2 * time.Second)
	data, err := client.Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(file, data, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", err)
	}
}

func writeHeapProfile(ctx context.Context, client clientset.Interface) {
	data, err := client.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx)
	if err == nil {
		err = os.WriteFile(heapFile, data, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "heap profile: %v\n", err)
	}
}

func makeRequests(n int, prefix string, subject func(i int) pkix.Name) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		name := pkix.Name{CommonName: fmt.Sprintf("%s-%d", prefix, i), Organization: []string{"bench"}}
		if subject != nil {
			name = subject(i)
		}
		out[i] = mustCSR(name)
	}
	return out
}

func machine() string {
	mem := "?"
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				mem = fmt.Sprintf("%.0f GiB", kb/1024/1024)
			}
		}
	}
	model := "?"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s memory, %s/%s, %s", runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// turn is the scenario that goes i-th in round r of n scenarios: each round
// starts one scenario later than the one before, and every other round
// goes backwards, so that over 2n rounds every scenario goes before and
// after every other (three scenarios: all six orders in six rounds) and
// none always inherits the same one's leftovers (collections, compactions).
func turn(r, i, n int) int {
	if r%2 == 1 {
		return (r + n - 1 - i) % n
	}
	return (r + i) % n
}
