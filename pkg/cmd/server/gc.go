package server

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/gcfloor"
)

// DefaultGCHeapFloor is --gc-heap-floor's default: off. A floor trades
// memory for CPU as a higher GOGC does: in make bench, 256Mi cut rekey's
// CPU per issuance by about 13% and raised its RSS per 10,000 stored
// requests past kube-apiserver's in two runs of five; 192Mi changed
// neither measurably (docs/benchmarks-history.md). It is for operators who have
// the memory, not a default.
const DefaultGCHeapFloor = "0"

// GCOptions tune the Go garbage collector for a server whose live heap is
// small next to what it allocates per request (package gcfloor).
type GCOptions struct {
	HeapFloor string
}

// NewGCOptions returns the default (no floor).
func NewGCOptions() *GCOptions {
	return &GCOptions{HeapFloor: DefaultGCHeapFloor}
}

// AddFlags adds --gc-heap-floor.
func (o *GCOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.HeapFloor, "gc-heap-floor", o.HeapFloor,
		"The garbage collector lets the heap grow to at least this much before it collects (a quantity: 256Mi, 1Gi; 0, the default, turns it off). "+
			"While few requests are stored the live heap is small, and a busy server collects several times a second: a floor spends memory on fewer collections. "+
			"Past half the floor live, GOGC alone decides, as usual. With GOMEMLIMIT below twice the floor, half the limit is used instead.")
}

// floorBytes parses the floor.
func (o *GCOptions) floorBytes() (uint64, error) {
	q, err := resource.ParseQuantity(o.HeapFloor)
	if err != nil {
		return 0, fmt.Errorf("--gc-heap-floor %q: %w", o.HeapFloor, err)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("--gc-heap-floor %q must not be negative", o.HeapFloor)
	}
	v, ok := q.AsInt64()
	if !ok {
		return 0, fmt.Errorf("--gc-heap-floor %q is not a whole number of bytes below 8Ei", o.HeapFloor)
	}
	return uint64(v), nil
}

// Validate refuses what is not a non-negative quantity of bytes.
func (o *GCOptions) Validate() []error {
	if _, err := o.floorBytes(); err != nil {
		return []error{err}
	}
	return nil
}

// Start begins tuning for the rest of the process.
func (o *GCOptions) Start(ctx context.Context) error {
	floor, err := o.floorBytes()
	if err != nil {
		return err
	}
	if t := gcfloor.Start(floor); t.Floor() > 0 {
		klog.FromContext(ctx).Info("Garbage collector heap floor", "floorBytes", t.Floor())
	}
	return nil
}
