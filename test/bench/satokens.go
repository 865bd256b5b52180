package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/utils/ptr"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/jwtkey"
	"rekey.io/rekey/test/framework"
)

// The service-account token benchmark's objects.
const (
	satCA        = "service-account-tokens"
	satNamespace = "bench-satokens"
	satAccount   = "bench-sa"
	satSigner    = "bench-jwt-signer"
	// satSignerDirect is kube-apiserver D's signer, whose kubeconfig
	// points at rekey-apiserver itself, not at kube-apiserver A.
	satSignerDirect = "bench-jwt-signer-direct"
	// satExpiration is every TokenRequest's expirationSeconds, and the
	// CA's maxTokenExpiration (which the signer's Metadata gives
	// kube-apiserver as its cap).
	satExpiration = time.Hour
	// satIssuer is the framework's --service-account-issuer.
	satIssuer = "https://kubernetes.default.svc"
)

// satokenResult is the service-account token benchmark (issue #33):
// TokenRequest through kube-apiservers that sign in process with a key file
// and through two whose --service-account-signing-endpoint is rekey-agent
// jwt-signer (one signer reaching signjwt through kube-apiserver's
// aggregator, one straight at rekey-apiserver), and Sign calls made
// straight on the signers' sockets beside the same signature made in
// process.
type satokenResult struct {
	Clients int
	Window  time.Duration
	Rounds  int
	// TokenRequest is per kube-apiserver: the ES256 key file, the
	// endpoint through the aggregator, the cluster's RSA-2048 key file,
	// the endpoint straight at rekey-apiserver (satKeyFileES256, ...).
	TokenRequest []readResult
	// Sign is per signer and number of callers (satSignEndpoint1, ...).
	Sign []readResult
	// KeyID is the CA's key that signed through the endpoint.
	KeyID string
}

// The rows of satokenResult.TokenRequest and .Sign.
const (
	satKeyFileES256 = iota
	satEndpoint
	satKeyFileRSA
	satEndpointDirect
)

const (
	satSignEndpoint1 = iota
	satSignInProcess1
	satSignEndpointN
	satSignInProcessN
	satSignDirect1
	satSignDirectN
)

// satokensBench runs the benchmark on a control plane of its own: etcd,
// kube-apiserver A (the framework's: RSA-2048 key file, as kubeadm makes
// sa.key; rekey-apiserver's and the signer's kube-apiserver) with
// rekey-apiserver aggregated, and on the same etcd kube-apiserver B with an
// ECDSA P-256 key file, kube-apiserver C with
// --service-account-signing-endpoint on rekey-agent jwt-signer, which
// signs through signjwt with the CA service-account-tokens (ECDSA P-256,
// Etcd key store) reached through A's aggregator, and kube-apiserver D,
// the same but with a jwt-signer whose kubeconfig is rekey-apiserver's own
// address and serving CA (rekey-apiserver authenticates its client
// certificate with the delegated client CA, A's --client-ca-file). Every
// server runs the whole time; the configurations take turns in each round.
func satokensBench(ctx context.Context, dir, rekeyBin string, clients, rounds int, window time.Duration) (*satokenResult, error) {
	agentBin, err := framework.ReleaseBinaryPath("rekey-agent")
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "satokens: starting etcd, kube-apiserver and rekey-apiserver")
	cluster, err := framework.StartCluster(dir, rekeyBin, framework.ClusterOptions{
		RekeyArgs: []string{"--kube-api-qps=5000", "--kube-api-burst=10000"},
		Logf:      func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	if err != nil {
		return nil, err
	}
	defer cluster.Stop()
	adminCfg, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		return nil, err
	}
	adminCfg.QPS, adminCfg.Burst = -1, 0
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	rekey := clientset.NewForConfigOrDie(adminCfg)

	kid, err := satokenCA(ctx, cluster, rekey)
	if err != nil {
		return nil, err
	}
	if err := satokenAccount(ctx, admin); err != nil {
		return nil, err
	}
	signer, err := startSATokenSigner(ctx, cluster, agentBin, satSigner, cluster.KubeAPIURL, nil)
	if err != nil {
		return nil, err
	}
	defer signer.process.Stop(5 * time.Second)
	rekeyURL := fmt.Sprintf("https://127.0.0.1:%d", cluster.RekeyPort)
	direct, err := startSATokenSigner(ctx, cluster, agentBin, satSignerDirect, rekeyURL, cluster.RekeyServingCA.CertPEM())
	if err != nil {
		return nil, err
	}
	defer direct.process.Stop(5 * time.Second)

	ecKey, ecKeyFile, ecPubFile, err := writeECKeyFiles(dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "satokens: starting kube-apiserver B (ECDSA P-256 key file) on the same etcd")
	keyFileES, err := cluster.StartSecondKubeAPIServer("kube-apiserver-es256-key-file", "",
		// --service-account-key-file adds to the cluster's (sa.pub stays
		// a verification key); the signing key file's last value wins.
		"--service-account-key-file="+ecPubFile, "--service-account-signing-key-file="+ecKeyFile)
	if err != nil {
		return nil, err
	}
	defer keyFileES.Stop()
	fmt.Fprintln(os.Stderr, "satokens: starting kube-apiserver C (--service-account-signing-endpoint on rekey-agent jwt-signer) on the same etcd")
	endpoint, err := cluster.StartSecondKubeAPIServer("kube-apiserver-signing-endpoint", signer.socket)
	if err != nil {
		return nil, err
	}
	defer endpoint.Stop()
	fmt.Fprintln(os.Stderr, "satokens: starting kube-apiserver D (--service-account-signing-endpoint on a jwt-signer that reaches rekey-apiserver directly) on the same etcd")
	endpointDirect, err := cluster.StartSecondKubeAPIServer("kube-apiserver-signing-endpoint-direct", direct.socket)
	if err != nil {
		return nil, err
	}
	defer endpointDirect.Stop()

	ecKID, err := jwtkey.KeyID(&ecKey.PublicKey)
	if err != nil {
		return nil, err
	}
	rsaKID, err := saPubKeyID(cluster)
	if err != nil {
		return nil, err
	}
	servers := []struct {
		name   string
		client kubernetes.Interface
		kid    string
	}{
		satKeyFileES256:   {"kube-apiserver B: --service-account-signing-key-file, ECDSA P-256 (ES256), in process", tokenClient(keyFileES.AdminConfig), ecKID},
		satEndpoint:       {"kube-apiserver C: --service-account-signing-endpoint → rekey-agent jwt-signer → signjwt on rekey-apiserver (ES256, Etcd key store)", tokenClient(endpoint.AdminConfig), kid},
		satKeyFileRSA:     {"kube-apiserver A: --service-account-signing-key-file, RSA-2048 (RS256, kubeadm's default), in process", tokenClient(adminCfg), rsaKID},
		satEndpointDirect: {"kube-apiserver D: --service-account-signing-endpoint → rekey-agent jwt-signer → signjwt on rekey-apiserver directly, not through A (ES256, Etcd key store)", tokenClient(endpointDirect.AdminConfig), kid},
	}
	// Each kube-apiserver signs with the key it should: a token through C
	// or D carries the CA's kid, so their rounds measure rekey's paths.
	for _, s := range servers {
		if err := framework.EventuallyErr(time.Minute, func(ctx context.Context) error {
			got, err := tokenKeyID(ctx, s.client)
			if err != nil {
				return err
			}
			if got != s.kid {
				return framework.Permanent(fmt.Errorf("%s: a token's kid is %q, want %q", s.name, got, s.kid))
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("TokenRequest: %w", err)
		}
	}
	conn, err := grpc.NewClient("unix://"+signer.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialling the signer's socket: %w", err)
	}
	defer func() { _ = conn.Close() }()
	grpcSigner := externaljwtv1.NewExternalJWTSignerClient(conn)
	connDirect, err := grpc.NewClient("unix://"+direct.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialling the direct signer's socket: %w", err)
	}
	defer func() { _ = connDirect.Close() }()
	grpcDirect := externaljwtv1.NewExternalJWTSignerClient(connDirect)
	local, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	localKID, err := jwtkey.KeyID(&local.PublicKey)
	if err != nil {
		return nil, err
	}

	pids := func() map[string]int {
		return map[string]int{
			"kube-apiserver A": cluster.KubeAPIServer.Pid(), "kube-apiserver B": keyFileES.Process.Pid(), "kube-apiserver C": endpoint.Process.Pid(),
			"kube-apiserver D": endpointDirect.Process.Pid(),
			"rekey-apiserver":  cluster.Rekey.Pid(), "jwt-signer": signer.process.Pid(), "jwt-signer D": direct.process.Pid(), "etcd": cluster.Etcd.Pid(),
			// The callers, and the signer of the in-process rows.
			"bench": os.Getpid(),
		}
	}
	res := &satokenResult{Clients: clients, Window: window, Rounds: rounds, KeyID: kid,
		TokenRequest: make([]readResult, len(servers)), Sign: make([]readResult, 6)}
	for i, s := range servers {
		res.TokenRequest[i] = readResult{Name: s.name, CPU: map[string]float64{}}
	}
	signs := []struct {
		name    string
		callers int
		sign    func(ctx context.Context, claims string) error
	}{
		satSignEndpoint1:  {"jwt-signer's socket (gRPC Sign → signjwt)", 1, endpointSign(grpcSigner, kid)},
		satSignInProcess1: {"in process (jwtkey.Sign, ES256 key in memory: a key file's cost)", 1, localSign(local, localKID)},
		satSignEndpointN:  {"jwt-signer's socket (gRPC Sign → signjwt)", clients, endpointSign(grpcSigner, kid)},
		satSignInProcessN: {"in process (jwtkey.Sign, ES256 key in memory: a key file's cost)", clients, localSign(local, localKID)},
		satSignDirect1:    {"direct jwt-signer's socket (gRPC Sign → signjwt on rekey-apiserver, not through A)", 1, endpointSign(grpcDirect, kid)},
		satSignDirectN:    {"direct jwt-signer's socket (gRPC Sign → signjwt on rekey-apiserver, not through A)", clients, endpointSign(grpcDirect, kid)},
	}
	for i, s := range signs {
		res.Sign[i] = readResult{Name: s.name, CPU: map[string]float64{}}
	}
	measure := func(t *readResult, callers int, op func(ctx context.Context) error) {
		// A second first, not counted: connections and caches warm.
		closedLoop(ctx, callers, time.Second, func(ctx context.Context, _, _ int) error { return op(ctx) })
		cpu0 := map[string]float64{}
		for name, pid := range pids() {
			cpu0[name] = cpuSeconds(pid)
		}
		round := closedLoop(ctx, callers, window, func(ctx context.Context, _, _ int) error { return op(ctx) })
		for name, pid := range pids() {
			t.CPU[name] += cpuSeconds(pid) - cpu0[name]
		}
		t.Requests += round.Requests
		t.Errors += round.Errors
		t.Elapsed += round.Elapsed
		t.Lat = append(t.Lat, round.Lat...)
		t.Rounds = append(t.Rounds, round.rate())
		fmt.Fprintf(os.Stderr, "  %s: %d, %d errors, %.0f/s\n", t.Name, round.Requests, round.Errors, round.rate())
	}
	for r := 0; r < rounds; r++ {
		fmt.Fprintf(os.Stderr, "satokens: round %d/%d\n", r+1, rounds)
		for j := range servers {
			idx := turn(r, j, len(servers))
			client := servers[idx].client
			measure(&res.TokenRequest[idx], clients, func(ctx context.Context) error {
				_, err := requestToken(ctx, client)
				return err
			})
		}
		// Sign on the two sockets and in process take turns too, one
		// caller and then many.
		for _, group := range [][3]int{{satSignEndpoint1, satSignInProcess1, satSignDirect1}, {satSignEndpointN, satSignInProcessN, satSignDirectN}} {
			for j := range group {
				idx := group[turn(r, j, len(group))]
				s := signs[idx]
				measure(&res.Sign[idx], s.callers, func(ctx context.Context) error { return s.sign(ctx, satClaims()) })
			}
		}
	}
	return res, nil
}

// satokenCA makes the ServiceAccountTokens CA, with the cluster's key
// file as a legacy key (as a migration has it), and returns its kid once
// it is Ready.
func satokenCA(ctx context.Context, cluster *framework.Cluster, rekey clientset.Interface) (string, error) {
	saPub, err := os.ReadFile(filepath.Join(cluster.Dir, "pki", "sa.pub"))
	if err != nil {
		return "", err
	}
	cas := rekey.RotationV1alpha1().CertificateAuthorities()
	_, err = cas.Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: satCA},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{
			CommonName:   "bench service-account token key",
			KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			KeyStore:     rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreEtcd},
			Purpose:      rotationv1alpha1.PurposeServiceAccountTokens,
			ServiceAccountTokens: &rotationv1alpha1.ServiceAccountTokenKeys{
				MaxTokenExpiration: &metav1.Duration{Duration: satExpiration},
				LegacyPublicKeys: []rotationv1alpha1.LegacyPublicKey{{
					PublicKey: string(saPub), ExpireTime: metav1.NewTime(time.Now().Add(2 * time.Hour)),
				}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating CertificateAuthority %s: %w", satCA, err)
	}
	var kid string
	err = framework.EventuallyErr(2*time.Minute, func(ctx context.Context) error {
		ca, err := cas.Get(ctx, satCA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !apimeta.IsStatusConditionTrue(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady) || ca.Status.Current == nil || ca.Status.Current.TokenKeyID == "" {
			return fmt.Errorf("CertificateAuthority %s not Ready with a tokenKeyID yet", satCA)
		}
		kid = ca.Status.Current.TokenKeyID
		return nil
	})
	return kid, err
}

// satokenAccount makes the ServiceAccount whose tokens are requested (no
// kube-controller-manager runs to make it).
func satokenAccount(ctx context.Context, admin kubernetes.Interface) error {
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: satNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", satNamespace, err)
	}
	_, err = admin.CoreV1().ServiceAccounts(satNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: satAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", satNamespace, satAccount, err)
	}
	return nil
}

// satSignerProc is a running rekey-agent jwt-signer.
type satSignerProc struct {
	process *framework.Process
	socket  string
}

// startSATokenSigner runs rekey-agent jwt-signer (the release build) as a
// control-plane host runs it: a client-certificate user of its own (name)
// bound to rekey:jwt-signer, its kubeconfig at server, kube-apiserver A
// (serverCA nil: A's serving CA) or rekey-apiserver itself (serverCA its
// serving CA; the client certificate is of A's client CA, which
// rekey-apiserver's delegated authentication trusts). The signer must be
// up before the kube-apiserver that dials it starts. It reports no
// TrustConsumer (--trust-consumer=): nothing rotates here, and reporting
// is not on the Sign path. It waits until the signer wrote its cache and
// listens.
func startSATokenSigner(ctx context.Context, cluster *framework.Cluster, bin, name, server string, serverCA []byte) (*satSignerProc, error) {
	user := "rekey:jwt-signer:" + name
	kubeconfig, err := cluster.UserKubeconfigAt(server, user, "rekey:jwt-signers")
	if err != nil {
		return nil, err
	}
	if serverCA != nil {
		// UserKubeconfigAt trusts kube-apiserver's serving CA; rekey's
		// is another.
		kc, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			return nil, err
		}
		for _, c := range kc.Clusters {
			c.CertificateAuthority, c.CertificateAuthorityData = "", serverCA
		}
		if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
			return nil, fmt.Errorf("writing %s: %w", kubeconfig, err)
		}
	}
	_, err = cluster.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench:" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: framework.JWTSignerRole},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("binding %s to %s: %w", user, framework.JWTSignerRole, err)
	}
	s := &satSignerProc{socket: filepath.Join(cluster.Dir, name+".sock")}
	cache := filepath.Join(cluster.Dir, name+"-cache.json")
	fmt.Fprintf(os.Stderr, "satokens: starting rekey-agent jwt-signer %s (kubeconfig at %s)\n", name, server)
	if s.process, err = framework.Start(cluster.Dir, name, bin, "jwt-signer",
		"--kubeconfig="+kubeconfig, "--certificate-authority="+satCA,
		"--socket="+s.socket, "--cache-file="+cache, "--trust-consumer="); err != nil {
		return nil, err
	}
	if err := framework.EventuallyErr(time.Minute, func(context.Context) error {
		if s.process.Exited() {
			return framework.Permanent(fmt.Errorf("rekey-agent jwt-signer exited:\n%s", s.process.LogTail(4000)))
		}
		if fi, err := os.Stat(cache); err != nil || fi.Size() == 0 {
			return fmt.Errorf("cache file %s: %v", cache, err)
		}
		_, err := os.Stat(s.socket)
		return err
	}); err != nil {
		s.process.Stop(time.Second)
		return nil, fmt.Errorf("rekey-agent jwt-signer: %w", err)
	}
	return s, nil
}

// writeECKeyFiles writes an ECDSA P-256 key and its public key as
// kube-apiserver's key-file flags read them.
func writeECKeyFiles(dir string) (*ecdsa.PrivateKey, string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, "", "", err
	}
	keyFile, pubFile := filepath.Join(dir, "pki", "sa-es256.key"), filepath.Join(dir, "pki", "sa-es256.pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return nil, "", "", err
	}
	return key, keyFile, pubFile, nil
}

// saPubKeyID is the kid of the cluster's key file.
func saPubKeyID(cluster *framework.Cluster) (string, error) {
	data, err := os.ReadFile(filepath.Join(cluster.Dir, "pki", "sa.pub"))
	if err != nil {
		return "", err
	}
	pub, err := jwtkey.ParsePublicKeyPEM(string(data))
	if err != nil {
		return "", fmt.Errorf("the cluster's sa.pub: %w", err)
	}
	return jwtkey.KeyID(pub)
}

// tokenClient is a client of one kube-apiserver without client-side
// throttling: the benchmark is the server's.
func tokenClient(cfg *rest.Config) kubernetes.Interface {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	return kubernetes.NewForConfigOrDie(cfg)
}

// requestToken is one TokenRequest for the benchmark's ServiceAccount, as
// a kubelet makes one for a pod's projected token (without the pod
// binding: no pod is needed), and returns the token.
func requestToken(ctx context.Context, client kubernetes.Interface) (string, error) {
	tr, err := client.CoreV1().ServiceAccounts(satNamespace).CreateToken(ctx, satAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(satExpiration / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	if tr.Status.Token == "" {
		return "", errors.New("TokenRequest answered no token")
	}
	return tr.Status.Token, nil
}

// tokenKeyID requests a token and returns its header's kid.
func tokenKeyID(ctx context.Context, client kubernetes.Interface) (string, error) {
	token, err := requestToken(ctx, client)
	if err != nil {
		return "", err
	}
	hdr, _, ok := strings.Cut(token, ".")
	if !ok {
		return "", errors.New("the token is not a JWS")
	}
	return headerKeyID(hdr)
}

func headerKeyID(hdr64 string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(hdr64)
	if err != nil {
		return "", fmt.Errorf("the token's header: %w", err)
	}
	var hdr struct {
		KeyID string `json:"kid"`
	}
	if err := json.Unmarshal(raw, &hdr); err != nil {
		return "", fmt.Errorf("the token's header: %w", err)
	}
	return hdr.KeyID, nil
}

// satClaims are claims as kube-apiserver sends them to Sign for a
// TokenRequest (made per call: iat must be near the signer's clock).
func satClaims() string {
	now := time.Now().Unix()
	raw, _ := json.Marshal(map[string]any{
		"aud": []string{satIssuer}, "exp": now + int64(satExpiration/time.Second), "iat": now, "nbf": now,
		"iss": satIssuer, "jti": fmt.Sprintf("bench-%d", now),
		"kubernetes.io": map[string]any{"namespace": satNamespace, "serviceaccount": map[string]string{"name": satAccount, "uid": "00000000-0000-0000-0000-000000000000"}},
		"sub":           "system:serviceaccount:" + satNamespace + ":" + satAccount,
	})
	return base64.RawURLEncoding.EncodeToString(raw)
}

// endpointSign is a Sign call on the signer's socket, checked to be
// signed by the CA's key.
func endpointSign(client externaljwtv1.ExternalJWTSignerClient, kid string) func(ctx context.Context, claims string) error {
	return func(ctx context.Context, claims string) error {
		resp, err := client.Sign(ctx, &externaljwtv1.SignJWTRequest{Claims: claims})
		if err != nil {
			return err
		}
		got, err := headerKeyID(resp.Header)
		if err != nil {
			return err
		}
		if got != kid || resp.Signature == "" {
			return fmt.Errorf("signed by kid %q (want %q), signature %d bytes", got, kid, len(resp.Signature))
		}
		return nil
	}
}

// localSign is the same signature made in process, as kube-apiserver
// makes it with a key file: the claims checked (DecodeClaims, as every
// signer does), then jwtkey.Sign.
func localSign(key crypto.Signer, kid string) func(ctx context.Context, claims string) error {
	return func(_ context.Context, claims string) error {
		if _, err := jwtkey.DecodeClaims(claims); err != nil {
			return err
		}
		_, _, err := jwtkey.Sign(key, kid, claims)
		return err
	}
}

// satokensDir is where the benchmark's control plane lives.
func satokensDir(dir string) string { return filepath.Join(dir, "satokens") }

func renderSATokens(r *satokenResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nService-account tokens (issue #33): one etcd; kube-apiserver A (the cluster's: RSA-2048 key file, rekey-apiserver aggregated), B (ECDSA P-256 key file), C (--service-account-signing-endpoint on rekey-agent jwt-signer, which forwards each Sign to rekey-apiserver's signjwt through A as a client-certificate user) and D (the same with a jwt-signer whose kubeconfig is rekey-apiserver's own address and serving CA, not A) on it; CA %s, ECDSA P-256, Etcd key store, kid %s. %d callers, closed loop (one call in flight each), %s windows after a second unmeasured, %d rounds taking turns (each round starts one configuration later, every other round backwards). The load generator runs on the same cores.\n\n",
		satCA, r.KeyID, r.Clients, r.Window, r.Rounds)
	fmt.Fprintf(&b, "TokenRequest (POST serviceaccounts/%s/token, expirationSeconds %d), %d callers:\n\n", satAccount, int64(satExpiration/time.Second), r.Clients)
	fmt.Fprintln(&b, "| kube-apiserver | tokens | errors | tokens/s | per round | p50 | p99 | CPU ms / token: kube-apiserver A | B | C | D | rekey-apiserver | jwt-signer (C's) | jwt-signer D | etcd | all |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, t := range r.TokenRequest {
		renderSATokenRow(&b, t, []string{"kube-apiserver A", "kube-apiserver B", "kube-apiserver C", "kube-apiserver D", "rekey-apiserver", "jwt-signer", "jwt-signer D", "etcd"})
	}
	es, ep, rs, dr := r.TokenRequest[satKeyFileES256], r.TokenRequest[satEndpoint], r.TokenRequest[satKeyFileRSA], r.TokenRequest[satEndpointDirect]
	fmt.Fprintf(&b, "\nRatio endpoint through A (C) / ES256 key file (B): %s. C / RSA-2048 key file (A): %s.\n", satRatios(ep, es), satRatios(ep, rs))
	fmt.Fprintf(&b, "Ratio endpoint direct (D) / ES256 key file (B): %s. D / RSA-2048 key file (A): %s. D / C: %s.\n", satRatios(dr, es), satRatios(dr, rs), satRatios(dr, ep))

	fmt.Fprintf(&b, "\nSign, called straight on the signers: each jwt-signer's socket (k8s.io/externaljwt v1 gRPC client, claims as kube-apiserver sends them; each answer checked to carry the CA's kid) beside the same ES256 signature in process (what a key file costs kube-apiserver per token):\n\n")
	fmt.Fprintln(&b, "| signer | callers | signatures | errors | signatures/s | per round | p50 | p99 | CPU ms / signature: kube-apiserver A | rekey-apiserver | jwt-signer (C's) | jwt-signer D | etcd | bench process (callers; in process also the signer) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, i := range []int{satSignEndpoint1, satSignDirect1, satSignInProcess1, satSignEndpointN, satSignDirectN, satSignInProcessN} {
		s := r.Sign[i]
		callers := 1
		if i == satSignEndpointN || i == satSignInProcessN || i == satSignDirectN {
			callers = r.Clients
		}
		l := sortedDurations(s.Lat)
		per := make([]string, len(s.Rounds))
		for j, v := range s.Rounds {
			per[j] = fmt.Sprintf("%.0f", v)
		}
		cpu := func(name string) string {
			if s.Requests == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f", s.CPU[name]/float64(s.Requests)*1000)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Name, callers, s.Requests, s.Errors, s.rate(), strings.Join(per, ", "),
			fineMS(percentile(l, 0.5)), fineMS(percentile(l, 0.99)), cpu("kube-apiserver A"), cpu("rekey-apiserver"), cpu("jwt-signer"), cpu("jwt-signer D"), cpu("etcd"), cpu("bench"))
	}
	fmt.Fprintf(&b, "\nRatio socket through A / in process: one caller %s; %d callers %s.\n",
		satRatios(r.Sign[satSignEndpoint1], r.Sign[satSignInProcess1]), r.Clients, satRatios(r.Sign[satSignEndpointN], r.Sign[satSignInProcessN]))
	fmt.Fprintf(&b, "Ratio direct socket / socket through A: one caller %s; %d callers %s.\n",
		satRatios(r.Sign[satSignDirect1], r.Sign[satSignEndpoint1]), r.Clients, satRatios(r.Sign[satSignDirectN], r.Sign[satSignEndpointN]))
	return b.String()
}

func renderSATokenRow(b *strings.Builder, t readResult, procs []string) {
	l := sortedDurations(t.Lat)
	per := make([]string, len(t.Rounds))
	for i, v := range t.Rounds {
		per[i] = fmt.Sprintf("%.0f", v)
	}
	cells := make([]string, 0, len(procs)+1)
	all := 0.0
	for _, name := range procs {
		all += t.CPU[name]
		if t.Requests == 0 {
			cells = append(cells, "-")
			continue
		}
		cells = append(cells, fmt.Sprintf("%.2f", t.CPU[name]/float64(t.Requests)*1000))
	}
	if t.Requests > 0 {
		cells = append(cells, fmt.Sprintf("%.2f", all/float64(t.Requests)*1000))
	} else {
		cells = append(cells, "-")
	}
	fmt.Fprintf(b, "| %s | %d | %d | %.0f | %s | %s | %s | %s |\n", t.Name, t.Requests, t.Errors, t.rate(), strings.Join(per, ", "),
		msf(percentile(l, 0.5)), msf(percentile(l, 0.99)), strings.Join(cells, " | "))
}

// fineMS is a latency in milliseconds with three significant digits: an
// in-process signature takes tens of microseconds.
func fineMS(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.3f ms", v)
}

// satRatios is a's throughput, p50 and p99 over b's.
func satRatios(a, b readResult) string {
	la, lb := sortedDurations(a.Lat), sortedDurations(b.Lat)
	ratio := func(x, y float64) string {
		if y == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", x/y)
	}
	return fmt.Sprintf("throughput %s, p50 %s, p99 %s", ratio(a.rate(), b.rate()),
		ratio(float64(percentile(la, 0.5)), float64(percentile(lb, 0.5))), ratio(float64(percentile(la, 0.99)), float64(percentile(lb, 0.99))))
}
