package main

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// bootstrapBurst has n simulated nodes ask for kubelet client certificates
// at once, through the aggregation layer, each authenticated as
// system:node:<name> in system:nodes (by impersonation from the admin, so one
// connection pool serves every node). rekey's approver approves each after a
// SubjectAccessReview against kube-apiserver; the signer signs. The result is
// the time from the first request to the last certificate.
func bootstrapBurst(ctx context.Context, cfg *rest.Config, n int) (result, error) {
	client := clientset.NewForConfigOrDie(cfg)
	nodes := make([]string, n)
	requests := makeRequests(n, "", func(i int) pkix.Name {
		nodes[i] = fmt.Sprintf("burst-node-%05d", i)
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
	tgt := &rekeyTarget{client: client}
	if err := tgt.Watch(ctx, func(name string, failed bool) {
		if _, ok := remaining.LoadAndDelete(name); ok {
			if left.Add(-1) == 0 {
				doneAt = time.Now()
				close(allDone)
			}
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
				csr := &certv1alpha1.CertificateSigningRequest{
					ObjectMeta: metav1.ObjectMeta{Name: "burst-" + nodes[i]},
					Spec: certv1alpha1.CertificateSigningRequestSpec{
						Request:    requests[i],
						SignerName: "rekey.io/kube-apiserver-client-kubelet",
						Usages:     []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageClientAuth},
					},
				}
				// As the generated client sends it (protobuf), with the
				// node's identity in impersonation headers.
				err := client.CertificatesV1alpha1().RESTClient().Post().UseProtobufAsDefault().Resource("certificatesigningrequests").
					SetHeader("Impersonate-User", "system:node:"+nodes[i]).
					SetHeader("Impersonate-Group", "system:nodes").
					Body(csr).Do(ctx).Error()
				if err != nil {
					errs.Add(1)
					fmt.Fprintf(os.Stderr, "  burst create: %v\n", err)
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
	r := result{Name: fmt.Sprintf("bootstrap burst, %d nodes (NodeClient auto-approval via SubjectAccessReview, aggregated)", n), Issued: issued, Errors: int(errs.Load())}
	if left.Load() == 0 {
		r.Elapsed = doneAt.Sub(start)
	} else {
		r.Elapsed = time.Since(start)
	}
	r.Throughput = float64(issued) / r.Elapsed.Seconds()
	fmt.Fprintf(os.Stderr, "  all %d created in %s; %d issued in %s\n", n, created.Round(time.Millisecond), issued, r.Elapsed.Round(time.Millisecond))
	return r, nil
}
