package main

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// burstAPI is where the burst's nodes ask: rekey (through the aggregation
// layer) or certificates.k8s.io with kube-controller-manager, for comparison.
type burstAPI struct {
	name string
	// create posts node's request, and says whether the response already
	// holds the certificate.
	create func(ctx context.Context, node string, request []byte) (bool, error)
	// watch reports finished requests, named "burst-<node>".
	watch target
}

// burstKind is one way nodes ask for their client certificates: with a
// shared bootstrap token (kubeadm's join), or each as itself (renewal).
type burstKind struct {
	name, description string
	// target says the target is measured on this kind; the others
	// are reported beside it.
	target bool
	// apis are rekey's, then (if measured) the native one.
	apis []burstAPI
}

// burstSet is one kind's combined bursts, rekey's then native's.
type burstSet struct {
	kind    burstKind
	results []result
}

// bootstrapKind: every node authenticates with the same bootstrap token
// (system:bootstrap:<id> in system:bootstrappers), as nodes joining with
// one `kubeadm token create` do, and asks for its first certificate:
// rekey through certificatesigningrequests/NAME/nodeclient (rekey-agent's
// bootstrap path), certificates.k8s.io by a create that
// kube-controller-manager's csrapproving approves after its
// SubjectAccessReview of "create certificatesigningrequests/nodeclient".
func bootstrapKind(rekey clientset.Interface, native kubernetes.Interface) burstKind {
	asToken := func(r *rest.Request, _ string) *rest.Request {
		return r.UseProtobufAsDefault().Resource("certificatesigningrequests")
	}
	k := nodeClientKind("bootstrap", "one bootstrap token shared by the nodes (system:bootstrappers), first certificate",
		"nodeclient", asToken, rekey, native)
	k.target = true
	return k
}

// renewalKind: every node authenticates as itself (system:node:<name> in
// system:nodes, by impersonation from the admin, so that one connection
// pool serves every node) and asks for a certificate for itself: rekey
// through certificatesigningrequests/NAME/selfnodeclient (rekey-agent's
// renewal path), certificates.k8s.io by a create that csrapproving
// approves after its SubjectAccessReview of "selfnodeclient".
func renewalKind(rekey clientset.Interface, native kubernetes.Interface) burstKind {
	return nodeClientKind("renewal", "each node as itself (system:node:<name>), every request from a new identity",
		"selfnodeclient", impersonateNode, rekey, native)
}

// nodeClientKind has rekey's nodes create through the subresource and
// native's through certificates.k8s.io, each request made by as (which
// picks the node's identity and the resource).
func nodeClientKind(name, description, subresource string, as func(r *rest.Request, node string) *rest.Request, rekey clientset.Interface, native kubernetes.Interface) burstKind {
	k := burstKind{
		name:        name,
		description: description,
		apis: []burstAPI{{
			name: "rekey (aggregated; certificatesigningrequests/NAME/" + subresource + ", approved by the create's authorization)",
			create: func(ctx context.Context, node string, request []byte) (bool, error) {
				return rekeyNodeClientCreate(ctx, as(rekey.CertificatesV1alpha1().RESTClient().Post(), node), subresource, node, request)
			},
			watch: &rekeyTarget{client: rekey},
		}},
	}
	if native != nil {
		k.apis = append(k.apis, burstAPI{
			name: "native (kube-controller-manager csrapproving: " + subresource + " SubjectAccessReview)",
			create: func(ctx context.Context, node string, request []byte) (bool, error) {
				return false, nativeNodeClientCreate(ctx, as(native.CertificatesV1().RESTClient().Post(), node), node, request)
			},
			watch: &nativeTarget{client: native},
		})
	}
	return k
}

func rekeyNodeClientCreate(ctx context.Context, post *rest.Request, subresource, node string, request []byte) (bool, error) {
	csr := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "burst-" + node},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:    request,
			SignerName: "rekey.io/kube-apiserver-client-kubelet",
			Usages:     []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
		},
	}
	out := &certv1alpha1.CertificateSigningRequest{}
	err := post.Name(csr.Name).SubResource(subresource).Body(csr).Do(ctx).Into(out)
	return err == nil && len(out.Status.Certificate) > 0, err
}

func nativeNodeClientCreate(ctx context.Context, post *rest.Request, node string, request []byte) error {
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "burst-" + node},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    request,
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth},
		},
	}
	return post.Body(csr).Do(ctx).Error()
}

// impersonateNode sends the request as system:node:<node> in system:nodes,
// in protobuf as the generated clients do.
func impersonateNode(r *rest.Request, node string) *rest.Request {
	return r.UseProtobufAsDefault().Resource("certificatesigningrequests").
		SetHeader("Impersonate-User", "system:node:"+node).
		SetHeader("Impersonate-Group", "system:nodes")
}

// bootstrapBurst has n simulated nodes ask for kubelet client certificates
// at once, as api's create asks. The result is the time from the first
// request to the last certificate.
func bootstrapBurst(ctx context.Context, api burstAPI, prefix string, n int) (result, error) {
	// The watch ends with the burst, before the servers are stopped.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes := make([]string, n)
	requests := makeRequests(n, "", func(i int) pkix.Name {
		nodes[i] = fmt.Sprintf("%s-node-%05d", prefix, i)
		return pkix.Name{CommonName: "system:node:" + nodes[i], Organization: []string{"system:nodes"}}
	})
	var remaining sync.Map
	for i := range nodes {
		remaining.Store("burst-"+nodes[i], struct{}{})
	}
	var left atomic.Int64
	left.Store(int64(n))
	allDone := make(chan struct{})
	var doneAt time.Time
	var doneMu sync.Mutex
	finish := func(name string) {
		if _, ok := remaining.LoadAndDelete(name); ok {
			if left.Add(-1) == 0 {
				doneMu.Lock()
				doneAt = time.Now()
				doneMu.Unlock()
				close(allDone)
			}
		}
	}
	if err := api.watch.Watch(ctx, func(name string, failed bool) {
		if !failed {
			finish(name)
		}
	}); err != nil {
		return result{}, err
	}
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	var errs atomic.Int64
	work := make(chan int, n)
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				issued, err := api.create(ctx, nodes[i], requests[i])
				if err != nil {
					errs.Add(1)
					fmt.Fprintf(os.Stderr, "  burst create: %v\n", err)
				}
				if issued {
					finish("burst-" + nodes[i])
				}
			}
		}()
	}
	wg.Wait()
	created := time.Since(start)
	select {
	case <-allDone:
	case <-time.After(120 * time.Second):
	}
	issued := n - int(left.Load())
	r := result{Name: api.name, Issued: issued, Errors: int(errs.Load()), Requested: n}
	if left.Load() == 0 {
		doneMu.Lock()
		r.Elapsed = doneAt.Sub(start)
		doneMu.Unlock()
	} else {
		r.Elapsed = time.Since(start)
	}
	r.Throughput = float64(issued) / r.Elapsed.Seconds()
	fmt.Fprintf(os.Stderr, "  all %d created in %s; %d issued in %s\n", n, created.Round(time.Millisecond), issued, r.Elapsed.Round(time.Millisecond))
	return r, nil
}

// combineBursts sums one API's bursts: issued, errors, CPU, and time (the
// mean time per burst is Elapsed / len(Rounds)); Rounds keeps each burst's
// time to its last certificate, in seconds.
func combineBursts(rs []result) result {
	out := result{Name: rs[0].Name, CPUByProcess: map[string]float64{}}
	for _, r := range rs {
		out.Issued += r.Issued
		out.Errors += r.Errors
		out.Requested += r.Requested
		out.Elapsed += r.Elapsed
		out.Rounds = append(out.Rounds, r.Elapsed.Seconds())
		for name, v := range r.CPUByProcess {
			out.CPUByProcess[name] += v
		}
	}
	out.Throughput = float64(out.Issued) / out.Elapsed.Seconds()
	return out
}

// perBurst is the mean time of one burst.
func (r result) perBurst() time.Duration {
	if len(r.Rounds) == 0 {
		return r.Elapsed
	}
	return r.Elapsed / time.Duration(len(r.Rounds))
}
