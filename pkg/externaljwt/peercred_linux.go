package externaljwt

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCred is the credentials of the process that connected to c, as the
// kernel recorded them at connect (SO_PEERCRED).
func peerCred(c *net.UnixConn) (PeerCred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return PeerCred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return PeerCred{}, fmt.Errorf("peer credentials (SO_PEERCRED): %w", credErr)
	}
	return PeerCred{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}
