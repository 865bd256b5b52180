// Command bench measures certificate issuance: rekey standalone (direct),
// rekey behind kube-apiserver's aggregation layer, and the native
// certificates.k8s.io/v1 API with kube-controller-manager's signer, on the
// same machine in the same run; plus a 5,000-node bootstrap burst with
// NodeClient auto-approval through SubjectAccessReview. `make bench` runs it.
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

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/framework"
)

func main() {
	n := flag.Int("issuances", 10000, "issuances per throughput scenario")
	requesters := flag.Int("requesters", 32, "concurrent requesters")
	approvers := flag.Int("approvers", 16, "concurrent approvers")
	burst := flag.Int("burst-nodes", 5000, "simulated nodes in the bootstrap burst (0 skips it)")
	out := flag.String("out", "", "write the markdown report here as well")
	skipNative := flag.Bool("skip-native", false, "skip kube-apiserver + kube-controller-manager")
	flag.StringVar(&profileFile, "cpuprofile", "", "write a 10s CPU profile of the standalone server, taken during the direct scenario, here")
	flag.BoolVar(&directOnly, "direct-only", false, "run only the standalone (direct) scenario")
	flag.StringVar(&heapFile, "heapprofile", "", "write a heap profile of the standalone server, taken after the direct scenario, here")
	flag.Parse()
	if err := run(*n, *requesters, *approvers, *burst, *out, *skipNative); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var (
	profileFile string
	heapFile    string
	directOnly  bool
)

func run(n, requesters, approvers, burst int, out string, skipNative bool) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rekey-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rekeyBin, err := framework.BinaryPath("rekey-apiserver")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "generating %d requests\n", n)
	requests := makeRequests(n, "bench", nil)
	var results []result

	// 1. rekey standalone, direct.
	{
		fmt.Fprintln(os.Stderr, "scenario: rekey standalone (direct)")
		s, err := startStandalone(filepath.Join(dir, "standalone"), rekeyBin)
		if err != nil {
			return err
		}
		client := clientset.NewForConfigOrDie(s.Config)
		if profileFile != "" {
			go func() {
				time.Sleep(2 * time.Second)
				data, err := client.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").DoRaw(ctx)
				if err != nil {
					fmt.Fprintf(os.Stderr, "profile: %v\n", err)
					return
				}
				_ = os.WriteFile(profileFile, data, 0o644)
			}()
		}
		r := measure(ctx, "rekey standalone (direct)", &rekeyTarget{client: client, signerName: "rekey.io/kube-apiserver-client",
			usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}},
			requests, "direct", requesters, approvers, []int{s.Pid()}, []int{s.Pid()})
		results = append(results, r)
		if heapFile != "" {
			data, err := client.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(heapFile, data, 0o644)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "heap profile: %v\n", err)
			}
		}
		s.Process.Stop(30 * time.Second)
	}
	if directOnly {
		fmt.Print(render(results, nil, n, requesters))
		return nil
	}

	// 2 and 3: a real control plane with rekey aggregated, and native.
	fmt.Fprintln(os.Stderr, "starting etcd, kube-apiserver and rekey-apiserver (aggregated)")
	cluster, err := framework.StartCluster(filepath.Join(dir, "cluster"), rekeyBin, framework.ClusterOptions{
		RekeyArgs: []string{"--signer-workers=16"},
		Logf:      func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	adminCfg, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		return err
	}
	adminCfg.QPS, adminCfg.Burst = 10000, 20000
	{
		fmt.Fprintln(os.Stderr, "scenario: rekey through the aggregation layer")
		client := clientset.NewForConfigOrDie(adminCfg)
		r := measure(ctx, "rekey aggregated", &rekeyTarget{client: client, signerName: "rekey.io/kube-apiserver-client",
			usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}},
			makeRequests(n, "agg", nil), "agg", requesters, approvers,
			[]int{cluster.Rekey.Pid(), cluster.KubeAPIServer.Pid(), cluster.Etcd.Pid()}, []int{cluster.Rekey.Pid()})
		results = append(results, r)
	}
	if !skipNative {
		fmt.Fprintln(os.Stderr, "starting kube-controller-manager")
		kcm, err := startKCM(cluster)
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "scenario: native kube-apiserver + kube-controller-manager")
		r := measure(ctx, "native (kube-apiserver + kube-controller-manager)", &nativeTarget{client: kubernetes.NewForConfigOrDie(adminCfg), signerName: "kubernetes.io/kube-apiserver-client"},
			makeRequests(n, "native", nil), "native", requesters, approvers,
			[]int{cluster.KubeAPIServer.Pid(), kcm.Pid(), cluster.Etcd.Pid()}, []int{cluster.KubeAPIServer.Pid()})
		results = append(results, r)
		kcm.Stop(10 * time.Second)
	}
	var burstResult *result
	if burst > 0 {
		fmt.Fprintf(os.Stderr, "scenario: %d-node bootstrap burst\n", burst)
		b, err := bootstrapBurst(ctx, adminCfg, burst)
		if err != nil {
			return err
		}
		burstResult = &b
	}
	report := render(results, burstResult, n, requesters)
	fmt.Print(report)
	if out != "" {
		return os.WriteFile(out, []byte(report), 0o644)
	}
	return nil
}

func measure(ctx context.Context, name string, tgt target, requests [][]byte, prefix string, requesters, approvers int, cpuPids, rssPids []int) result {
	cpu0, rss0 := totalCPU(cpuPids), totalRSS(rssPids)
	s := startSampler(rssPids)
	issued, errs, lat, elapsed := drive(ctx, tgt, requests, prefix, requesters, approvers, 60*time.Second)
	peak := s.Stop()
	r := summarize(name, issued, errs, lat, elapsed)
	if issued > 0 {
		r.CPUPer1000 = (totalCPU(cpuPids) - cpu0) / float64(issued) * 1000
	}
	r.PeakRSSMiB = peak
	r.RSSGrowth = totalRSS(rssPids) - rss0
	fmt.Fprintf(os.Stderr, "  %d issued, %d errors, %.0f/s, p99 %s\n", r.Issued, r.Errors, r.Throughput, r.P99)
	return r
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
