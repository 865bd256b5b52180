package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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
	ports, err := framework.FreePorts(1)
	if err != nil {
		panic(err)
	}
	return ports[0]
}

func startStandalone(dir, binary string) (*framework.Standalone, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	args := []string{"--signer-workers=16", "--profiling=" + strconv.FormatBool(profileFile != "" || heapFile != "")}
	if extra := os.Getenv("REKEY_BENCH_SERVER_ARGS"); extra != "" {
		args = append(args, strings.Fields(extra)...)
	}
	s, err := framework.LaunchStandalone(dir, binary, dir, freePort(), nil, args...)
	if err != nil {
		if s != nil {
			s.Process.Stop(5 * time.Second)
		}
		return nil, err
	}
	s.Config.QPS, s.Config.Burst = 10000, 20000
	// Wait for the built-in CA to be ready before measuring.
	time.Sleep(2 * time.Second)
	return s, nil
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
