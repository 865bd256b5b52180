// Package growstack grows a request goroutine's stack once, while it is
// shallow, so that the deep call chains of a request do not grow it again
// and again. The server's authentication filter and the registry's hot REST
// methods both call it, so it sits below both.
package growstack

import (
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
)

// A request is served by three goroutines in turn, each started by the
// generic server at the runtime's small initial stack size: the HTTP/2
// handler's (the outer filters), the request timeout's (authentication,
// audit, impersonation, priority and fairness, authorization, routing),
// and the one the REST handler runs in (decoding, admission, managed
// fields, storage, signing). Each grew its stack several times per
// request, copying every frame of a deep call chain each time: 6 to 8% of
// the server's CPU in the issuance benchmarks. Growing the last two
// stacks at the first code of the server's that runs in their goroutine,
// while it is shallow, copies a few frames once (the outer one is shallow
// enough that growing it early saved nothing). Stacks shrink again in garbage
// collection when they are mostly unused, so idle goroutines keep
// nothing.

// chainStack and restStack are frame sizes that take a goroutine's stack
// to 32 KiB and to 64 KiB: about what the filters, and the REST handler of
// a write, use.
const (
	chainStack = 24 << 10
	restStack  = 48 << 10
)

// frameIndex is read at run time so that the compiler cannot drop the
// arrays below.
var frameIndex = 1

//go:noinline
func growChainStack() byte {
	var frame [chainStack]byte
	frame[frameIndex] = 1
	return frame[frameIndex]
}

//go:noinline
func growRESTStack() byte {
	var frame [restStack]byte
	frame[frameIndex] = 1
	return frame[frameIndex]
}

// ForREST grows the calling goroutine's stack to what a REST write takes;
// call it first in a hot REST method.
func ForREST() { growRESTStack() }

// WithAuthenticator wraps the request authenticator, the first
// code of the server's in the request timeout's goroutine (authentication
// is the first filter it runs).
func WithAuthenticator(auth authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		growChainStack()
		return auth.AuthenticateRequest(req)
	})
}
