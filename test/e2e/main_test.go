// Package e2e runs rekey behind a real kube-apiserver (RBAC, Node
// authorization, the aggregation layer) and drives it with the real kubectl
// as distinct users authenticated by client certificates.
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"rekey.io/rekey/test/framework"
)

var cluster *framework.Cluster

// Audit logs of both servers (requests to certificates.rekey.io, and the
// nodes' lease updates, at Metadata level), for the tests that check who
// did what and with which certificate.
var kubeAuditLog, rekeyAuditLog string

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: certificates.rekey.io
- level: Metadata
  resources:
  - group: rotation.rekey.io
    resources: [certificateauthorities]
  - group: apiregistration.k8s.io
    resources: [apiservices]
  - group: ""
    resources: [configmaps]
  - group: certificates.k8s.io
    resources: [clustertrustbundles]
- level: Metadata
  namespaces: [kube-node-lease]
  resources:
  - group: coordination.k8s.io
    resources: [leases]
- level: None
`

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer framework.RemoveBinaries()
	dir, err := os.MkdirTemp("", "rekey-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rekey, err := framework.BinaryPath("rekey-apiserver")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubeAuditLog, rekeyAuditLog = filepath.Join(dir, "kube-apiserver-audit.log"), filepath.Join(dir, "rekey-apiserver-audit.log")
	cluster, err = framework.StartCluster(dir, rekey, framework.ClusterOptions{
		// Profiling on: /debug/pprof redirects in the generic server, so
		// TestRekeyNeverRedirects exercises the no-redirect filter.
		RekeyArgs:         []string{"--profiling", "--audit-policy-file=" + policy, "--audit-log-path=" + rekeyAuditLog},
		KubeAPIServerArgs: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + kubeAuditLog},
		// kube-apiserver's AuthorizationConfiguration as
		// docs/revocation.md gives it: rekey's revocation webhook first
		// (fail open), then Node and RBAC.
		RevocationWebhookAuthorizer: true,
		Logf:                        func(format string, args ...any) { fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...) },
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "rekey-apiserver log tail:\n%s\n", cluster.Rekey.LogTail(8000))
	}
	cluster.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", dir)
	}
	return code
}
