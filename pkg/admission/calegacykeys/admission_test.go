package calegacykeys

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/apis/rotation"
)

// authz allows update and get on certificateauthorities to everyone and
// create on certificateauthorities/signjwt only for the CA names in
// signers; it records each signjwt check.
type authz struct {
	signers map[string]bool
	err     error
	checks  []authorizer.Attributes
}

func (f *authz) authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetAPIGroup() != rotation.GroupName || a.GetResource() != "certificateauthorities" || !a.IsResourceRequest() {
		return authorizer.DecisionNoOpinion, "", nil
	}
	switch {
	case a.GetSubresource() == "" && (a.GetVerb() == "update" || a.GetVerb() == "get"):
		return authorizer.DecisionAllow, "", nil
	case a.GetSubresource() == "signjwt" && a.GetVerb() == "create":
		f.checks = append(f.checks, a)
		if f.err != nil {
			return authorizer.DecisionNoOpinion, "", f.err
		}
		if f.signers[a.GetName()] {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func publicKeyPEM(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func saCA(keys ...rotation.LegacyPublicKey) *rotation.CertificateAuthority {
	return &rotation.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: "service-account-tokens"},
		Spec: rotation.CertificateAuthoritySpec{
			Purpose:              rotation.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotation.ServiceAccountTokenKeys{Issuer: "https://issuer.example", LegacyPublicKeys: keys},
		},
	}
}

func attrs(obj, old *rotation.CertificateAuthority, sub string) admission.Attributes {
	op := admission.Create
	var oldObj runtime.Object
	if old != nil {
		op, oldObj = admission.Update, old
	}
	return admission.NewAttributesRecord(obj, oldObj, rotation.Kind("CertificateAuthority").WithVersion("v1alpha1"), "", obj.Name,
		rotation.Resource("certificateauthorities").WithVersion("v1alpha1"), sub, op, nil, false, &user.DefaultInfo{Name: "pki-admin"})
}

// TestAddingATokenKeyNeedsSignJWT: kube-apiserver accepts every token a
// legacy key signs, so adding one (on create or update) or serving one
// longer is as strong as signing; a CA editor who may not create
// certificateauthorities/signjwt on that CA may only take keys away or
// serve them for less time.
func TestAddingATokenKeyNeedsSignJWT(t *testing.T) {
	a, b := publicKeyPEM(t), publicKeyPEM(t)
	now := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	key := func(p string, d time.Duration) rotation.LegacyPublicKey {
		return rotation.LegacyPublicKey{PublicKey: p, ExpireTime: metav1.NewTime(now.Add(d))}
	}
	withRotation := saCA(key(a, time.Hour))
	withRotation.Spec.Rotation = &rotation.RotationPolicy{TrustPropagation: &metav1.Duration{Duration: time.Minute}}
	certificates := &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "certs"}, Spec: rotation.CertificateAuthoritySpec{Purpose: rotation.PurposeCertificates}}
	tests := map[string]struct {
		obj, old *rotation.CertificateAuthority
		sub      string
		signer   bool
		wantErr  string
	}{
		"create with a legacy key":                {obj: saCA(key(a, time.Hour)), wantErr: "adds a key"},
		"create with a legacy key, may sign":      {obj: saCA(key(a, time.Hour)), signer: true},
		"create without legacy keys":              {obj: saCA()},
		"create a Certificates CA":                {obj: certificates},
		"add a key":                               {obj: saCA(key(a, time.Hour), key(b, time.Hour)), old: saCA(key(a, time.Hour)), wantErr: "adds a key"},
		"add a key, may sign":                     {obj: saCA(key(a, time.Hour), key(b, time.Hour)), old: saCA(key(a, time.Hour)), signer: true},
		"replace a key by another":                {obj: saCA(key(b, time.Hour)), old: saCA(key(a, time.Hour)), wantErr: "adds a key"},
		"extend a key":                            {obj: saCA(key(a, 2*time.Hour)), old: saCA(key(a, time.Hour)), wantErr: "serves a key longer"},
		"extend a key, may sign":                  {obj: saCA(key(a, 2*time.Hour)), old: saCA(key(a, time.Hour)), signer: true},
		"remove a key":                            {obj: saCA(key(a, time.Hour)), old: saCA(key(a, time.Hour), key(b, time.Hour))},
		"remove every key":                        {obj: saCA(), old: saCA(key(a, time.Hour))},
		"shorten a key":                           {obj: saCA(key(a, time.Minute)), old: saCA(key(a, time.Hour))},
		"reorder keys":                            {obj: saCA(key(b, time.Hour), key(a, time.Hour)), old: saCA(key(a, time.Hour), key(b, time.Hour))},
		"change only spec.rotation":               {obj: withRotation, old: saCA(key(a, time.Hour))},
		"status update leaves the spec":           {obj: saCA(key(a, time.Hour)), old: saCA(key(a, time.Hour)), sub: "status"},
		"a key through status is checked as well": {obj: saCA(key(a, time.Hour), key(b, time.Hour)), old: saCA(key(a, time.Hour)), sub: "status", wantErr: "adds a key"},
		"unparsable key counts as added":          {obj: saCA(rotation.LegacyPublicKey{PublicKey: "junk", ExpireTime: metav1.NewTime(now)}), old: saCA(), wantErr: "adds a key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &authz{signers: map[string]bool{}}
			if tc.signer {
				f.signers[tc.obj.Name] = true
			}
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(f.authorize))
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			err := p.Validate(context.Background(), attrs(tc.obj, tc.old, tc.sub), nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				for _, c := range f.checks {
					if c.GetName() != tc.obj.Name || c.GetUser().GetName() != "pki-admin" {
						t.Errorf("checked %s for %s", c.GetName(), c.GetUser().GetName())
					}
				}
				return
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("got %v, want 403", err)
			}
			// The refusal says what to grant and why.
			for _, want := range []string{tc.wantErr, `CertificateAuthority "service-account-tokens"`, `"pki-admin"`, `verb "create"`, `"certificateauthorities/signjwt"`, rotation.GroupName, "kube-apiserver accepts"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not name %s", err, want)
				}
			}
		})
	}
}

// TestAuthorizerErrorRefuses: a key that lets anyone in is never let
// through on a failed check.
func TestAuthorizerErrorRefuses(t *testing.T) {
	p := New()
	f := &authz{err: errors.New("webhook down"), signers: map[string]bool{"service-account-tokens": true}}
	p.SetAuthorizer(authorizer.AuthorizerFunc(f.authorize))
	err := p.Validate(context.Background(), attrs(saCA(rotation.LegacyPublicKey{PublicKey: publicKeyPEM(t), ExpireTime: metav1.Now()}), nil, ""), nil)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("got %v, want 403", err)
	}
}

// TestNoAuthorizerNoStart: the plugin refuses to run without an
// authorizer rather than let every key in.
func TestNoAuthorizerNoStart(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("initialized without an authorizer")
	}
}
