package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/apiserver/publicpaths"
	"rekey.io/rekey/pkg/revocation"
)

// serveRevocationLoopback serves webhook, when RevocationLoopbackPort is
// set, as plain HTTP on the loopback addresses: for a kube-apiserver on the
// same host, which then calls it without TLS (most of what the webhook
// costs both sides). The ports are bound now, so that a port in use fails
// the start; requests are served from the post-start hooks on, until the
// server stops.
func (c completedConfig) serveRevocationLoopback(s *Server, webhook http.Handler) error {
	port := c.ExtraConfig.RevocationLoopbackPort
	if port == 0 {
		return nil
	}
	listeners, err := listenLoopback(port)
	if err != nil {
		return err
	}
	srv := newRevocationLoopbackServer(webhook)
	return s.GenericAPIServer.AddPostStartHook("rekey-revocation-loopback", func(hook genericapiserver.PostStartHookContext) error {
		logger := klog.FromContext(hook)
		for _, l := range listeners {
			logger.Info("Serving the revocation webhook as plain HTTP on loopback", "address", l.Addr().String())
			s.goBackground(func() {
				if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
					logger.Error(err, "Serving the revocation webhook on loopback", "address", l.Addr().String())
				}
			})
		}
		s.goBackground(func() {
			<-hook.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
		return nil
	})
}

// listenLoopback binds 127.0.0.1:port, and [::1]:port when the host has
// IPv6 loopback. Only these addresses: the listener takes no address from
// its configuration, so it cannot be made to listen on a network.
func listenLoopback(port int) ([]net.Listener, error) {
	l4, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("--revocation-webhook-loopback-port: %w", err)
	}
	listeners := []net.Listener{l4}
	// Without IPv6 (disabled, or no ::1) the IPv4 listener is enough:
	// the webhook's kubeconfig names 127.0.0.1.
	if l6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(port))); err == nil {
		listeners = append(listeners, l6)
	}
	return listeners, nil
}

// newRevocationLoopbackServer serves webhook at revocation.Path and nothing
// else (404), with the public paths' in-flight limit; the webhook refuses
// any method but POST and bounds its own reading and writing. Plain
// HTTP/1.1 (no h2c): kube-apiserver's client keeps its connections alive.
func newRevocationLoopbackServer(webhook http.Handler) *http.Server {
	mux := publicpaths.New()
	mux.Handle(revocation.Path, webhook)
	return &http.Server{
		Handler:           mux.Wrap(http.NotFoundHandler()),
		ReadHeaderTimeout: revocation.ReadTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
	}
}
