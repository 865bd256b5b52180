package serveridentity

import (
	"context"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

func TestAuthenticator(t *testing.T) {
	id, err := New()
	if err != nil {
		t.Fatal(err)
	}
	cfg := id.ClientConfig(&rest.Config{Host: "https://127.0.0.1:1", BearerToken: "loopback"})
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	resp, ok, err := id.Authenticator().AuthenticateRequest(req)
	if err != nil || !ok {
		t.Fatalf("the controllers' token was not recognised: ok=%v err=%v", ok, err)
	}
	if !IsController(resp.User) || resp.User.GetName() != UserName {
		t.Fatalf("user %#v is not the controllers'", resp.User)
	}
	if req.Header.Get("Authorization") != "" {
		t.Fatal("the token was left in the request")
	}

	for name, header := range map[string]string{
		"generic loopback token": "Bearer loopback",
		"another identity":       "Bearer " + mustNew(t).ClientConfig(&rest.Config{}).BearerToken,
		"no header":              "",
		"basic":                  "Basic " + cfg.BearerToken,
	} {
		req := httptest.NewRequest("GET", "/", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		if _, ok, err := id.Authenticator().AuthenticateRequest(req); ok || err != nil {
			t.Errorf("%s: authenticated as the controllers", name)
		}
	}
}

// TestSameNameIsNotTheControllers: a user with the same name and groups,
// as the front proxy or impersonation would produce, is not the controllers.
func TestSameNameIsNotTheControllers(t *testing.T) {
	forged := &user.DefaultInfo{Name: UserName, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	if IsController(forged) {
		t.Fatal("a DefaultInfo with the controllers' name was taken for the controllers")
	}
	if FromContext(genericapirequest.WithUser(context.Background(), forged)) {
		t.Fatal("FromContext accepted a forged user")
	}
	if !FromContext(mustNew(t).WithUser(context.Background())) {
		t.Fatal("WithUser is not the controllers")
	}
}

func mustNew(t *testing.T) *Identity {
	id, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return id
}
