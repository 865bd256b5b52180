package server

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/issuer"
)

// ControllerOptions configure the controllers and the private etcd data
// they share.
type ControllerOptions struct {
	// PrivatePrefix is the etcd prefix of data the API never serves.
	PrivatePrefix string
	// LeaderElect runs the controllers on one replica at a time.
	LeaderElect   bool
	LeaseDuration time.Duration
	// SignerWorkers is the number of concurrent signing workers.
	SignerWorkers int
	// CleanerInterval is how often finished requests are deleted.
	CleanerInterval time.Duration
	// SynchronousIssuance signs in the approval write, and approves and
	// signs at create for signers that approve without a person.
	SynchronousIssuance bool
	// InsecureTestSigner serves rekey.io/insecure-test.
	InsecureTestSigner bool
	// RequesterIssuanceBurst and RequesterIssuanceInterval rate-limit
	// create-time issuance per requester.
	RequesterIssuanceBurst    int
	RequesterIssuanceInterval time.Duration
	// KubeAPIQPS and KubeAPIBurst limit rekey's requests to the host
	// cluster's kube-apiserver. Unset, client-go allows 5 a second: the
	// PodCertificateRequest controller makes four per request (pod,
	// ServiceAccount and Node read live, the status write), so a node's
	// 100 pods waited a minute for their certificates.
	KubeAPIQPS   float32
	KubeAPIBurst int
}

// NewControllerOptions returns the defaults.
func NewControllerOptions() *ControllerOptions {
	return &ControllerOptions{
		PrivatePrefix: "/rekey.io-private",
		LeaderElect:   true,
		LeaseDuration: 15 * time.Second,
		SignerWorkers: 8,
		// Every scan lists and decodes every stored request and parses
		// every issued certificate (at a 1m interval, 5% of the aggregated
		// server's allocations over a benchmark run that stored 6,000
		// requests in it). Finished requests are deleted an hour
		// after they finish, so ten minutes more is slack, not a change of
		// meaning; kube-controller-manager's csrcleaner looks once an hour.
		CleanerInterval: 10 * time.Minute,

		SynchronousIssuance: true,

		RequesterIssuanceBurst:    issuer.DefaultRequesterBurst,
		RequesterIssuanceInterval: issuer.DefaultRequesterInterval,

		// kube-controller-manager's defaults (--kube-api-qps,
		// --kube-api-burst), for a controller doing the same work.
		KubeAPIQPS:   50,
		KubeAPIBurst: 100,
	}
}

// AddFlags adds the controllers' flags.
func (o *ControllerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.PrivatePrefix, "etcd-private-prefix", o.PrivatePrefix, "etcd prefix for CA keys and bindings, issuance records and the leader election; no API resource maps to it.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Run the controllers only on the replica elected through etcd.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long a dead leader holds the lease before another replica takes over.")
	fs.IntVar(&o.SignerWorkers, "signer-workers", o.SignerWorkers, "Concurrent signing workers.")
	fs.DurationVar(&o.CleanerInterval, "csr-cleaner-interval", o.CleanerInterval, "How often finished and abandoned requests are deleted.")
	fs.BoolVar(&o.InsecureTestSigner, "enable-insecure-test-signer", false, "DEVELOPMENT ONLY: create and serve the rekey.io/insecure-test signer, which approves every node client request at create without verifying anything (no TPM, no review). Never enable it on a cluster whose node credentials matter.")
	fs.BoolVar(&o.SynchronousIssuance, "synchronous-issuance", o.SynchronousIssuance, "Sign in the write that approves a request, and approve and sign at create for signers in NodeClient mode, on every replica. When false, or when this replica cannot reach a CA's key, the signer and approver controllers do it in writes of their own.")
	fs.IntVar(&o.RequesterIssuanceBurst, "requester-issuance-burst", o.RequesterIssuanceBurst, "Creates one requester (spec.username) may have decided at create (reviewed, attested, signed) in a burst, per replica; past it, such a create is refused with 429 Too Many Requests and a Retry-After. 0 disables the limit.")
	fs.DurationVar(&o.RequesterIssuanceInterval, "requester-issuance-interval", o.RequesterIssuanceInterval, "After a burst, one more create decided at create per requester per this interval, per replica.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second rekey sends to the host cluster's kube-apiserver (--kubeconfig): the host-cluster controllers' reads and writes, publishing. SubjectAccessReviews have --authorization-webhook-qps.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Requests rekey may send to the host cluster's kube-apiserver in a burst above --kube-api-qps.")
}

// Validate reports every invalid controller option.
func (o *ControllerOptions) Validate() []error {
	var errs []error
	if !strings.HasPrefix(o.PrivatePrefix, "/") || strings.HasSuffix(o.PrivatePrefix, "/") || len(o.PrivatePrefix) < 2 {
		errs = append(errs, fmt.Errorf("--etcd-private-prefix %q must start with '/' and not end with one", o.PrivatePrefix))
	}
	if o.SignerWorkers < 1 {
		errs = append(errs, errors.New("--signer-workers must be at least 1"))
	}
	if o.LeaseDuration < time.Second {
		errs = append(errs, errors.New("--leader-elect-lease-duration must be at least 1s"))
	}
	if o.CleanerInterval < time.Second {
		errs = append(errs, errors.New("--csr-cleaner-interval must be at least 1s"))
	}
	if o.RequesterIssuanceBurst < 0 {
		errs = append(errs, errors.New("--requester-issuance-burst must be 0 (no limit) or more"))
	}
	if o.RequesterIssuanceBurst > 0 && o.RequesterIssuanceInterval < time.Millisecond {
		errs = append(errs, errors.New("--requester-issuance-interval must be at least 1ms"))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, errors.New("--kube-api-qps must be above 0 and --kube-api-burst at least 1"))
	}
	return errs
}

// ApplyTo puts the controllers' configuration into the server's. It runs
// after c.KubeConfig is set, and limits a copy of it (the generic server
// keeps the original for its own clients).
func (o *ControllerOptions) ApplyTo(c *apiserver.ExtraConfig) {
	if c.KubeConfig != nil {
		c.KubeConfig = rest.CopyConfig(c.KubeConfig)
		c.KubeConfig.QPS, c.KubeConfig.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	}
	c.Etcd.PrivatePrefix = o.PrivatePrefix
	c.Controllers.LeaderElect = o.LeaderElect
	c.Controllers.LeaseDuration = o.LeaseDuration
	c.Controllers.Identity = replicaIdentity()
	c.Controllers.SignerWorkers = o.SignerWorkers
	c.Controllers.CleanerInterval = o.CleanerInterval
	c.SynchronousIssuance = o.SynchronousIssuance
	c.RequesterIssuanceBurst = o.RequesterIssuanceBurst
	c.RequesterIssuanceInterval = o.RequesterIssuanceInterval
	c.Controllers.InsecureTestSigner = o.InsecureTestSigner
}

// replicaIdentity names this replica in the leader election.
func replicaIdentity() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s_%x", host, b)
}
