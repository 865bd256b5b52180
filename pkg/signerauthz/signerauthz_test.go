package signerauthz

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func TestCheckTriesTheNameThenTheDomain(t *testing.T) {
	alice := &user.DefaultInfo{Name: "alice"}
	tests := map[string]struct {
		allowed   string // the one resource name the authorizer allows
		err       error
		signer    string
		want      bool
		wantErr   bool
		wantNames []string
	}{
		"exact name":        {allowed: "example.com/a", signer: "example.com/a", want: true, wantNames: []string{"example.com/a"}},
		"domain wildcard":   {allowed: "example.com/*", signer: "example.com/a", want: true, wantNames: []string{"example.com/a", "example.com/*"}},
		"other domain":      {allowed: "example.com/*", signer: "example.org/a", wantNames: []string{"example.org/a", "example.org/*"}},
		"authorizer errors": {err: errors.New("down"), signer: "example.com/a", wantErr: true, wantNames: []string{"example.com/a", "example.com/*"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var asked []string
			authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = append(asked, a.GetName())
				if a.GetVerb() != VerbApprove || a.GetResource() != Resource || a.GetAPIGroup() != Group || a.GetUser().GetName() != "alice" {
					t.Errorf("asked %+v", a)
				}
				if tc.err != nil {
					return authorizer.DecisionNoOpinion, "", tc.err
				}
				if a.GetName() == tc.allowed {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "", nil
			})
			d := Check(context.Background(), authz, alice, VerbApprove, tc.signer)
			if d.Allowed != tc.want || (d.Err != nil) != tc.wantErr {
				t.Fatalf("decision %+v", d)
			}
			if strings.Join(asked, ",") != strings.Join(tc.wantNames, ",") {
				t.Fatalf("asked %v, want %v", asked, tc.wantNames)
			}
		})
	}
}

func TestForbiddenMessageNamesWhatIsMissing(t *testing.T) {
	msg := ForbiddenMessage(&user.DefaultInfo{Name: "bob"}, VerbSign, "example.com/a")
	for _, want := range []string{`"bob"`, `verb "sign"`, `resource "signers"`, `group "certificates.rekey.io"`, `"example.com/a" or "example.com/*"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %s", msg, want)
		}
	}
}

// TestCheckInAsksTheGivenGroup: the host cluster's signers are another
// resource; a grant on rekey's does not answer for them.
func TestCheckInAsksTheGivenGroup(t *testing.T) {
	var groups []string
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		groups = append(groups, a.GetAPIGroup())
		if a.GetAPIGroup() == Group {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	if d := CheckIn(context.Background(), authz, HostGroup, &user.DefaultInfo{Name: "alice"}, VerbSign, "example.com/a"); d.Allowed {
		t.Fatal("a grant in certificates.rekey.io allowed a certificates.k8s.io signer")
	}
	if strings.Join(groups, ",") != HostGroup+","+HostGroup {
		t.Fatalf("asked groups %v", groups)
	}
	if msg := ForbiddenMessageIn(HostGroup, &user.DefaultInfo{Name: "bob"}, VerbSign, "example.com/a"); !strings.Contains(msg, `group "certificates.k8s.io"`) {
		t.Fatalf("message %q does not name the host group", msg)
	}
}
