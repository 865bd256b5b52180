package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/scheme"
)

// The replacement authorizer keeps the generic one's behaviour: privileged
// groups are allowed without asking, everyone else is decided by a
// SubjectAccessReview against the cluster, and the client carries the QPS.
func TestInstallDelegatedAuthorizer(t *testing.T) {
	var reviews atomic.Int32
	var contentTypes sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		contentTypes.Store(r.Header.Get("Content-Type"), true)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var sar authorizationv1.SubjectAccessReview
		if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reviews.Add(1)
		sar.Status.Allowed = sar.Spec.User == "alice"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&sar)
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := genericoptions.NewDelegatingAuthorizationOptions()
	opts.RemoteKubeConfigFile = kubeconfig
	cfg, err := authorizationClientConfig(opts, 1234, 2345)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != srv.URL || cfg.QPS != 1234 || cfg.Burst != 2345 {
		t.Fatalf("client reaches %q at %v/s burst %d, want %q at 1234/s burst 2345", cfg.Host, cfg.QPS, cfg.Burst, srv.URL)
	}

	c := &genericapiserver.RecommendedConfig{}
	if _, err := installDelegatedAuthorizer(opts, 1234, 2345)(c); err != nil {
		t.Fatal(err)
	}
	if c.Authorization.Authorizer == nil {
		t.Fatal("no authorizer installed")
	}
	decide := func(name string, groups ...string) authorizer.Decision {
		d, _, err := c.Authorization.Authorizer.Authorize(context.Background(), authorizer.AttributesRecord{
			User: &user.DefaultInfo{Name: name, Groups: groups}, Verb: "create", APIGroup: "certificates.rekey.io",
			Resource: "certificatesigningrequests", ResourceRequest: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := decide("root", user.SystemPrivilegedGroup); d != authorizer.DecisionAllow || reviews.Load() != 0 {
		t.Fatalf("system:masters: decision %v after %d reviews, want allowed without one", d, reviews.Load())
	}
	if d := decide("alice"); d != authorizer.DecisionAllow {
		t.Fatalf("alice: %v, want allowed by the review", d)
	}
	if d := decide("mallory"); d == authorizer.DecisionAllow {
		t.Fatal("mallory allowed, the review said no")
	}
	if reviews.Load() != 2 {
		t.Fatalf("%d reviews, want 2", reviews.Load())
	}
	if _, ok := contentTypes.Load("application/vnd.kubernetes.protobuf"); !ok {
		t.Error("the reviews were not sent as protobuf")
	}
}
