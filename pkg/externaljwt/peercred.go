package externaljwt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// PeerCred is who the kernel says opened a Unix socket connection
// (SO_PEERCRED, taken when the connection was made).
type PeerCred struct {
	UID, GID uint32
	PID      int32
}

// peerAuthInfo is a connection's credentials.AuthInfo: its peer's
// credentials, or why they are unknown.
type peerAuthInfo struct {
	credentials.CommonAuthInfo
	cred PeerCred
	err  error
}

func (peerAuthInfo) AuthType() string { return "unix-peercred" }

// peerCredentials are gRPC server transport credentials that do no
// handshake (the socket's mode and the peer check are the access control;
// kube-apiserver dials a Unix socket in plain text) and take the peer's
// credentials of each connection.
type peerCredentials struct{}

var _ credentials.TransportCredentials = peerCredentials{}

func (peerCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("externaljwt: peer credentials are for the server side")
}

func (peerCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info := peerAuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		info.err = fmt.Errorf("a %T connection from %s has no peer credentials", conn, conn.RemoteAddr())
		return conn, info, nil
	}
	info.cred, info.err = peerCred(uc)
	return conn, info, nil
}

func (peerCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (peerCredentials) Clone() credentials.TransportCredentials { return peerCredentials{} }

func (peerCredentials) OverrideServerName(string) error { return nil }

// checkPeer refuses, PermissionDenied, a call whose peer's uid is not in
// allowed (or cannot be told). The refusal is logged with the peer's uid
// and pid; the answer says only the uid (the caller's own).
func checkPeer(ctx context.Context, allowed []uint32) error {
	logger := klog.FromContext(ctx)
	p, ok := peer.FromContext(ctx)
	if !ok {
		logger.Error(nil, "Refused a call: no peer")
		return status.Error(codes.PermissionDenied, "the caller cannot be identified")
	}
	info, ok := p.AuthInfo.(peerAuthInfo)
	if !ok || info.err != nil {
		err := info.err
		if !ok {
			err = fmt.Errorf("no peer credentials (%T)", p.AuthInfo)
		}
		logger.Error(err, "Refused a call: its peer's credentials are unknown")
		return status.Error(codes.PermissionDenied, "the caller's uid cannot be told")
	}
	if !slices.Contains(allowed, info.cred.UID) {
		logger.Error(nil, "Refused a call from a process whose uid is not allowed (rekey-agent jwt-signer --allowed-uids)", "uid", info.cred.UID, "gid", info.cred.GID, "pid", info.cred.PID, "allowedUIDs", allowed)
		return status.Errorf(codes.PermissionDenied, "the caller's uid %d is not allowed", info.cred.UID)
	}
	return nil
}

// peerServerOptions are the gRPC server options that serve only peers
// whose uid is in allowed; none when allowed is empty.
func peerServerOptions(allowed []uint32) []grpc.ServerOption {
	if len(allowed) == 0 {
		return nil
	}
	allowed = slices.Clone(allowed)
	return []grpc.ServerOption{
		grpc.Creds(peerCredentials{}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := checkPeer(ctx, allowed); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := checkPeer(ss.Context(), allowed); err != nil {
				return err
			}
			return handler(srv, ss)
		}),
	}
}
