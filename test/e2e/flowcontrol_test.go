package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"rekey.io/rekey/test/framework"
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
	// This test may be the first to reach rekey through kube-apiserver after
	// a restart, when the APIService can still show Available from the
	// previous process for a moment: the first answer is waited for.
	var throughKube string
	framework.Eventually(t, settleTimeout, "a first answer through kube-apiserver", func(ctx context.Context) error {
		var err error
		throughKube, err = responseHeader(cfg, path)
		return err
	})
	if throughKube == "" {
		t.Fatalf("through kube-apiserver: no %s header; is its priority and fairness on?", flowSchemaHeader)
	}
	direct, err := responseHeader(cluster.DirectToRekey(cfg), path)
	if err != nil {
		t.Fatal(err)
	}
	if direct != "" {
		t.Fatalf("rekey answered with %s: %s; it runs its own priority and fairness", flowSchemaHeader, direct)
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
// FlowSchema header of the response, or an error for any status but 200.
func responseHeader(cfg *rest.Config, path string) (string, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", err
	}
	resp, err := client.Get(cfg.Host + path)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return "", fmt.Errorf("GET %s%s: %s: %s", cfg.Host, path, resp.Status, body)
	}
	return resp.Header.Get(flowSchemaHeader), nil
}
