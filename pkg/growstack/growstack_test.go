package growstack

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// TestWithAuthenticator: the wrapper answers exactly what the
// authenticator it wraps answers, and calls it once per request.
func TestWithAuthenticator(t *testing.T) {
	calls := 0
	want := &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}
	wantErr := errors.New("refused")
	inner := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		calls++
		if req.Header.Get("X-Refuse") != "" {
			return nil, false, wantErr
		}
		return want, true, nil
	})
	auth := WithAuthenticator(inner)
	resp, ok, err := auth.AuthenticateRequest(httptest.NewRequest(http.MethodGet, "/", nil))
	if resp != want || !ok || err != nil || calls != 1 {
		t.Fatalf("got %v %v %v after %d calls", resp, ok, err, calls)
	}
	refused := httptest.NewRequest(http.MethodGet, "/", nil)
	refused.Header.Set("X-Refuse", "1")
	if resp, ok, err := auth.AuthenticateRequest(refused); resp != nil || ok || !errors.Is(err, wantErr) || calls != 2 {
		t.Fatalf("got %v %v %v after %d calls", resp, ok, err, calls)
	}
	if growRESTStack() != 1 || growChainStack() != 1 {
		t.Fatal("the stack frames were not written")
	}
}
