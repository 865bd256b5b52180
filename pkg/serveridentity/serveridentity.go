// Package serveridentity gives rekey's own controllers an identity that no
// client can present, so that the API can leave some writes to them alone
// (CertificateAuthority and Signer status, which say which key signs).
//
// The controllers call the API over the loopback connection with a random
// bearer token made at start-up and kept in memory. The authenticator that
// knows the token returns a user of a type private to this package, so a
// request that arrives any other way (a client certificate, the front
// proxy's headers, impersonation, the generic loopback token) can carry the
// same name and groups but never the same type.
package serveridentity

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// UserName is the name the controllers' requests carry (audit logs show it).
const UserName = "system:rekey:controllers"

// controllerUser is the controllers' user. Its type is the proof.
type controllerUser struct{ user.DefaultInfo }

// Identity holds the controllers' token.
type Identity struct {
	token []byte
}

// New makes an identity with a fresh 256-bit token.
func New() (*Identity, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("making the controllers' token: %w", err)
	}
	return &Identity{token: []byte(base64.RawURLEncoding.EncodeToString(raw))}, nil
}

// ClientConfig returns a copy of the loopback configuration that
// authenticates as the controllers.
func (i *Identity) ClientConfig(loopback *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(loopback)
	cfg.BearerToken = string(i.token)
	cfg.BearerTokenFile = ""
	return cfg
}

// Authenticator recognises the controllers' token and nothing else; put it
// in front of the server's other authenticators.
func (i *Identity) Authenticator() authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		auth := strings.TrimSpace(req.Header.Get("Authorization"))
		token, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), i.token) != 1 {
			return nil, false, nil
		}
		// The token must not reach later handlers or an audit backend.
		req.Header.Del("Authorization")
		return &authenticator.Response{User: &controllerUser{user.DefaultInfo{
			Name:   UserName,
			Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated},
		}}}, true, nil
	})
}

// IsController reports whether u is the controllers' identity.
func IsController(u user.Info) bool {
	_, ok := u.(*controllerUser)
	return ok
}

// FromContext reports whether the request in ctx was made by the
// controllers.
func FromContext(ctx context.Context) bool {
	u, ok := genericapirequest.UserFrom(ctx)
	return ok && IsController(u)
}

// WithUser returns ctx acting as the controllers, for code in the server
// that writes through the registry directly, and for tests. It needs the
// Identity, which only the server holds.
func (i *Identity) WithUser(ctx context.Context) context.Context {
	return genericapirequest.WithUser(ctx, &controllerUser{user.DefaultInfo{
		Name:   UserName,
		Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated},
	}})
}
