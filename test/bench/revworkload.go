package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The read workloads of the revocation benchmark. The webhook costs each
// request about the same, whatever the request, so how much of a read it
// is depends on what the read costs without it: the GET of one tiny
// ConfigMap is the worst case, a LIST of a namespace's ConfigMaps and a
// kubelet's reads (its Node, its pods) are heavier.
const (
	revListNamespace  = "bench-revocation-list"
	revListConfigMaps = 100
	revListBytes      = 1024

	revMixedNamespace = "bench-revocation-mixed"
	revMixedNodes     = 5
	revMixedPods      = 50
	revMixedSA        = "bench-app"
)

// readWorkload is what each client of the read workload does, one request
// at a time: setup makes its objects (once, untimed, as the admin), read
// makes the client's k-th request.
type readWorkload struct {
	name     string
	describe string
	setup    func(ctx context.Context, admin kubernetes.Interface) error
	read     func(ctx context.Context, c kubernetes.Interface, client, k int) error
}

// revocationWorkloads are the values of -revocation-workload.
var revocationWorkloads = []string{"get", "list", "mixed"}

func newReadWorkload(name string) (readWorkload, error) {
	switch name {
	case "get":
		return readWorkload{
			name:     name,
			describe: fmt.Sprintf("GET of one ConfigMap (%s/%s, one 5-byte value)", revNamespace, revConfigMap),
			setup:    func(context.Context, kubernetes.Interface) error { return nil },
			read: func(ctx context.Context, c kubernetes.Interface, _, _ int) error {
				return readOnce(ctx, c)
			},
		}, nil
	case "list":
		return readWorkload{
			name: name,
			describe: fmt.Sprintf("LIST of the ConfigMaps of namespace %s: %d ConfigMaps of %d bytes of data each",
				revListNamespace, revListConfigMaps, revListBytes),
			setup: listObjects,
			read: func(ctx context.Context, c kubernetes.Interface, _, _ int) error {
				l, err := c.CoreV1().ConfigMaps(revListNamespace).List(ctx, metav1.ListOptions{})
				if err == nil && len(l.Items) != revListConfigMaps {
					err = fmt.Errorf("listed %d ConfigMaps in %s, want %d", len(l.Items), revListNamespace, revListConfigMaps)
				}
				return err
			},
		}, nil
	case "mixed":
		return readWorkload{
			name: name,
			describe: fmt.Sprintf("kubelet-like, taking turns: GET of the client's Node, then LIST of the pods of namespace %s with fieldSelector spec.nodeName=<that node> "+
				"(%d pods over %d Nodes, %d a node; client i is node i mod %d); each request counts as a read",
				revMixedNamespace, revMixedPods, revMixedNodes, revMixedPods/revMixedNodes, revMixedNodes),
			setup: mixedObjects,
			read: func(ctx context.Context, c kubernetes.Interface, client, k int) error {
				node := mixedNode(client % revMixedNodes)
				if k%2 == 0 {
					_, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
					return err
				}
				l, err := c.CoreV1().Pods(revMixedNamespace).List(ctx, metav1.ListOptions{
					FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
				})
				if err == nil && len(l.Items) != revMixedPods/revMixedNodes {
					err = fmt.Errorf("listed %d pods on %s, want %d", len(l.Items), node, revMixedPods/revMixedNodes)
				}
				return err
			},
		}, nil
	}
	return readWorkload{}, fmt.Errorf("-revocation-workload: %q is none of %s", name, strings.Join(revocationWorkloads, ", "))
}

func mixedNode(i int) string { return fmt.Sprintf("bench-revocation-node-%d", i) }

// listObjects: namespace revListNamespace with revListConfigMaps
// ConfigMaps that revGroup may list.
func listObjects(ctx context.Context, admin kubernetes.Interface) error {
	if err := readerNamespace(ctx, admin, revListNamespace, "configmaps"); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "revocation: creating %d ConfigMaps in %s\n", revListConfigMaps, revListNamespace)
	return createAll(revListConfigMaps, func(i int) error {
		name := fmt.Sprintf("config-%03d", i)
		_, err := admin.CoreV1().ConfigMaps(revListNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bench", "index": fmt.Sprint(i)}},
			Data:       map[string]string{"config.yaml": strings.Repeat("x", revListBytes)},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ConfigMap %s/%s: %w", revListNamespace, name, err)
		}
		return nil
	})
}

// mixedObjects: revMixedNodes Nodes (no kubelet) that revGroup may get,
// and namespace revMixedNamespace with revMixedPods pods bound to them,
// round robin, that revGroup may list. The pods stay Pending.
func mixedObjects(ctx context.Context, admin kubernetes.Interface) error {
	for i := range revMixedNodes {
		_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: mixedNode(i)}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Node %s: %w", mixedNode(i), err)
		}
	}
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-revocation-nodes"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the ClusterRole bench-revocation-nodes: %w", err)
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-revocation-nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "bench-revocation-nodes"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: revGroup}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding bench-revocation-nodes to %s: %w", revGroup, err)
	}
	if err := readerNamespace(ctx, admin, revMixedNamespace, "pods"); err != nil {
		return err
	}
	// The ServiceAccount admission plugin wants the pods' ServiceAccount,
	// and no controller manager makes one here.
	_, err = admin.CoreV1().ServiceAccounts(revMixedNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: revMixedSA}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", revMixedNamespace, revMixedSA, err)
	}
	fmt.Fprintf(os.Stderr, "revocation: creating %d pods on %d Nodes in %s\n", revMixedPods, revMixedNodes, revMixedNamespace)
	return createAll(revMixedPods, func(i int) error {
		name := fmt.Sprintf("app-%03d", i)
		// A pod as a Deployment's would look: labels, one container with
		// ports, env, resources and probes.
		_, err := admin.CoreV1().Pods(revMixedNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bench", "pod-template-hash": "5d4f8c7b9"}},
			Spec: corev1.PodSpec{
				NodeName: mixedNode(i % revMixedNodes), ServiceAccountName: revMixedSA, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{
					Name: "app", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53",
					Args:  []string{"netexec", "--http-port=8080"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Env: []corev1.EnvVar{
						{Name: "LOG_LEVEL", Value: "info"},
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
					},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
				}},
			},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating pod %s/%s: %w", revMixedNamespace, name, err)
		}
		return nil
	})
}

// readerNamespace: a namespace whose resource revGroup may get and list.
func readerNamespace(ctx context.Context, admin kubernetes.Interface, ns, resource string) error {
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	_, err = admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-revocation-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Role %s/bench-revocation-reader: %w", ns, err)
	}
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-revocation-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "bench-revocation-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: revGroup}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding %s/bench-revocation-reader to %s: %w", ns, revGroup, err)
	}
	return nil
}

// createAll runs create for 0..n-1, 16 at a time, and returns the first
// error and how many failed.
func createAll(n int, create func(i int) error) error {
	var failed atomic.Int64
	var first atomic.Pointer[error]
	parallel(n, 16, func(i int) {
		if err := create(i); err != nil {
			failed.Add(1)
			first.CompareAndSwap(nil, &err)
		}
	})
	if p := first.Load(); p != nil {
		return fmt.Errorf("%d of %d not created, the first: %w", failed.Load(), n, *p)
	}
	return nil
}
