package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TrustConsumer is something that verifies with the trust bundles of some
// CertificateAuthorities and reports which CA certificates it holds (a
// kube-apiserver's --client-ca-file kept by rekey-agent trust-sync, say).
// A rotation of a CA it names stays Preparing, the old CA signing, until
// it reports holding the new CA. One object per consumer: reports of
// thousands of consumers are thousands of small writes, not one object.
// Registering needs the verb "trust" on each CertificateAuthority named;
// only the user that registered a consumer (spec.reporter) may report
// for it.
type TrustConsumer struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec names the CAs the consumer verifies with.
	Spec TrustConsumerSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`

	// status is the consumer's last report.
	// +optional
	Status TrustConsumerStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// TrustConsumerSpec names the CAs a consumer verifies with.
type TrustConsumerSpec struct {
	// certificateAuthorities are the names of the CertificateAuthorities
	// whose trust bundles the consumer holds (at most 16).
	// +listType=set
	CertificateAuthorities []string `json:"certificateAuthorities" protobuf:"bytes,1,rep,name=certificateAuthorities"`

	// reporter is the user that registered the consumer and alone may
	// report for it. Set by the server at create; immutable.
	// +optional
	Reporter string `json:"reporter,omitempty" protobuf:"bytes,2,opt,name=reporter"`
}

// TrustConsumerStatus is what a consumer last reported.
type TrustConsumerStatus struct {
	// holds says, per CA, which of its certificates the consumer holds.
	// +listType=map
	// +listMapKey=certificateAuthority
	// +optional
	Holds []TrustHeld `json:"holds,omitempty" protobuf:"bytes,1,rep,name=holds"`
}

// TrustHeld is which certificates of one CA a consumer holds.
type TrustHeld struct {
	// certificateAuthority is the CA's name.
	CertificateAuthority string `json:"certificateAuthority" protobuf:"bytes,1,opt,name=certificateAuthority"`
	// fingerprints are the SHA-256 fingerprints ("SHA256:" and hex, as in
	// the CA's status) of the CA certificates held (at most 8).
	// +listType=set
	// +optional
	Fingerprints []string `json:"fingerprints,omitempty" protobuf:"bytes,2,rep,name=fingerprints"`
	// reportTime is when the server received this report (set by the
	// server whenever the fingerprints change).
	// +optional
	ReportTime *metav1.Time `json:"reportTime,omitempty" protobuf:"bytes,3,opt,name=reportTime"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TrustConsumerList is a list of TrustConsumers.
type TrustConsumerList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// items are the trust consumers.
	Items []TrustConsumer `json:"items" protobuf:"bytes,2,rep,name=items"`
}
