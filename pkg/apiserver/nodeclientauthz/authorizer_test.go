package nodeclientauthz

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const group = "certificates.rekey.io"

// asked records the questions put to it and answers with policy.
type asked struct {
	questions []authorizer.Attributes
	policy    func(authorizer.Attributes) authorizer.Decision
}

func (a *asked) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.questions = append(a.questions, attrs)
	return a.policy(attrs), "", nil
}

func (a *asked) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

func (a *asked) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func create(sub, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User:            &user.DefaultInfo{Name: "system:bootstrap:abcdef", Groups: []string{"system:bootstrappers", "system:authenticated"}},
		Verb:            "create",
		APIGroup:        group,
		APIVersion:      "v1alpha1",
		Resource:        "certificatesigningrequests",
		Subresource:     sub,
		Name:            name,
		ResourceRequest: true,
	}
}

func viaProxy(via bool) func(context.Context) bool {
	return func(context.Context) bool { return via }
}

func TestAuthorize(t *testing.T) {
	anyNameAllowed := func(a authorizer.Attributes) authorizer.Decision { return authorizer.DecisionAllow }
	// resourceNames: only node-a's request, never any name.
	onlyNodeA := func(a authorizer.Attributes) authorizer.Decision {
		if a.GetName() == "node-a" {
			return authorizer.DecisionAllow
		}
		return authorizer.DecisionNoOpinion
	}
	denyAll := func(a authorizer.Attributes) authorizer.Decision { return authorizer.DecisionDeny }
	approval := create("approval", "node-a")
	approval.Verb = "update"
	otherGroup := create("nodeclient", "node-a")
	otherGroup.APIGroup = "certificates.k8s.io"
	for _, tc := range []struct {
		name      string
		attrs     authorizer.AttributesRecord
		via       bool
		policy    func(authorizer.Attributes) authorizer.Decision
		want      authorizer.Decision
		wantNames []string // the names asked about, in order
	}{
		{"nodeclient via the front proxy: any name first", create("nodeclient", "node-a"), true, anyNameAllowed, authorizer.DecisionAllow, []string{""}},
		{"selfnodeclient via the front proxy", create("selfnodeclient", "node-a"), true, anyNameAllowed, authorizer.DecisionAllow, []string{""}},
		{"a grant for one name: asked again with it", create("nodeclient", "node-a"), true, onlyNodeA, authorizer.DecisionAllow, []string{"", "node-a"}},
		{"a grant for another name", create("nodeclient", "node-b"), true, onlyNodeA, authorizer.DecisionNoOpinion, []string{"", "node-b"}},
		{"denied", create("nodeclient", "node-a"), true, denyAll, authorizer.DecisionDeny, []string{"", "node-a"}},
		{"not via the front proxy: named", create("nodeclient", "node-a"), false, anyNameAllowed, authorizer.DecisionAllow, []string{"node-a"}},
		{"other subresources: named", approval, true, anyNameAllowed, authorizer.DecisionAllow, []string{"node-a"}},
		{"the main create", create("", ""), true, anyNameAllowed, authorizer.DecisionAllow, []string{""}},
		{"another group", otherGroup, true, anyNameAllowed, authorizer.DecisionAllow, []string{"node-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, conditionsAware := range []bool{false, true} {
				d := &asked{policy: tc.policy}
				a := &Authorizer{Delegate: d, Group: group, ViaFrontProxy: viaProxy(tc.via)}
				var got authorizer.Decision
				if conditionsAware {
					cd := a.ConditionsAwareAuthorize(context.Background(), tc.attrs)
					switch {
					case cd.IsAllow():
						got = authorizer.DecisionAllow
					case cd.IsDeny():
						got = authorizer.DecisionDeny
					default:
						got = authorizer.DecisionNoOpinion
					}
				} else {
					got, _, _ = a.Authorize(context.Background(), tc.attrs)
				}
				if got != tc.want {
					t.Errorf("conditions-aware %v: decision %v, want %v", conditionsAware, got, tc.want)
				}
				var names []string
				for _, q := range d.questions {
					names = append(names, q.GetName())
					if q.GetSubresource() != tc.attrs.Subresource || q.GetVerb() != tc.attrs.Verb || q.GetUser().GetName() != tc.attrs.User.GetName() {
						t.Errorf("asked %+v, want the request's attributes but the name", q)
					}
				}
				if fmt.Sprint(names) != fmt.Sprint(tc.wantNames) {
					t.Errorf("conditions-aware %v: asked about names %q, want %q", conditionsAware, names, tc.wantNames)
				}
			}
		})
	}
}

// TestOneReviewPerBootstrapIdentity: with the delegated authorizer that
// rekey uses (SubjectAccessReviews, cached), a thousand nodes bootstrapping
// with one token cost one review, not one each; without the front proxy,
// one each, as before.
func TestOneReviewPerBootstrapIdentity(t *testing.T) {
	for _, via := range []bool{true, false} {
		// A cluster that answers reviews: nodeclient allowed, anything
		// else not.
		var reviews atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			reviews.Add(1)
			var sar authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(req.Body).Decode(&sar); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			sar.Status.Allowed = sar.Spec.ResourceAttributes != nil && sar.Spec.ResourceAttributes.Subresource == "nodeclient"
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(&sar)
		}))
		defer srv.Close()
		client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
		if err != nil {
			t.Fatal(err)
		}
		delegate, err := authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: client.AuthorizationV1(),
			AllowCacheTTL:             10 * time.Second,
			DenyCacheTTL:              10 * time.Second,
			WebhookRetryBackoff:       options.DefaultAuthWebhookRetryBackoff(),
		}.New()
		if err != nil {
			t.Fatal(err)
		}
		a := &Authorizer{Delegate: delegate, Group: group, ViaFrontProxy: viaProxy(via)}
		const nodes = 1000
		for i := 0; i < nodes; i++ {
			d, reason, err := a.Authorize(context.Background(), create("nodeclient", fmt.Sprintf("node-%04d", i)))
			if d != authorizer.DecisionAllow || err != nil {
				t.Fatalf("node %d: %v %q %v", i, d, reason, err)
			}
		}
		want := int64(1)
		if !via {
			want = nodes
		}
		got := reviews.Load()
		if got != want {
			t.Errorf("via the front proxy %v: %d reviews for %d nodes, want %d", via, got, nodes, want)
		}
		// A denied permission stays denied.
		if d, _, _ := a.Authorize(context.Background(), create("selfnodeclient", "node-x")); d == authorizer.DecisionAllow {
			t.Errorf("via the front proxy %v: selfnodeclient allowed without the permission", via)
		}
		if asked := reviews.Load() - got; asked == 0 {
			t.Errorf("via the front proxy %v: the refused create asked nothing", via)
		}
	}
}
