package standalone

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

type muxFunc func(string, http.Handler)

func (f muxFunc) Handle(path string, h http.Handler) { f(path, h) }

func TestSelfReviews(t *testing.T) {
	handlers := map[string]http.Handler{}
	if err := InstallSelfReviews(muxFunc(func(p string, h http.Handler) { handlers[p] = h }), NewAuthorizer()); err != nil {
		t.Fatal(err)
	}
	alice := &user.DefaultInfo{Name: "alice", UID: "u1", Groups: []string{"dev", user.AllAuthenticated}, Extra: map[string][]string{"k": {"v"}}}
	post := func(path, body string, u user.Info) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(request.WithUser(context.Background(), u))
		rec := httptest.NewRecorder()
		handlers[path].ServeHTTP(rec, req)
		return rec
	}

	rec := post(SelfSubjectReviewPath, `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`, alice)
	var review authenticationv1.SelfSubjectReview
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &review) != nil {
		t.Fatalf("SelfSubjectReview: %d %s", rec.Code, rec.Body)
	}
	if got := review.Status.UserInfo; got.Username != "alice" || got.UID != "u1" || strings.Join(got.Groups, ",") != "dev,system:authenticated" || got.Extra["k"][0] != "v" || review.Kind != "SelfSubjectReview" {
		t.Errorf("SelfSubjectReview answered %+v", review)
	}

	for name, tc := range map[string]struct {
		spec                string
		wantCode            int
		wantAllowed, denied bool
	}{
		"a request may be created":     {spec: `"resourceAttributes":{"verb":"create","group":"certificates.rekey.io","resource":"certificatesigningrequests"}`, wantCode: http.StatusCreated, wantAllowed: true},
		"a signer may not be approved": {spec: `"resourceAttributes":{"verb":"approve","group":"certificates.rekey.io","resource":"signers","name":"example.com/x"}`, wantCode: http.StatusCreated},
		"/metrics may not be read":     {spec: `"nonResourceAttributes":{"verb":"get","path":"/metrics"}`, wantCode: http.StatusCreated},
		"/version may be read":         {spec: `"nonResourceAttributes":{"verb":"get","path":"/version"}`, wantCode: http.StatusCreated, wantAllowed: true},
		"both attributes":              {spec: `"resourceAttributes":{"verb":"get"},"nonResourceAttributes":{"verb":"get","path":"/version"}`, wantCode: http.StatusBadRequest},
		"neither":                      {spec: ``, wantCode: http.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			rec := post(SelfSubjectAccessReviewPath, `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{`+tc.spec+`}}`, alice)
			if rec.Code != tc.wantCode {
				t.Fatalf("%d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			if rec.Code != http.StatusCreated {
				return
			}
			var r authorizationv1.SelfSubjectAccessReview
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != tc.wantAllowed || r.Status.Denied != tc.denied {
				t.Errorf("status %+v, want allowed=%v", r.Status, tc.wantAllowed)
			}
			if !r.Status.Allowed && r.Status.Reason == "" {
				t.Errorf("no reason for a refusal: %+v", r.Status)
			}
		})
	}

	rec = post(SelfSubjectRulesReviewPath, `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectRulesReview","spec":{"namespace":"default"}}`, alice)
	var rules authorizationv1.SelfSubjectRulesReview
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &rules) != nil {
		t.Fatalf("SelfSubjectRulesReview: %d %s", rec.Code, rec.Body)
	}
	if rules.Status.Incomplete || !coversResource(rules.Status.ResourceRules, "create", "certificates.rekey.io", "certificatesigningrequests") ||
		coversResource(rules.Status.ResourceRules, "approve", "certificates.rekey.io", "signers") {
		t.Errorf("SelfSubjectRulesReview answered %+v", rules.Status)
	}

	req := httptest.NewRequest(http.MethodGet, SelfSubjectReviewPath, nil).WithContext(request.WithUser(context.Background(), alice))
	rec = httptest.NewRecorder()
	handlers[SelfSubjectReviewPath].ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", rec.Code)
	}
}
