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
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/test/framework"
)

func mustCSR(subject pkix.Name) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type standaloneServer struct {
	proc   *framework.Process
	pid    int
	config *rest.Config
}

func (s *standaloneServer) stop() { s.proc.Stop(30 * time.Second) }

func startStandalone(dir, binary string) (*standaloneServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	port := freePort()
	args := []string{"--standalone", "--data-dir", dir,
		"--secure-port", strconv.Itoa(port), "--signer-workers=16", "--profiling=" + strconv.FormatBool(profileFile != "" || heapFile != "")}
	if extra := os.Getenv("REKEY_BENCH_SERVER_ARGS"); extra != "" {
		args = append(args, strings.Fields(extra)...)
	}
	proc, err := framework.Start(dir, "rekey-standalone", binary, args...)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if proc.Exited() {
			return nil, fmt.Errorf("rekey-apiserver exited:\n%s", proc.LogTail(3000))
		}
		if cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
			cfg.QPS, cfg.Burst = 10000, 20000
			client := kubernetes.NewForConfigOrDie(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			cancel()
			if err == nil && string(body) == "ok" {
				// Wait for the built-in CA to be ready before measuring.
				time.Sleep(2 * time.Second)
				return &standaloneServer{proc: proc, pid: proc.Pid(), config: cfg}, nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	proc.Stop(5 * time.Second)
	return nil, fmt.Errorf("rekey-apiserver not ready:\n%s", proc.LogTail(3000))
}

// startKCM runs kube-controller-manager with only the CSR controllers and
// its client throttling lifted, signing with a CA made for the run.
func startKCM(c *framework.Cluster) (*framework.Process, error) {
	tools, err := framework.BuildTools("kube-controller-manager")
	if err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("bench-cluster-signing-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(c.Dir, "pki", "kcm-signing.crt"), filepath.Join(c.Dir, "pki", "kcm-signing.key")
	if err := ca.Write(certFile, keyFile); err != nil {
		return nil, err
	}
	proc, err := framework.Start(c.Dir, "kube-controller-manager", filepath.Join(tools, "kube-controller-manager"),
		"--kubeconfig="+c.AdminKubeconfig,
		"--authentication-kubeconfig="+c.AdminKubeconfig,
		"--authorization-kubeconfig="+c.AdminKubeconfig,
		"--controllers=csrsigning,csrapproving,csrcleaner",
		"--cluster-signing-cert-file="+certFile, "--cluster-signing-key-file="+keyFile,
		"--kube-api-qps=5000", "--kube-api-burst=10000",
		"--leader-elect=false", "--use-service-account-credentials=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(freePort()),
	)
	if err != nil {
		return nil, err
	}
	time.Sleep(3 * time.Second)
	if proc.Exited() {
		return nil, fmt.Errorf("kube-controller-manager exited:\n%s", proc.LogTail(3000))
	}
	return proc, nil
}
