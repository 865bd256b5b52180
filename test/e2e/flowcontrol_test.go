package e2e

import (
	"context"
	"net/http"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// flowSchemaHeader is what API priority and fairness puts on every
// response it admitted.
const flowSchemaHeader = "X-Kubernetes-Pf-Flowschema-Uid"

// TestPriorityAndFairnessStaysInKubeAPIServer: a request through the
// aggregation layer is admitted by kube-apiserver's priority and fairness
// (its response names the FlowSchema), and rekey does not run a second one
// (a request straight to rekey names none); rekey's service account has no
// access to the cluster's FlowSchemas and priority levels.
func TestPriorityAndFairnessStaysInKubeAPIServer(t *testing.T) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	const path = "/apis/certificates.rekey.io/v1alpha1/certificatesigningrequests?limit=1"
	if h := responseHeader(t, cfg, path); h == "" {
		t.Fatalf("through kube-apiserver: no %s header; is its priority and fairness on?", flowSchemaHeader)
	}
	if h := responseHeader(t, cluster.DirectToRekey(cfg), path); h != "" {
		t.Fatalf("rekey answered with %s: %s; it runs its own priority and fairness", flowSchemaHeader, h)
	}

	sa := "system:serviceaccount:rekey-system:rekey-apiserver"
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Group: "flowcontrol.apiserver.k8s.io", Resource: "flowschemas", Verb: "list"},
		{Group: "flowcontrol.apiserver.k8s.io", Resource: "flowschemas", Subresource: "status", Verb: "patch"},
		{Group: "flowcontrol.apiserver.k8s.io", Resource: "prioritylevelconfigurations", Subresource: "status", Verb: "patch"},
	} {
		review, err := cluster.Admin.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:rekey-system"}, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed {
			t.Errorf("rekey's service account may %s %s/%s: %s", attrs.Verb, attrs.Resource, attrs.Subresource, review.Status.Reason)
		}
	}
}

// responseHeader GETs path with cfg's credentials and returns the
// FlowSchema header of the (successful) response.
func responseHeader(t *testing.T, cfg *rest.Config, path string) string {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(cfg.Host + path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %s", cfg.Host, path, resp.Status)
	}
	return resp.Header.Get(flowSchemaHeader)
}
