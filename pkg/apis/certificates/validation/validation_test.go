package validation

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/test/fixtures"
)

func validCSR(t *testing.T) *certificates.CertificateSigningRequest {
	return &certificates.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req", ResourceVersion: "1"},
		Spec: certificates.CertificateSigningRequestSpec{
			Request:    fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"}),
			SignerName: "example.com/signer",
			Usages:     []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth},
		},
	}
}

// requireOneError checks that errs names exactly the expected field and
// contains the expected text.
func requireError(t *testing.T, errs field.ErrorList, fieldPath, contains string) {
	t.Helper()
	if len(errs) == 0 {
		t.Fatalf("expected an error on %s, got none", fieldPath)
	}
	for _, e := range errs {
		if e.Field == fieldPath && strings.Contains(e.Error(), contains) {
			return
		}
	}
	t.Fatalf("expected an error on %s containing %q, got %v", fieldPath, contains, errs)
}

func TestValidateCreateAcceptsValidRequest(t *testing.T) {
	csr := validCSR(t)
	csr.Spec.ExpirationSeconds = ptr.To[int32](600)
	if errs := ValidateCertificateSigningRequestCreate(csr); len(errs) != 0 {
		t.Fatalf("valid request refused: %v", errs)
	}
}

func TestValidateSignerName(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := map[string]struct {
		name    string
		wantErr string // empty means valid
	}{
		"built-in":              {name: "rekey.io/kube-apiserver-client"},
		"dotted path":           {name: "example.com/a.b-c.d"},
		"long but valid":        {name: long + "." + long + ".com/" + strings.Repeat("b", 200)},
		"empty":                 {name: "", wantErr: "Required"},
		"no slash":              {name: "example.com", wantErr: "exactly one '/'"},
		"two slashes":           {name: "example.com/a/b", wantErr: "exactly one '/'"},
		"single label domain":   {name: "example/signer", wantErr: "at least two segments"},
		"uppercase domain":      {name: "Example.com/signer", wantErr: "domain label"},
		"empty path":            {name: "example.com/", wantErr: "must not be empty"},
		"invalid path":          {name: "example.com/Bad_Path", wantErr: "path segment"},
		"domain label too long": {name: strings.Repeat("a", 64) + ".com/s", wantErr: "domain label"},
		"domain too long":       {name: strings.Repeat(long+".", 4) + "com/s", wantErr: "Too long"},
		"path too long":         {name: "example.com/" + strings.Repeat("a.", 200) + "a", wantErr: "Too long"},
		"leading dash in path":  {name: "example.com/-x", wantErr: "path segment"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := ValidateSignerName(field.NewPath("spec", "signerName"), tc.name)
			if tc.wantErr == "" {
				if len(errs) != 0 {
					t.Fatalf("refused %q: %v", tc.name, errs)
				}
				return
			}
			requireError(t, errs, "spec.signerName", tc.wantErr)
		})
	}
}

func TestValidateRequest(t *testing.T) {
	good := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "alice"})
	tests := map[string]struct {
		request []byte
		wantErr string
	}{
		"missing":          {request: nil, wantErr: "Required"},
		"not PEM":          {request: []byte("hello, world"), wantErr: "must start with a PEM block"},
		"wrong PEM type":   {request: fixtures.SelfSignedCertPEM(t, "ca"), wantErr: `got "CERTIFICATE"`},
		"PEM with headers": {request: withHeader(t, good), wantErr: "must not have headers"},
		"two blocks":       {request: append(append([]byte(nil), good...), good...), wantErr: `must hold one PEM block of type "CERTIFICATE REQUEST", found 2 blocks (CERTIFICATE REQUEST, CERTIFICATE REQUEST)`},
		"bad evidence":     {request: attested(t, good, []byte(`{"version":"v0"}`)), wantErr: "attestation evidence: attestation data version"},
		"garbage DER":      {request: []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), wantErr: "not a valid PKCS#10"},
		"bad signature":    {request: fixtures.CorruptSignature(t, good), wantErr: "signature does not verify"},
		"oversized":        {request: bytes.Repeat([]byte("A"), MaxRequestBytes+1), wantErr: "Too long"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			csr := validCSR(t)
			csr.Spec.Request = tc.request
			requireError(t, ValidateCertificateSigningRequestCreate(csr), "spec.request", tc.wantErr)
		})
	}
	t.Run("attestation blocks are accepted", func(t *testing.T) {
		csr := validCSR(t)
		csr.Spec.Request = attested(t, good, []byte(`{"version":"rekey.io/tpm/v1","pcrBank":"sha256"}`))
		if errs := ValidateCertificateSigningRequestCreate(csr); len(errs) > 0 {
			t.Fatal(errs)
		}
		if _, err := ParseStoredCSR(csr.Spec.Request); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("trailing whitespace is fine", func(t *testing.T) {
		csr := validCSR(t)
		csr.Spec.Request = append(csr.Spec.Request, []byte("\n\n  \n")...)
		if errs := ValidateCertificateSigningRequestCreate(csr); len(errs) != 0 {
			t.Fatalf("refused: %v", errs)
		}
	})
}

func withHeader(t *testing.T, p []byte) []byte {
	t.Helper()
	s := string(p)
	return []byte(strings.Replace(s, "-----BEGIN CERTIFICATE REQUEST-----\n", "-----BEGIN CERTIFICATE REQUEST-----\nProc-Type: 4,ENCRYPTED\n\n", 1))
}

func TestValidateExpirationSeconds(t *testing.T) {
	for _, tc := range []struct {
		seconds int32
		valid   bool
	}{{599, false}, {0, false}, {-1, false}, {600, true}, {86400 * 365, true}} {
		csr := validCSR(t)
		csr.Spec.ExpirationSeconds = ptr.To(tc.seconds)
		errs := ValidateCertificateSigningRequestCreate(csr)
		if tc.valid && len(errs) != 0 {
			t.Errorf("%d refused: %v", tc.seconds, errs)
		}
		if !tc.valid {
			requireError(t, errs, "spec.expirationSeconds", "600 seconds")
		}
	}
}

func TestValidateUsages(t *testing.T) {
	tests := map[string]struct {
		usages    []certificates.KeyUsage
		wantField string
		wantErr   string
	}{
		"missing":   {usages: nil, wantField: "spec.usages", wantErr: "usages must be provided"},
		"unknown":   {usages: []certificates.KeyUsage{"client auth", "teleport"}, wantField: "spec.usages[1]", wantErr: "Unsupported value"},
		"duplicate": {usages: []certificates.KeyUsage{"client auth", "client auth"}, wantField: "spec.usages[1]", wantErr: "Duplicate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			csr := validCSR(t)
			csr.Spec.Usages = tc.usages
			requireError(t, ValidateCertificateSigningRequestCreate(csr), tc.wantField, tc.wantErr)
		})
	}
	t.Run("every known usage", func(t *testing.T) {
		csr := validCSR(t)
		csr.Spec.Usages = nil
		for u := range KnownUsages {
			csr.Spec.Usages = append(csr.Spec.Usages, u)
		}
		if errs := ValidateCertificateSigningRequestCreate(csr); len(errs) != 0 {
			t.Fatalf("refused: %v", errs)
		}
	})
}

func cond(t certificates.RequestConditionType, status metav1.ConditionStatus) certificates.CertificateSigningRequestCondition {
	return certificates.CertificateSigningRequestCondition{Type: t, Status: status, Reason: "Test"}
}

func TestValidateConditions(t *testing.T) {
	tests := map[string]struct {
		conds     []certificates.CertificateSigningRequestCondition
		wantField string
		wantErr   string
	}{
		"approved false":      {conds: []certificates.CertificateSigningRequestCondition{cond("Approved", "False")}, wantField: "status.conditions[0].status", wantErr: "Unsupported value"},
		"denied unknown":      {conds: []certificates.CertificateSigningRequestCondition{cond("Denied", "Unknown")}, wantField: "status.conditions[0].status", wantErr: "Unsupported value"},
		"failed false":        {conds: []certificates.CertificateSigningRequestCondition{cond("Failed", "False")}, wantField: "status.conditions[0].status", wantErr: "Unsupported value"},
		"approved and denied": {conds: []certificates.CertificateSigningRequestCondition{cond("Approved", "True"), cond("Denied", "True")}, wantField: "status.conditions", wantErr: "mutually exclusive"},
		"duplicate":           {conds: []certificates.CertificateSigningRequestCondition{cond("Approved", "True"), cond("Approved", "True")}, wantField: "status.conditions[1].type", wantErr: "Duplicate"},
		"missing type":        {conds: []certificates.CertificateSigningRequestCondition{cond("", "True")}, wantField: "status.conditions[0].type", wantErr: "Required"},
		"custom bad status":   {conds: []certificates.CertificateSigningRequestCondition{cond("Custom", "Maybe")}, wantField: "status.conditions[0].status", wantErr: "Unsupported value"},
		"custom no status":    {conds: []certificates.CertificateSigningRequestCondition{cond("Custom", "")}, wantField: "status.conditions[0].status", wantErr: "Required"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			old := validCSR(t)
			csr := old.DeepCopy()
			csr.Status.Conditions = tc.conds
			requireError(t, ValidateCertificateSigningRequestApprovalUpdate(csr, old), tc.wantField, tc.wantErr)
		})
	}
	t.Run("custom condition False is fine", func(t *testing.T) {
		old := validCSR(t)
		csr := old.DeepCopy()
		csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{cond("Custom", "False")}
		if errs := ValidateCertificateSigningRequestStatusUpdate(csr, old); len(errs) != 0 {
			t.Fatalf("refused: %v", errs)
		}
	})
}

func TestApprovalOnlyThroughApprovalSubresource(t *testing.T) {
	old := validCSR(t)
	for _, typ := range []certificates.RequestConditionType{"Approved", "Denied"} {
		csr := old.DeepCopy()
		csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{cond(typ, "True")}
		if errs := ValidateCertificateSigningRequestApprovalUpdate(csr, old); len(errs) != 0 {
			t.Errorf("%s through /approval refused: %v", typ, errs)
		}
		requireError(t, ValidateCertificateSigningRequestStatusUpdate(csr, old), "status.conditions", "only be added through the /approval subresource")
	}
	// Failed may be added through either.
	csr := old.DeepCopy()
	csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{cond("Failed", "True")}
	if errs := ValidateCertificateSigningRequestStatusUpdate(csr, old); len(errs) != 0 {
		t.Errorf("Failed through /status refused: %v", errs)
	}
	if errs := ValidateCertificateSigningRequestApprovalUpdate(csr, old); len(errs) != 0 {
		t.Errorf("Failed through /approval refused: %v", errs)
	}
}

func TestConditionsCannotBeRemoved(t *testing.T) {
	for _, typ := range []certificates.RequestConditionType{"Approved", "Denied", "Failed"} {
		old := validCSR(t)
		old.Status.Conditions = []certificates.CertificateSigningRequestCondition{cond(typ, "True")}
		csr := old.DeepCopy()
		csr.Status.Conditions = nil
		requireError(t, ValidateCertificateSigningRequestApprovalUpdate(csr, old), "status.conditions", "may not remove")
		requireError(t, ValidateCertificateSigningRequestStatusUpdate(csr, old), "status.conditions", "may not remove")
	}
	// Approved cannot turn into Denied.
	old := validCSR(t)
	old.Status.Conditions = []certificates.CertificateSigningRequestCondition{cond("Approved", "True")}
	csr := old.DeepCopy()
	csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{cond("Denied", "True")}
	requireError(t, ValidateCertificateSigningRequestApprovalUpdate(csr, old), "status.conditions", `may not remove a condition of type "Approved"`)
}

func approved(t *testing.T) *certificates.CertificateSigningRequest {
	csr := validCSR(t)
	csr.Status.Conditions = []certificates.CertificateSigningRequestCondition{cond("Approved", "True")}
	return csr
}

func TestValidateCertificateUpdate(t *testing.T) {
	cert := fixtures.SelfSignedCertPEM(t, "leaf")
	intermediate := fixtures.SelfSignedCertPEM(t, "intermediate")

	t.Run("set once on approved", func(t *testing.T) {
		old := approved(t)
		csr := old.DeepCopy()
		csr.Status.Certificate = append(append([]byte("\n"), cert...), intermediate...)
		if errs := ValidateCertificateSigningRequestStatusUpdate(csr, old); len(errs) != 0 {
			t.Fatalf("refused: %v", errs)
		}
	})
	t.Run("not on pending", func(t *testing.T) {
		old := validCSR(t)
		csr := old.DeepCopy()
		csr.Status.Certificate = cert
		requireError(t, ValidateCertificateSigningRequestStatusUpdate(csr, old), "status.certificate", "only be set on an Approved request")
	})
	t.Run("not on failed", func(t *testing.T) {
		old := approved(t)
		old.Status.Conditions = append(old.Status.Conditions, cond("Failed", "True"))
		csr := old.DeepCopy()
		csr.Status.Certificate = cert
		requireError(t, ValidateCertificateSigningRequestStatusUpdate(csr, old), "status.certificate", "Failed")
	})
	t.Run("not changed", func(t *testing.T) {
		old := approved(t)
		old.Status.Certificate = cert
		csr := old.DeepCopy()
		csr.Status.Certificate = intermediate
		requireError(t, ValidateCertificateSigningRequestStatusUpdate(csr, old), "status.certificate", "may not modify or remove")
	})
	t.Run("not removed", func(t *testing.T) {
		old := approved(t)
		old.Status.Certificate = cert
		csr := old.DeepCopy()
		csr.Status.Certificate = nil
		requireError(t, ValidateCertificateSigningRequestStatusUpdate(csr, old), "status.certificate", "may not modify or remove")
	})
	t.Run("not through approval", func(t *testing.T) {
		old := approved(t)
		csr := old.DeepCopy()
		csr.Status.Certificate = cert
		requireError(t, ValidateCertificateSigningRequestApprovalUpdate(csr, old), "status.certificate", "/status subresource")
	})
	bad := map[string]struct {
		data    []byte
		wantErr string
	}{
		"no PEM":          {data: []byte("nope"), wantErr: "must start with a PEM block"},
		"only whitespace": {data: []byte(" \n"), wantErr: "at least one PEM block"},
		"wrong type":      {data: fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "x"}), wantErr: `type "CERTIFICATE REQUEST"`},
		"garbage":         {data: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), wantErr: "not a valid X.509"},
		"too large":       {data: bytes.Repeat([]byte("A"), MaxCertificateBytes+1), wantErr: "Too long"},
		"too many blocks": {data: bytes.Repeat(cert, MaxCertificateBlocks+1), wantErr: "more than"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			old := approved(t)
			csr := old.DeepCopy()
			csr.Status.Certificate = tc.data
			requireError(t, ValidateCertificateSigningRequestStatusUpdate(csr, old), "status.certificate", tc.wantErr)
		})
	}
}

func TestValidateName(t *testing.T) {
	csr := validCSR(t)
	csr.Name = "a/b"
	requireError(t, ValidateCertificateSigningRequestCreate(csr), "metadata.name", "may not contain '/'")
	csr.Name = ""
	requireError(t, ValidateCertificateSigningRequestCreate(csr), "metadata.name", "Required")
}

// TestRequestIsReadOneWay is the request that showed one subject to
// `openssl req` and another to the signer: a benign block whose END line is
// indented (so encoding/pem skips it), followed by a second request.
func TestRequestIsReadOneWay(t *testing.T) {
	benign := string(fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "benign-intern"}))
	evil := string(fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "system:kube-controller-manager"}))
	trimmed := strings.TrimSuffix(benign, "\n")
	last := strings.LastIndex(trimmed, "\n")
	broken := trimmed[:last+1] + " " + trimmed[last+1:] + "\n" // sed '$ s/^/ /'

	for name, request := range map[string]string{
		"broken block then another": broken + evil,
		"text before the block":     "Subject: CN=benign-intern\n" + evil,
		"two well-formed blocks":    benign + evil,
		"text after the block":      evil + "benign-intern\n",
	} {
		t.Run(name, func(t *testing.T) {
			csr := validCSR(t)
			csr.Spec.Request = []byte(request)
			requireError(t, ValidateCertificateSigningRequestCreate(csr), "spec.request", "")
			if _, err := ParseStoredCSR([]byte(request)); err == nil {
				t.Fatal("ParseStoredCSR accepted the request: the signer would read it differently from openssl")
			}
		})
	}
	csr := validCSR(t)
	csr.Spec.Request = []byte("\n  " + evil + "\n\n")
	if errs := ValidateCertificateSigningRequestCreate(csr); len(errs) != 0 {
		t.Fatalf("whitespace around the block must be accepted: %v", errs)
	}
}

func TestCertificateChainIsReadOneWay(t *testing.T) {
	cert := string(fixtures.SelfSignedCertPEM(t, "leaf"))
	for name, chain := range map[string]string{
		"text between": cert + "issuer:\n" + cert,
		"text before":  "leaf\n" + cert,
	} {
		if errs := ValidateCertificate(field.NewPath("status", "certificate"), []byte(chain)); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
	if errs := ValidateCertificate(field.NewPath("status", "certificate"), []byte(cert+"\n"+cert)); len(errs) != 0 {
		t.Fatalf("a chain of two blocks must be accepted: %v", errs)
	}
}

func TestConditionsAreBounded(t *testing.T) {
	path := field.NewPath("status", "conditions")
	many := make([]certificates.CertificateSigningRequestCondition, MaxConditions+1)
	for i := range many {
		many[i] = certificates.CertificateSigningRequestCondition{Type: certificates.RequestConditionType(fmt.Sprintf("example.com/c%d", i)), Status: metav1.ConditionTrue}
	}
	requireError(t, validateConditions(path, many), "status.conditions", "must have at most 16 items")

	for name, typ := range map[string]string{
		"zero-width space":   "Approved\u200b",
		"Cyrillic A":         "\u0410pproved",
		"space":              "Approved ",
		"too long":           strings.Repeat("a", 64),
		"slash without name": "example.com/",
	} {
		errs := validateConditions(path, []certificates.CertificateSigningRequestCondition{{Type: certificates.RequestConditionType(typ), Status: metav1.ConditionTrue}})
		requireError(t, errs, "status.conditions[0].type", "")
		_ = name
	}
	if errs := validateConditions(path, []certificates.CertificateSigningRequestCondition{{Type: "example.com/Checked", Status: metav1.ConditionTrue}}); len(errs) != 0 {
		t.Fatalf("a prefixed condition type was refused: %v", errs)
	}
}

func TestValidateNodeServingApproval(t *testing.T) {
	signer := func(mode certificates.ApprovalMode, ns *certificates.NodeServingApproval) *certificates.Signer {
		return &certificates.Signer{
			ObjectMeta: metav1.ObjectMeta{Name: "example.com:serving"},
			Spec: certificates.SignerSpec{SignerName: "example.com/serving", CertificateAuthorityRef: certificates.CertificateAuthorityReference{Name: "ca"},
				Policy:   certificates.SignerPolicy{MaxDuration: metav1.Duration{Duration: time.Hour}},
				Approval: certificates.SignerApproval{Mode: mode, NodeServing: ns}},
		}
	}
	tests := map[string]struct {
		signer   *certificates.Signer
		field    string
		contains string
	}{
		"mode alone":         {signer: signer(certificates.ApprovalNodeServing, nil)},
		"allow-lists":        {signer: signer(certificates.ApprovalNodeServing, &certificates.NodeServingApproval{AllowedDNSSuffixes: []string{".nodes.example.com", "example.org"}, AllowedIPPrefixes: []string{"10.0.0.0/8", "fd00::/8"}})},
		"with another mode":  {signer: signer(certificates.ApprovalManual, &certificates.NodeServingApproval{}), field: "spec.approval.nodeServing", contains: "NodeServing"},
		"bad DNS suffix":     {signer: signer(certificates.ApprovalNodeServing, &certificates.NodeServingApproval{AllowedDNSSuffixes: []string{"Bad_Suffix"}}), field: "spec.approval.nodeServing.allowedDNSSuffixes[0]", contains: "Invalid"},
		"bad prefix":         {signer: signer(certificates.ApprovalNodeServing, &certificates.NodeServingApproval{AllowedIPPrefixes: []string{"10.0.0.1"}}), field: "spec.approval.nodeServing.allowedIPPrefixes[0]", contains: "CIDR"},
		"host bits set":      {signer: signer(certificates.ApprovalNodeServing, &certificates.NodeServingApproval{AllowedIPPrefixes: []string{"10.0.0.1/8"}}), field: "spec.approval.nodeServing.allowedIPPrefixes[0]", contains: "host bits"},
		"unknown mode lists": {signer: signer("Whatever", nil), field: "spec.approval.mode", contains: "NodeServing"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := ValidateSigner(tc.signer)
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			requireError(t, errs, tc.field, tc.contains)
		})
	}
}

// attested appends the attestation provider and data blocks to a request.
func attested(t *testing.T, request, data []byte) []byte {
	t.Helper()
	out := append([]byte(nil), request...)
	out = append(out, pem.EncodeToMemory(&pem.Block{Type: "KUBELET AUTHENTICATOR ATTESTATION PROVIDER", Bytes: []byte("tpm")})...)
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "KUBELET AUTHENTICATOR ATTESTATION DATA", Bytes: data})...)
}

func TestAttestedConditionIsTheServers(t *testing.T) {
	old := validCSR(t)
	attestedCond := certificates.CertificateSigningRequestCondition{Type: certificates.CertificateAttested, Status: metav1.ConditionFalse, Reason: "NoChallenge", Message: "m"}
	for name, tc := range map[string]struct {
		old, new []certificates.CertificateSigningRequestCondition
	}{
		"added":   {new: []certificates.CertificateSigningRequestCondition{{Type: certificates.CertificateAttested, Status: metav1.ConditionTrue, Reason: "Attested"}}},
		"changed": {old: []certificates.CertificateSigningRequestCondition{attestedCond}, new: []certificates.CertificateSigningRequestCondition{{Type: certificates.CertificateAttested, Status: metav1.ConditionTrue, Reason: "NoChallenge", Message: "m"}}},
		"removed": {old: []certificates.CertificateSigningRequestCondition{attestedCond}},
	} {
		t.Run(name, func(t *testing.T) {
			before := old.DeepCopy()
			before.Status.Conditions = tc.old
			after := before.DeepCopy()
			after.Status.Conditions = tc.new
			requireError(t, ValidateCertificateSigningRequestStatusUpdate(after, before), "status.conditions", "Attested")
			requireError(t, ValidateCertificateSigningRequestApprovalUpdate(after, before), "status.conditions", "Attested")
			requireError(t, ValidateCertificateSigningRequestUpdate(after, before), "status.conditions", "Attested")
		})
	}
	kept := old.DeepCopy()
	kept.Status.Conditions = []certificates.CertificateSigningRequestCondition{attestedCond}
	if errs := ValidateCertificateSigningRequestStatusUpdate(kept.DeepCopy(), kept); len(errs) > 0 {
		t.Fatalf("an unchanged Attested condition: %v", errs)
	}
}
