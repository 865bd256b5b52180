package integration

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	clientv3 "go.etcd.io/etcd/client/v3"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/issuance"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// issuanceRecords reads the issuance records of a request from the
// embedded etcd.
func issuanceRecords(t *testing.T, srv *framework.Standalone, csrUID string) []issuance.Record {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + filepath.Join(srv.DataDir, "etcd.sock")}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	resp, err := client.Get(context.Background(), "/rekey.io-private/issued/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []issuance.Record
	for _, kv := range resp.Kvs {
		var rec issuance.Record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			t.Fatal(err)
		}
		if csrUID == "" || rec.CSRUID == csrUID {
			out = append(out, rec)
		}
	}
	return out
}

// metricValue is the value of the /metrics line that starts with prefix,
// 0 when there is none.
func metricValue(t *testing.T, client clientset.Interface, prefix string) float64 {
	t.Helper()
	v, err := readMetricValue(context.Background(), client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readMetricValue is metricValue for a wait's condition: it returns the
// error.
func readMetricValue(ctx context.Context, client clientset.Interface, prefix string) (float64, error) {
	line, err := readMetric(ctx, client, prefix)
	if err != nil || line == "" {
		return 0, err
	}
	v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
	if err != nil {
		return 0, fmt.Errorf("metric line %q: %w", line, err)
	}
	return v, nil
}

// metric returns the line of /metrics that starts with prefix, or "".
func metric(t *testing.T, client clientset.Interface, prefix string) string {
	t.Helper()
	line, err := readMetric(context.Background(), client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

func readMetric(ctx context.Context, client clientset.Interface, prefix string) (string, error) {
	data, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("reading /metrics: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line, nil
		}
	}
	return "", nil
}

// waitUntilIssuedInTheWrite waits until this server signs requests for the
// signer in the approval write: on a fresh server, the built-in Signers and
// their CAs' keys appear in its issuer's cache a moment after start, and
// approvals before that are signed by the signer controller instead.
func waitUntilIssuedInTheWrite(t *testing.T, client clientset.Interface, signerName string, usages ...certv1alpha1.KeyUsage) {
	t.Helper()
	i := 0
	framework.Eventually(t, 30*time.Second, signerName+": an approval signed in the write", func(ctx context.Context) error {
		i++
		created, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx,
			requestFor(t, fmt.Sprintf("probe-%d", i), signerName, fixtures.CSROptions{CommonName: "probe"}, usages...), metav1.CreateOptions{})
		if err != nil {
			return framework.Permanent(err)
		}
		approved, err := approve(ctx, client, created)
		if err != nil {
			return framework.Permanent(err)
		}
		if len(approved.Status.Certificate) == 0 {
			return fmt.Errorf("probe %d approved without a certificate", i)
		}
		return nil
	})
}

func approve(ctx context.Context, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest) (*certv1alpha1.CertificateSigningRequest, error) {
	csr = csr.DeepCopy()
	addCondition(csr, certv1alpha1.CertificateApproved, "Test")
	return client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
}

// TestApprovalResponseCarriesTheCertificate: the approval is the write that
// signs. Its response has the certificate, chained to the CA; watchers see
// one event; the issuance record is there; the approver's condition is
// kept; rekey-signer owns status.certificate.
func TestApprovalResponseCarriesTheCertificate(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	ctx := context.Background()
	ca := caOf(t, client, "rekey.io-kube-apiserver-client")
	waitUntilIssuedInTheWrite(t, client, "rekey.io/kube-apiserver-client", certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth)
	const issuedMetric = `rekey_signer_requests_total{path="approval",result="issued",signer_name="rekey.io/kube-apiserver-client"}`
	const latencyMetric = `rekey_signer_approval_to_certificate_seconds_count{signer_name="rekey.io/kube-apiserver-client"}`
	issuedBefore, latencyBefore := metricValue(t, client, issuedMetric), metricValue(t, client, latencyMetric)
	created, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx,
		requestFor(t, "one-write", "rekey.io/kube-apiserver-client", fixtures.CSROptions{CommonName: "alice"}, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := client.CertificatesV1alpha1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{
		ResourceVersion: created.ResourceVersion, FieldSelector: fields.OneTermEqualSelector("metadata.name", "one-write").String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	approved, err := approve(ctx, client, created)
	if err != nil {
		t.Fatal(err)
	}
	if len(approved.Status.Certificate) == 0 {
		t.Fatalf("the approval response has no certificate: %+v", approved.Status)
	}
	certs, err := validation.ParseCertificateChain(approved.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	verifyChain(t, certs[0], ca, x509.ExtKeyUsageClientAuth)
	cond := approved.Status.Conditions[0]
	if diff := cmp.Diff(certv1alpha1.CertificateSigningRequestCondition{Type: certv1alpha1.CertificateApproved, Reason: "Test", Message: "by the integration test"},
		certv1alpha1.CertificateSigningRequestCondition{Type: cond.Type, Reason: cond.Reason, Message: cond.Message}); diff != "" {
		t.Errorf("the approver's condition was not kept (-want +got):\n%s", diff)
	}

	// One write: the first event after the create is the issued request,
	// at the approval's resource version, and none follows it.
	var first watch.Event
	framework.Eventually(t, 10*time.Second, "a watch event", func(context.Context) error {
		select {
		case first = <-w.ResultChan():
			return nil
		default:
			return errors.New("no event yet")
		}
	})
	if got, ok := first.Object.(*certv1alpha1.CertificateSigningRequest); !ok || first.Type != watch.Modified || got.ResourceVersion != approved.ResourceVersion || len(got.Status.Certificate) == 0 {
		t.Fatalf("first event after the create: %s %+v", first.Type, first.Object)
	}
	framework.Stays(t, time.Second, "no second write after the approval", func(context.Context) error {
		select {
		case ev := <-w.ResultChan():
			return fmt.Errorf("a second write followed the approval: %s", ev.Type)
		default:
			return nil
		}
	})

	records := issuanceRecords(t, srv, string(created.UID))
	if len(records) != 1 || records[0].Serial != certs[0].SerialNumber.Text(16) {
		t.Fatalf("issuance records %+v, want the one issued serial %s", records, certs[0].SerialNumber.Text(16))
	}
	owners := map[string]string{}
	for _, e := range approved.ManagedFields {
		owners[e.Manager] += e.FieldsV1.GetRawString()
	}
	if !strings.Contains(owners["rekey-signer"], "f:certificate") {
		t.Errorf("status.certificate not owned by rekey-signer: %v", owners)
	}
	if d := metricValue(t, client, issuedMetric) - issuedBefore; d != 1 {
		t.Errorf("signing metric (path approval) moved by %v, want 1", d)
	}
	if d := metricValue(t, client, latencyMetric) - latencyBefore; d != 1 {
		t.Errorf("approval-to-certificate metric moved by %v, want 1", d)
	}

	// The controllers watch by state; so can anyone.
	list, err := client.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "state=Issued"})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, item := range list.Items {
		listed = listed || item.Name == "one-write"
		if len(item.Status.Certificate) == 0 {
			t.Errorf("state=Issued listed %s without a certificate", item.Name)
		}
	}
	if !listed {
		t.Error("state=Issued does not list the issued request")
	}
	if pending, err := client.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "state=Pending"}); err != nil || len(pending.Items) != 0 {
		t.Errorf("state=Pending: %v, %d items, want none", err, len(pending.Items))
	}
	if _, err := client.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Issued"}); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "state") {
		t.Errorf("unknown field selector: %v", err)
	}
}

// TestApprovalOfAViolationFailsInTheSameWrite: the rule is in the approval
// response; nothing is signed.
func TestApprovalOfAViolationFailsInTheSameWrite(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	ctx := context.Background()
	waitUntilIssuedInTheWrite(t, client, "rekey.io/kube-apiserver-client", certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth)
	created, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx,
		requestFor(t, "server-usage", "rekey.io/kube-apiserver-client", fixtures.CSROptions{CommonName: "alice"}, certv1alpha1.UsageServerAuth), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approved, err := approve(ctx, client, created)
	if err != nil {
		t.Fatal(err)
	}
	if !hasCondition(approved, certv1alpha1.CertificateFailed) || len(approved.Status.Certificate) != 0 {
		t.Fatalf("approval response: %+v", approved.Status)
	}
	for _, c := range approved.Status.Conditions {
		if c.Type == certv1alpha1.CertificateFailed && (c.Reason != "SignerPolicyViolation" || !strings.Contains(c.Message, "server auth")) {
			t.Errorf("Failed condition does not name the rule: %+v", c)
		}
	}
	if records := issuanceRecords(t, srv, string(created.UID)); len(records) != 0 {
		t.Fatalf("records for a refused request: %+v", records)
	}
}

// TestUnauthorizedApproverSignsNothing: 403, no record, no signing.
func TestUnauthorizedApproverSignsNothing(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	ctx := context.Background()
	bob, _ := srv.ClientFor(t, "bob", "devs")
	created, err := bob.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx,
		requestFor(t, "bobs", "rekey.io/kube-apiserver-client", fixtures.CSROptions{CommonName: "bob"}, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approve(ctx, bob, created); !apierrors.IsForbidden(err) {
		t.Fatalf("bob approving: want 403, got %v", err)
	}
	got, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "bobs", metav1.GetOptions{})
	if err != nil || len(got.Status.Conditions) != 0 || len(got.Status.Certificate) != 0 {
		t.Fatalf("after a refused approval: %v %+v", err, got.Status)
	}
	if records := issuanceRecords(t, srv, ""); len(records) != 0 {
		t.Fatalf("issuance records after a refused approval: %+v", records)
	}
	if line := metric(t, srv.Client, `rekey_signer_requests_total{`); line != "" {
		t.Fatalf("signing metric moved: %q", line)
	}
}

// TestConcurrentApprovalsStoreOneCertificate: eight approvers at once, one
// certificate stored, and it is one of the recorded ones.
func TestConcurrentApprovalsStoreOneCertificate(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	client := srv.Client
	ctx := context.Background()
	waitUntilIssuedInTheWrite(t, client, "rekey.io/kube-apiserver-client", certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth)
	created, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx,
		requestFor(t, "contended", "rekey.io/kube-apiserver-client", fixtures.CSROptions{CommonName: "alice"}, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const approvers = 8
	unconditional := created.DeepCopy()
	unconditional.ResourceVersion = ""
	var wg sync.WaitGroup
	responses := make([]*certv1alpha1.CertificateSigningRequest, approvers)
	errs := make([]error, approvers)
	for i := 0; i < approvers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			responses[i], errs[i] = approve(ctx, client, unconditional)
		}()
	}
	wg.Wait()
	stored, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "contended", metav1.GetOptions{})
	if err != nil || len(stored.Status.Certificate) == 0 {
		t.Fatalf("stored: %v %+v", err, stored)
	}
	for i := range responses {
		if errs[i] != nil {
			t.Fatalf("approval %d: %v", i, errs[i])
		}
		if string(responses[i].Status.Certificate) != string(stored.Status.Certificate) {
			t.Fatalf("approval %d answered with a certificate that is not the stored one", i)
		}
	}
	certs, err := validation.ParseCertificateChain(stored.Status.Certificate)
	if err != nil || len(certs) != 1 {
		t.Fatalf("stored certificate: %v, %d certificates", err, len(certs))
	}
	records := issuanceRecords(t, srv, string(created.UID))
	found := false
	for _, r := range records {
		found = found || r.Serial == certs[0].SerialNumber.Text(16)
	}
	if !found || len(records) > approvers {
		t.Fatalf("%d records for %d approvals; stored serial recorded: %v", len(records), approvers, found)
	}
	t.Logf("%d approvals, %d signatures, one certificate stored", approvers, len(records))
}

// TestUnreachableKeyStoreLeavesTheRequestApproved: a CA whose key this
// replica cannot read at approval time (a File CA whose files are not
// there yet) gets the request stored Approved without a certificate; the
// signer controller issues it once the key is there.
func TestUnreachableKeyStoreLeavesTheRequestApproved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := framework.StartStandalone(t, t.TempDir(), "--file-keystore-dir="+dir)
	client := srv.Client
	ctx := context.Background()
	createCAAndSigner(t, client, "later", rotationv1alpha1.CertificateAuthoritySpec{
		KeyAlgorithm: rotationv1alpha1.ECDSAP256,
		KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreFile, File: &rotationv1alpha1.FileKeyStore{
			CertFile: filepath.Join(dir, "ca.crt"), KeyFile: filepath.Join(dir, "ca.key")}},
	})
	created, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx,
		requestFor(t, "waits", "example.com/later", fixtures.CSROptions{CommonName: "x"}, certv1alpha1.UsageClientAuth), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approved, err := approve(ctx, client, created)
	if err != nil {
		t.Fatal(err)
	}
	if !hasCondition(approved, certv1alpha1.CertificateApproved) || len(approved.Status.Certificate) != 0 || hasCondition(approved, certv1alpha1.CertificateFailed) {
		t.Fatalf("approval without a reachable key: %+v", approved.Status)
	}
	ca := writeCA(t, dir, "later")
	leaf := waitForCertificate(t, client, "waits")
	verifyChain(t, leaf, ca.Cert, x509.ExtKeyUsageClientAuth)
	if line := metric(t, client, `rekey_signer_requests_total{path="controller",result="issued",signer_name="example.com/later"}`); !strings.HasSuffix(line, " 1") {
		t.Errorf("not issued by the signer controller: %q", line)
	}
}
