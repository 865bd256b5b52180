package signerauth

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/apis/certificates"
)

func attrs(u user.Info) admission.Attributes {
	return admission.NewAttributesRecord(&certificates.CertificateSigningRequest{}, nil, certificates.Kind("CertificateSigningRequest").WithVersion("v1alpha1"),
		"", "req", certificates.Resource("certificatesigningrequests").WithVersion("v1alpha1"), "approval", admission.Update, nil, false, u)
}

func TestAuthorizingNeedsAnAuthorizer(t *testing.T) {
	p := NewAuthorizing("Test")
	if err := p.ValidateInitialization(); err == nil || !strings.Contains(err.Error(), "Test admission plugin requires an authorizer") {
		t.Fatalf("initialized without an authorizer: %v", err)
	}
	p.SetAuthorizer(authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", nil
	}))
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
}

// TestRequire: only a user the authorizer allows the verb on the signer
// name passes; no user, a refusal and an authorizer error are Forbidden,
// naming the verb and the signer name.
func TestRequire(t *testing.T) {
	alice := &user.DefaultInfo{Name: "alice"}
	for name, tc := range map[string]struct {
		u        user.Info
		decision authorizer.Decision
		err      error
		wantErr  string
	}{
		"allowed":          {u: alice, decision: authorizer.DecisionAllow},
		"refused":          {u: alice, decision: authorizer.DecisionNoOpinion, wantErr: "example.com/team"},
		"authorizer error": {u: alice, decision: authorizer.DecisionNoOpinion, err: errors.New("webhook down"), wantErr: "example.com/team"},
		"no user":          {wantErr: "no user information"},
	} {
		t.Run(name, func(t *testing.T) {
			var asked []authorizer.Attributes
			p := NewAuthorizing("Test")
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = append(asked, a)
				return tc.decision, "", tc.err
			}))
			err := p.Require(context.Background(), attrs(tc.u), "approve", "example.com/team")
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want Forbidden naming %q", err, tc.wantErr)
			}
			if tc.u != nil && (len(asked) == 0 || asked[0].GetVerb() != "approve" || asked[0].GetUser().GetName() != "alice") {
				t.Fatalf("asked %v, want an approve check for alice", asked)
			}
		})
	}
}
