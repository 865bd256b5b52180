//go:build !linux

package externaljwt

import (
	"fmt"
	"net"
	"runtime"
)

// peerCred is not implemented here: a peer check refuses every call.
func peerCred(*net.UnixConn) (PeerCred, error) {
	return PeerCred{}, fmt.Errorf("peer credentials are not read on %s", runtime.GOOS)
}
