package server

import (
	"fmt"

	"github.com/spf13/pflag"

	"rekey.io/rekey/pkg/apiserver"
)

// RevocationLoopbackOptions configure a second, plain-HTTP listener for the
// revocation webhook on the loopback addresses only, for a replica on the
// same host as kube-apiserver (hostNetwork on the control-plane nodes):
// kube-apiserver then calls it without TLS on either side, which is most of
// what the webhook costs it (docs/revocation.md, Co-located webhook).
type RevocationLoopbackOptions struct {
	// Port is the loopback port; 0 serves no such listener. Only a port:
	// the address is always 127.0.0.1 (and ::1), never anything a network
	// reaches.
	Port int
}

// NewRevocationLoopbackOptions returns the defaults (off).
func NewRevocationLoopbackOptions() *RevocationLoopbackOptions {
	return &RevocationLoopbackOptions{}
}

// AddFlags adds --revocation-webhook-loopback-port.
func (o *RevocationLoopbackOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Port, "revocation-webhook-loopback-port", o.Port,
		"Also serve the revocation webhook (POST /revocation/authorize, nothing else) as plain HTTP on 127.0.0.1 and ::1 at this port, for a kube-apiserver on the same host. 0 (the default) disables it. Only loopback addresses are ever bound.")
}

// Validate refuses a port outside 0-65535.
func (o *RevocationLoopbackOptions) Validate() []error {
	if o.Port < 0 || o.Port > 65535 {
		return []error{fmt.Errorf("--revocation-webhook-loopback-port %d: must be 0 (off) or a port (1-65535)", o.Port)}
	}
	return nil
}

// ApplyTo sets the loopback port.
func (o *RevocationLoopbackOptions) ApplyTo(c *apiserver.ExtraConfig) {
	c.RevocationLoopbackPort = o.Port
}
