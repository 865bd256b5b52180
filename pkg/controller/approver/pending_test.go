package approver

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

// selectFieldsAsTheServerDoes makes the fake clientset's lists and watches
// of requests honor the state and spec.signerName field selectors (the
// fake ignores field selectors; rekey-apiserver does not).
func selectFieldsAsTheServerDoes(client *fake.Clientset) {
	matches := func(sel fields.Selector, obj runtime.Object) bool {
		csr, ok := obj.(*certv1alpha1.CertificateSigningRequest)
		if !ok {
			return false
		}
		state := "other"
		if certv1alpha1.IsPending(csr) {
			state = certv1alpha1.StatePending
		}
		return sel.Matches(fields.Set{certv1alpha1.StateField: state, certv1alpha1.SignerNameField: csr.Spec.SignerName})
	}
	gvr := certv1alpha1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	client.PrependReactor("list", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := client.Tracker().List(gvr, certv1alpha1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "")
		if err != nil {
			return true, nil, err
		}
		list := obj.(*certv1alpha1.CertificateSigningRequestList)
		sel := a.(k8stesting.ListActionImpl).GetListRestrictions().Fields
		kept := list.Items[:0]
		for i := range list.Items {
			if matches(sel, &list.Items[i]) {
				kept = append(kept, list.Items[i])
			}
		}
		list.Items = kept
		return true, list, nil
	})
	client.PrependWatchReactor("certificatesigningrequests", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(gvr, "")
		if err != nil {
			return true, nil, err
		}
		sel := a.(k8stesting.WatchActionImpl).GetWatchRestrictions().Fields
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) { return e, matches(sel, e.Object) }), nil
	})
}

func pendingCSR(name, signerName string) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certv1alpha1.CertificateSigningRequestSpec{SignerName: signerName}}
}

func signerWithMode(signerName string, mode certv1alpha1.ApprovalMode) *certv1alpha1.Signer {
	return &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(signerName, "/", ":")},
		Spec: certv1alpha1.SignerSpec{SignerName: signerName, Approval: certv1alpha1.SignerApproval{Mode: mode}}}
}

// TestPendingRequestsOfSignersThatApproveWithoutAPerson: the controller
// watches, lists and caches the pending requests of NodeClient and
// NodeServing signers only, each with a field selector naming the signer;
// a signer that starts approving without a person brings what waits for it
// already, one that stops (or goes) takes its requests out of the cache.
func TestPendingRequestsOfSignersThatApproveWithoutAPerson(t *testing.T) {
	const (
		kubelet = "rekey.io/kube-apiserver-client-kubelet"
		serving = "rekey.io/kubelet-serving"
		manual  = "example.org/manual"
	)
	client := fake.NewSimpleClientset(
		pendingCSR("node-1", kubelet), pendingCSR("serving-1", serving), pendingCSR("manual-1", manual),
	)
	selectFieldsAsTheServerDoes(client)
	var mu sync.Mutex
	changed := map[string]int{}
	p := newPendingRequests(client, nil, func(obj any) {
		mu.Lock()
		defer mu.Unlock()
		changed[obj.(*certv1alpha1.CertificateSigningRequest).Name]++
	})
	h := p.signerHandler()
	// Signers seen before the controller runs are watched once it does.
	h.OnAdd(signerWithMode(kubelet, certv1alpha1.ApprovalNodeClient), true)
	h.OnAdd(signerWithMode(serving, certv1alpha1.ApprovalNodeServing), true)
	h.OnAdd(signerWithMode(manual, certv1alpha1.ApprovalManual), true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.run(ctx)

	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var names []string
		for n := range changed {
			names = append(names, n)
		}
		sort.Strings(names)
		return names
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			requests, signers := p.cached()
			t.Fatalf("%s: handed %v, %d requests cached for %d signers", what, seen(), requests, signers)
		}
	}
	waitFor("the requests of the two signers that approve without a person", func() bool {
		requests, signers := p.cached()
		return strings.Join(seen(), ",") == "node-1,serving-1" && requests == 2 && signers == 2
	})
	if _, err := p.get("manual-1"); err == nil {
		t.Fatal("a Manual signer's request is cached")
	}
	if csr, err := p.get("node-1"); err != nil || csr.Spec.SignerName != kubelet {
		t.Fatalf("get(node-1) = %v, %v", csr, err)
	}

	// Every list and watch asked the server for one signer's pending
	// requests, never for all of them.
	var selectors []string
	for _, a := range client.Actions() {
		if a.GetResource().Resource != "certificatesigningrequests" {
			continue
		}
		var sel string
		switch a := a.(type) {
		case k8stesting.ListActionImpl:
			sel = a.GetListRestrictions().Fields.String()
		case k8stesting.WatchActionImpl:
			sel = a.GetWatchRestrictions().Fields.String()
		default:
			continue
		}
		if !strings.Contains(sel, "state=Pending") || !strings.Contains(sel, "spec.signerName=") || strings.Contains(sel, manual) {
			t.Errorf("asked for requests with field selector %q", sel)
		}
		selectors = append(selectors, sel)
	}
	if len(selectors) < 4 {
		t.Fatalf("expected a list and a watch per watched signer, got %v", selectors)
	}

	// The Manual signer starts approving nodes: what waits for it comes.
	h.OnUpdate(nil, signerWithMode(manual, certv1alpha1.ApprovalNodeClient))
	waitFor("the waiting request of a signer switched to NodeClient", func() bool {
		_, err := p.get("manual-1")
		return err == nil && strings.Join(seen(), ",") == "manual-1,node-1,serving-1"
	})
	// A new pending request of a watched signer is handed on.
	if _, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, pendingCSR("node-2", kubelet), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("a new request of a watched signer", func() bool { _, err := p.get("node-2"); return err == nil })

	// Switched back to Manual, and the serving signer deleted: their
	// requests leave the cache.
	h.OnUpdate(nil, signerWithMode(manual, certv1alpha1.ApprovalManual))
	h.OnDelete(signerWithMode(serving, certv1alpha1.ApprovalNodeServing))
	waitFor("only the kubelet signer's requests", func() bool {
		requests, signers := p.cached()
		return requests == 2 && signers == 1
	})
	for _, name := range []string{"manual-1", "serving-1"} {
		if _, err := p.get(name); err == nil {
			t.Errorf("%s still cached after its signer stopped approving without a person", name)
		}
	}
	all, _ := p.list()
	if len(all) != 2 {
		t.Fatalf("list: %d requests, want 2", len(all))
	}
}
