package signerwarning

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/warning"

	"rekey.io/rekey/pkg/apis/certificates"
)

// signers is a Signer getter over some Signers, or failing with err.
type signers struct {
	byName map[string]*certificates.Signer
	err    error
}

func (s signers) Get(_ context.Context, name string) (*certificates.Signer, error) {
	if s.err != nil {
		return nil, s.err
	}
	if x, ok := s.byName[name]; ok {
		return x, nil
	}
	return nil, apierrors.NewNotFound(certificates.Resource("signers"), name)
}

// recorder collects the warnings a request's response would carry.
type recorder struct{ warnings []string }

func (r *recorder) AddWarning(_, text string) { r.warnings = append(r.warnings, text) }

func signer(name string, ready *metav1.Condition) *certificates.Signer {
	s := &certificates.Signer{ObjectMeta: metav1.ObjectMeta{Name: strings.Replace(name, "/", ":", 1)}, Spec: certificates.SignerSpec{SignerName: name}}
	if ready != nil {
		s.Status.Conditions = []metav1.Condition{*ready}
	}
	return s
}

func TestWarnsWhenNothingWillSign(t *testing.T) {
	getter := signers{byName: map[string]*certificates.Signer{}}
	for _, s := range []*certificates.Signer{
		signer("example.com/ready", &metav1.Condition{Type: certificates.SignerReady, Status: metav1.ConditionTrue, Reason: "CAReady"}),
		signer("example.com/new", nil),
		signer("example.com/broken", &metav1.Condition{Type: certificates.SignerReady, Status: metav1.ConditionFalse, Reason: "CANotFound",
			Message: `CertificateAuthority "gone" does not exist`}),
	} {
		getter.byName[s.Name] = s
	}
	for name, tc := range map[string]struct {
		getter      signers
		signerName  string
		subresource string
		op          admission.Operation
		want        string // "" for no warning
	}{
		"no Signer serves the name": {getter: getter, signerName: "example.com/none",
			want: `no Signer serves signerName "example.com/none": nothing will sign this request until one does`},
		"the Signer is not Ready": {getter: getter, signerName: "example.com/broken",
			// The reason only: the condition's message can be a raw CA
			// error (CAUnavailable carries the key store's err.Error()),
			// not for a requester who may not get the Signer.
			want: `Signer "example.com:broken" for signerName "example.com/broken" is not Ready (reason CANotFound): nothing will sign this request until it is`},
		"the Signer is Ready":                          {getter: getter, signerName: "example.com/ready"},
		"the Signer is not judged yet":                 {getter: getter, signerName: "example.com/new"},
		"the Signers cannot be read":                   {getter: signers{err: errors.New("storage is not ready yet")}, signerName: "example.com/none"},
		"a create through the node client subresource": {getter: getter, signerName: "example.com/none", subresource: "selfnodeclient"},
	} {
		t.Run(name, func(t *testing.T) {
			p := New()
			p.SetSigners(tc.getter)
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			csr := &certificates.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: certificates.CertificateSigningRequestSpec{SignerName: tc.signerName}}
			a := admission.NewAttributesRecord(csr, nil, certificates.Kind("CertificateSigningRequest").WithVersion("v1alpha1"), "", "r",
				certificates.Resource("certificatesigningrequests").WithVersion("v1alpha1"), tc.subresource, admission.Create, &metav1.CreateOptions{}, false,
				&user.DefaultInfo{Name: "alice"})
			rec := &recorder{}
			if err := p.Validate(warning.WithWarningRecorder(context.Background(), rec), a, nil); err != nil {
				t.Fatalf("a warning plugin refused a create: %v", err)
			}
			switch {
			case tc.want == "" && len(rec.warnings) > 0:
				t.Fatalf("warnings %q, want none", rec.warnings)
			case tc.want != "" && (len(rec.warnings) != 1 || !strings.HasPrefix(rec.warnings[0], tc.want)):
				t.Fatalf("warnings %q, want one starting %q", rec.warnings, tc.want)
			}
		})
	}
}

func TestNeedsSigners(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("the plugin started without a Signer getter")
	}
	if New().Handles(admission.Update) {
		t.Fatal("the plugin looks at updates: only creates make a request nothing signs")
	}
}
