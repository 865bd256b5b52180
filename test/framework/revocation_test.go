package framework

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	api "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/load"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
)

// validRevocationConfig loads and validates an AuthorizationConfiguration
// as kube-apiserver does (the same packages, the same version), and
// returns the webhook's compiled matchConditions.
func validRevocationConfig(t *testing.T, data string) (*api.AuthorizationConfiguration, *authorizationcel.CELMatcher) {
	t.Helper()
	cfg, err := load.LoadFromData([]byte(data))
	if err != nil {
		t.Fatalf("loading: %v\n%s", err, data)
	}
	compiler := authorizationcel.NewDefaultCompiler()
	known := sets.New("Webhook", "Node", "RBAC", "ABAC", "AlwaysAllow", "AlwaysDeny")
	if errs := validation.ValidateAuthorizationConfiguration(compiler, nil, cfg, known, sets.New("Webhook")); len(errs) > 0 {
		t.Fatalf("invalid: %v", errs.ToAggregate())
	}
	if len(cfg.Authorizers) != 3 || cfg.Authorizers[0].Type != "Webhook" || cfg.Authorizers[1].Type != "Node" || cfg.Authorizers[2].Type != "RBAC" {
		t.Fatalf("authorizers: %+v, want the webhook, Node, RBAC", cfg.Authorizers)
	}
	w := cfg.Authorizers[0].Webhook
	if w.CacheAuthorizedRequests || w.CacheUnauthorizedRequests {
		t.Error("the webhook's decisions must not be cached")
	}
	matcher, errs := validation.ValidateAndCompileMatchConditions(compiler, w.MatchConditions)
	if len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	return cfg, matcher
}

func TestRevocationAuthorizationConfiguration(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "webhook.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{RevocationFailOpen, RevocationFailClosed} {
		cfg, matcher := validRevocationConfig(t, RevocationAuthorizationConfiguration(kubeconfig, policy))
		if got := cfg.Authorizers[0].Webhook.FailurePolicy; got != policy {
			t.Errorf("failurePolicy %q, want %q", got, policy)
		}
		// The webhook is asked for a client certificate's requests only,
		// and the condition never errs (an error would deny every request
		// under Deny).
		for name, c := range map[string]struct {
			extra map[string]authorizationv1.ExtraValue
			want  bool
		}{
			"certificate":   {map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"X509SHA256=00ff"}}, true},
			"token":         {map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=abc"}}, false},
			"other extra":   {map[string]authorizationv1.ExtraValue{"scopes": {"x"}}, false},
			"no extra":      {nil, false},
			"empty list":    {map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {}}, false},
			"several, cert": {map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=1", "X509SHA256=aa"}}, true},
		} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "alice", Extra: c.extra,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "namespaces"},
			}}
			got, err := matcher.Eval(context.Background(), sar)
			if err != nil || got != c.want {
				t.Errorf("%s: match %v, %v; want %v", name, got, err, c.want)
			}
		}
	}
}

// TestRevocationAuthorizationConfigurationDoc: docs/revocation.md shows
// the configuration the tests use, and it is valid.
func TestRevocationAuthorizationConfigurationDoc(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(RepoRoot(), "docs", "revocation.md"))
	if err != nil {
		t.Skipf("docs/revocation.md: %v", err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/revocation.md has no AuthorizationConfiguration block")
	}
	documented := string(m[1])
	kubeconfigLine := regexp.MustCompile(`(?m)^      kubeConfigFile: (\S+)$`).FindStringSubmatch(documented)
	policyLine := regexp.MustCompile(`(?m)^    failurePolicy: (\S+)$`).FindStringSubmatch(documented)
	if kubeconfigLine == nil || policyLine == nil {
		t.Fatal("the documented configuration has no kubeConfigFile or failurePolicy line")
	}
	if want := RevocationAuthorizationConfiguration(kubeconfigLine[1], policyLine[1]); strings.TrimSpace(documented) != strings.TrimSpace(want) {
		t.Errorf("docs/revocation.md's AuthorizationConfiguration differs from the tests':\n--- docs\n%s\n--- tests\n%s", documented, want)
	}
}
