package server

import (
	"errors"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
)

// InFlightOptions bound the requests rekey serves at once. With API
// priority and fairness off (rekey's default: kube-apiserver's already
// admitted every forwarded request), they are what sheds load: a request
// over the limit gets 429 with Retry-After. Watches and system:masters
// (rekey's own controllers, over loopback) are not counted.
type InFlightOptions struct {
	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int
}

// NewInFlightOptions returns kube-apiserver's defaults.
func NewInFlightOptions() *InFlightOptions {
	defaults := genericoptions.NewServerRunOptions()
	return &InFlightOptions{
		MaxRequestsInFlight:         defaults.MaxRequestsInFlight,
		MaxMutatingRequestsInFlight: defaults.MaxMutatingRequestsInFlight,
	}
}

// AddFlags adds the two limits, named as kube-apiserver names them.
func (o *InFlightOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.MaxRequestsInFlight, "max-requests-inflight", o.MaxRequestsInFlight,
		"Non-mutating requests rekey serves at once; more get 429. 0 means no limit. With --enable-priority-and-fairness, the sum of both limits is instead the concurrency its priority levels share.")
	fs.IntVar(&o.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", o.MaxMutatingRequestsInFlight,
		"Mutating requests (creates, approvals, updates, deletes) rekey serves at once; more get 429. 0 means no limit. With --enable-priority-and-fairness, see --max-requests-inflight.")
}

// Validate refuses negative limits.
func (o *InFlightOptions) Validate() []error {
	if o.MaxRequestsInFlight < 0 || o.MaxMutatingRequestsInFlight < 0 {
		return []error{errors.New("--max-requests-inflight and --max-mutating-requests-inflight must not be negative")}
	}
	return nil
}

// ApplyTo sets the limits the generic server's handler chain enforces.
func (o *InFlightOptions) ApplyTo(c *genericapiserver.Config) {
	c.MaxRequestsInFlight = o.MaxRequestsInFlight
	c.MaxMutatingRequestsInFlight = o.MaxMutatingRequestsInFlight
}
