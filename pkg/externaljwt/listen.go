package externaljwt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/klog/v2"
)

// gracefulStopTimeout bounds how long Serve waits for calls in flight
// after its context ends; signing is fast, so a call still running then is stuck.
const gracefulStopTimeout = 5 * time.Second

// Serve serves s on lis until ctx ends, then stops gracefully. The gRPC
// handlers log with ctx's logger. With s's AllowedUIDs, only processes of
// those uids are served.
func Serve(ctx context.Context, lis net.Listener, s *Server) error {
	logger := klog.FromContext(ctx)
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(reqCtx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(klog.NewContext(reqCtx, klog.LoggerWithValues(logger, "method", info.FullMethod)), req)
	})}
	// After the logger's: the refusals are logged with the method.
	opts = append(opts, peerServerOptions(s.opts.AllowedUIDs)...)
	gs := grpc.NewServer(opts...)
	externaljwtv1.RegisterExternalJWTSignerServer(gs, s)

	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-stopped:
			return
		case <-ctx.Done():
		}
		done := make(chan struct{})
		go func() {
			gs.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(gracefulStopTimeout):
			gs.Stop()
		}
	}()

	logger.Info("Serving the external JWT signer", "address", lis.Addr().String(), "allowedUIDs", s.opts.AllowedUIDs)
	if err := gs.Serve(lis); err != nil {
		return fmt.Errorf("serving the external JWT signer on %s: %w", lis.Addr(), err)
	}
	return nil
}

// Listen listens on a Unix socket for kube-apiserver's
// --service-account-signing-endpoint: an abstract socket when path starts
// with "@" (mode does not apply: any process in the network namespace may
// connect), else a socket file given mode (0600: only kube-apiserver's
// user, when it runs as the signer's). A stale socket file at path is
// removed; a socket something still answers on, or a file that is not a
// socket, is refused. The file is made before its mode is set, so the
// directory holding it should admit only kube-apiserver's user.
func Listen(path string, mode os.FileMode) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("socket path: must not be empty")
	}
	if strings.HasPrefix(path, "@") {
		lis, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listening on abstract socket %q: %w", path, err)
		}
		return lis, nil
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil:
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("socket path %q: exists and is not a socket (%s)", path, fi.Mode().Type())
		}
		// A socket another signer still serves on is not stale: removing
		// it would take its clients away.
		if conn, dialErr := net.DialTimeout("unix", path, time.Second); dialErr == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("socket path %q: another process is listening on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %q: %w", path, err)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, fmt.Errorf("socket path %q: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on socket %q: %w", path, err)
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("setting the mode of socket %q to %#o: %w", path, mode.Perm(), err)
	}
	return lis, nil
}
