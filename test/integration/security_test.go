package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// TestEscalationPaths runs, against one standalone server, each way a
// hostile review found to get a certificate for an identity one does not
// have, and the hardening found with them.
func TestEscalationPaths(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	csrs := client.CertificatesV1alpha1().CertificateSigningRequests()
	ctx := context.Background()

	t.Run("the approver sees what is signed", func(t *testing.T) {
		benign := string(fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "benign-intern"}))
		evil := string(fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:kube-controller-manager"}))
		trimmed := strings.TrimSuffix(benign, "\n")
		last := strings.LastIndex(trimmed, "\n")
		broken := trimmed[:last+1] + " " + trimmed[last+1:] + "\n" // sed '$ s/^/ /'
		csr := requestFor(t, "two-faced", "rekey.io/kube-apiserver-client", fixtures.CSROptions{}, certv1alpha1.UsageClientAuth)
		csr.Spec.Request = []byte(broken + evil)
		_, err := csrs.Create(ctx, csr, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.request") {
			t.Fatalf("want 422 naming spec.request, got %v", err)
		}
		if _, err := csrs.Get(ctx, "two-faced", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the request was stored: %v", err)
		}
	})

	t.Run("CA status is the controllers' alone and does not choose the key", func(t *testing.T) {
		createCAAndSigner(t, client, "team", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "team CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256})
		teamCA := caOf(t, client, "team")
		cluster, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, "rekey.io-kube-apiserver-client", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		team, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, "team", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The attack: team's status names the cluster client CA's key, by
		// update and by merge patch, as system:masters.
		team.Status.Current = cluster.Status.Current.DeepCopy()
		_, err = client.RotationV1alpha1().CertificateAuthorities().UpdateStatus(ctx, team, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "written only by rekey-apiserver's own controllers") {
			t.Fatalf("status update: want 422 saying only the controllers write it, got %v", err)
		}
		patch := fmt.Sprintf(`{"status":{"current":{"keyID":%q}}}`, cluster.Status.Current.KeyID)
		_, err = client.RotationV1alpha1().CertificateAuthorities().Patch(ctx, "team", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		if !apierrors.IsInvalid(err) {
			t.Fatalf("status patch: want 422, got %v", err)
		}
		_, err = client.CertificatesV1alpha1().Signers().Patch(ctx, "example.com:team", types.MergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Forged","message":"x","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`), metav1.PatchOptions{}, "status")
		if !apierrors.IsInvalid(err) {
			t.Fatalf("Signer status patch: want 422, got %v", err)
		}
		createAndApprove(t, client, requestFor(t, "team-leaf", "example.com/team", fixtures.CSROptions{CommonName: "x"}, certv1alpha1.UsageClientAuth))
		leaf := waitForCertificate(t, client, "team-leaf")
		verifyChain(t, leaf, teamCA, x509.ExtKeyUsageClientAuth)
	})

	t.Run("no system:masters client certificate from any signer", func(t *testing.T) {
		for name, usages := range map[string][]certv1alpha1.KeyUsage{
			"masters-client": {certv1alpha1.UsageClientAuth},
			"masters-no-eku": {certv1alpha1.UsageDigitalSignature},
		} {
			csr := requestFor(t, name, "example.com/team", fixtures.CSROptions{CommonName: "root", Organizations: []string{"system:masters"}}, usages...)
			_, err := csrs.Create(ctx, csr, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:masters") {
				t.Fatalf("%s: want 403 naming system:masters, got %v", name, err)
			}
		}
	})

	t.Run("weak keys fail with their own reason", func(t *testing.T) {
		key, err := rsa.GenerateKey(rand.Reader, 1024)
		if err != nil {
			t.Fatal(err)
		}
		csr := requestFor(t, "weak", "rekey.io/kube-apiserver-client", fixtures.CSROptions{}, certv1alpha1.UsageClientAuth)
		csr.Spec.Request = fixtures.CSRPEMWithKey(t, key, fixtures.CSROptions{CommonName: "weak"})
		createAndApprove(t, client, csr)
		got := waitFor(t, client, "weak", signTimeout, func(c *certv1alpha1.CertificateSigningRequest) bool {
			return hasCondition(c, certv1alpha1.CertificateFailed)
		})
		if failed := condition(got, certv1alpha1.CertificateFailed); failed.Reason != "WeakPublicKey" || !strings.Contains(failed.Message, "1024") || issued(got) {
			t.Fatalf("Failed = %+v, certificate %d bytes", failed, len(got.Status.Certificate))
		}
	})

	t.Run("kubelet-serving certifies a node in its own name only", func(t *testing.T) {
		node, _ := srv.ClientFor(t, "system:node:n1", "system:nodes")
		serving := []certv1alpha1.KeyUsage{certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageServerAuth}
		for name, tc := range map[string]struct {
			o    fixtures.CSROptions
			rule string
		}{
			"serving-ok":       {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, DNSNames: []string{"n1.example.com"}}},
			"serving-other":    {o: fixtures.CSROptions{CommonName: "system:node:n2", Organizations: []string{"system:nodes"}, DNSNames: []string{"n2.example.com"}}, rule: "commonNameIsRequester"},
			"serving-wildcard": {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, DNSNames: []string{"*.example.com"}}, rule: "allowWildcardDNSNames"},
		} {
			created, err := node.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, requestFor(t, name, "rekey.io/kubelet-serving", tc.o, serving...), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			addCondition(created, certv1alpha1.CertificateApproved, "Test")
			if _, err := csrs.UpdateApproval(ctx, name, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			got := waitFor(t, client, name, signTimeout, func(c *certv1alpha1.CertificateSigningRequest) bool {
				return issued(c) || hasCondition(c, certv1alpha1.CertificateFailed)
			})
			if tc.rule == "" && !issued(got) {
				t.Errorf("%s: not issued: %+v", name, got.Status.Conditions)
			}
			if tc.rule != "" && (issued(got) || !strings.Contains(condition(got, certv1alpha1.CertificateFailed).Message, tc.rule)) {
				t.Errorf("%s: want Failed naming %s, got %+v", name, tc.rule, got.Status.Conditions)
			}
		}
	})

	t.Run("condition times are the server's and conditions are bounded", func(t *testing.T) {
		created, err := csrs.Create(ctx, newCSR(t, "dated", "example.org/external"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		epoch := metav1.NewTime(time.Unix(0, 0))
		created.Status.Conditions = []certv1alpha1.CertificateSigningRequestCondition{{Type: certv1alpha1.CertificateFailed, Status: metav1.ConditionTrue,
			Reason: "External", LastUpdateTime: epoch, LastTransitionTime: epoch}}
		updated, err := csrs.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := updated.Status.Conditions[0]; time.Since(c.LastUpdateTime.Time) > time.Hour || time.Since(c.LastTransitionTime.Time) > time.Hour {
			t.Fatalf("stored condition times are the writer's: %+v", c)
		}

		many := updated.DeepCopy()
		for i := 0; i < 16; i++ {
			many.Status.Conditions = append(many.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
				Type: certv1alpha1.RequestConditionType(fmt.Sprintf("example.org/C%d", i)), Status: metav1.ConditionTrue, Message: strings.Repeat("m", 32*1024)})
		}
		_, err = csrs.UpdateStatus(ctx, many, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.conditions") {
			t.Fatalf("17 conditions: want 422 naming status.conditions, got %v", err)
		}
		lookalike := updated.DeepCopy()
		lookalike.Status.Conditions = append(lookalike.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{Type: "Approved\u200b", Status: metav1.ConditionTrue})
		_, err = csrs.UpdateStatus(ctx, lookalike, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.conditions[1].type") {
			t.Fatalf("look-alike type: want 422 naming status.conditions[1].type, got %v", err)
		}
	})

	t.Run("approval changes no metadata", func(t *testing.T) {
		created, err := csrs.Create(ctx, newCSR(t, "labelled", "example.org/external"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Labels = map[string]string{"approved-by": "mallory"}
		created.Finalizers = []string{"example.org/keep-forever"}
		addCondition(created, certv1alpha1.CertificateApproved, "Test")
		approved, err := csrs.UpdateApproval(ctx, "labelled", created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(approved.Labels) != 0 || len(approved.Finalizers) != 0 || !hasCondition(approved, certv1alpha1.CertificateApproved) {
			t.Fatalf("labels %v, finalizers %v, conditions %+v", approved.Labels, approved.Finalizers, approved.Status.Conditions)
		}
	})

	t.Run("embedded etcd has no unauthenticated listener", func(t *testing.T) {
		sock := filepath.Join(srv.DataDir, "etcd.sock")
		st, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, want a socket with 0600", sock, st.Mode())
		}
		ports := listeningTCPPorts(t, srv.Pid())
		// The API port, and etcd's peer port, which demands a client
		// certificate (pkg/standalone tests that).
		if len(ports) != 2 || !contains(ports, srv.Port) {
			t.Fatalf("rekey-apiserver listens on TCP ports %v, want only its secure port %d and etcd's peer port", ports, srv.Port)
		}
	})
}

func condition(csr *certv1alpha1.CertificateSigningRequest, typ certv1alpha1.RequestConditionType) certv1alpha1.CertificateSigningRequestCondition {
	for _, c := range csr.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return certv1alpha1.CertificateSigningRequestCondition{}
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// listeningTCPPorts returns the TCP ports a process listens on, from
// /proc/net/tcp{,6} and the process's file descriptors.
func listeningTCPPorts(t *testing.T, pid int) []int {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		scanner := bufio.NewScanner(f)
		scanner.Scan() // header
		for scanner.Scan() {
			fields := strings.Fields(scanner.Text())
			// local_address is field 1 (hex ip:port), st is field 3 (0A =
			// LISTEN), inode is field 9.
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, portHex, _ := strings.Cut(fields[1], ":")
			port, err := strconv.ParseUint(portHex, 16, 16)
			if err == nil && !contains(ports, int(port)) {
				ports = append(ports, int(port))
			}
		}
		_ = f.Close()
	}
	return ports
}
